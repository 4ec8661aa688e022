package bcpagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/bcpgw/bcpgw/internal/llm"
	"github.com/bcpgw/bcpgw/runtime"
)

// Bounds of ReadFile.
const (
	readMaxBytes   = 256 << 10
	readMaxEntries = 500
)

// readFile returns the text of the file at path, or the listing of the
// directory, inside root. It refuses anything outside root: an absolute
// path elsewhere, any ".." component (even one that would stay inside:
// there is no reason to write one), and symbolic links that lead out
// (os.Root resolves every component within root and refuses escapes).
// Only regular files and directories are read; binary files are refused.
func readFile(root, path string) (string, error) {
	if path == "" {
		return "", errors.New("ReadFile needs a path")
	}
	rel := path
	if filepath.IsAbs(path) {
		r, err := filepath.Rel(root, filepath.Clean(path))
		if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return "", fmt.Errorf("%s is outside the working directory: only files under it can be read", path)
		}
		rel = r
	}
	if slices.Contains(strings.Split(filepath.ToSlash(rel), "/"), "..") {
		return "", fmt.Errorf("%s: paths with .. are refused; give a path inside the working directory", path)
	}
	rel = filepath.Clean(rel)
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", fmt.Errorf("open working directory: %w", err)
	}
	defer r.Close()
	fi, err := r.Stat(rel)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, unwrapPathError(err))
	}
	switch {
	case fi.IsDir():
		return listDir(r, rel, path)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	// O_NONBLOCK: were it swapped for a FIFO since the Stat, opening it
	// must not hang the turn.
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, unwrapPathError(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, readMaxBytes+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	more := len(data) > readMaxBytes
	if more {
		data = data[:readMaxBytes]
		for len(data) > 0 && !utf8.Valid(data) && len(data) > readMaxBytes-utf8.UTFMax {
			data = data[:len(data)-1] // a rune cut at the limit
		}
	}
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
		return "", fmt.Errorf("%s is a binary file (not UTF-8 text)", path)
	}
	text := string(data)
	if more {
		text += fmt.Sprintf("\n[... cut: the first %d bytes of %d are shown]", readMaxBytes, fi.Size())
	}
	return text, nil
}

func listDir(r *os.Root, rel, path string) (string, error) {
	d, err := r.Open(rel)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, unwrapPathError(err))
	}
	defer d.Close()
	entries, err := d.ReadDir(readMaxEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("list %s: %w", path, err)
	}
	var names []string
	for _, e := range entries[:min(len(entries), readMaxEntries)] {
		name := e.Name()
		if e.IsDir() {
			name += "/"
		}
		names = append(names, name)
	}
	slices.Sort(names)
	out := fmt.Sprintf("Directory %s:\n%s", path, strings.Join(names, "\n"))
	if len(entries) > readMaxEntries {
		out += fmt.Sprintf("\n[... more than %d entries; the rest are not listed]", readMaxEntries)
	}
	return out, nil
}

// unwrapPathError drops the *PathError's path, which names the relative
// path the model did not write; the caller names the path it wrote.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		if pe.Err.Error() == "path escapes from parent" {
			return errors.New("leads outside the working directory (through a symbolic link): refused")
		}
		return pe.Err
	}
	return err
}

// readFileTool is ReadFile.
func (a *Agent) readFileTool() tool {
	return tool{
		def: llm.Tool{
			Name:        ToolReadFile,
			Description: fmt.Sprintf("Read a text file, or list a directory, inside your working directory. Paths are relative to it; nothing outside it can be read. At most %d KiB of a file is returned.", readMaxBytes>>10),
			Schema: mustSchema(Schema{
				"type":                 "object",
				"properties":           Schema{"path": Schema{"type": "string", "description": "A path relative to the working directory, e.g. notes/today.md or . for the directory itself."}},
				"required":             []string{"path"},
				"additionalProperties": false,
			}),
		},
		run: func(_ context.Context, _ *runtime.Client, raw json.RawMessage) (string, error) {
			var args struct {
				Path string `json:"path"`
			}
			if err := decodeArgs(ToolReadFile, raw, &args); err != nil {
				return "", err
			}
			return readFile(a.root, args.Path)
		},
	}
}
