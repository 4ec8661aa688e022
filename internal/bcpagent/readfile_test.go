package bcpagent

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadFileConfinement(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	write(t, secret, "top secret")
	root := t.TempDir()
	write(t, filepath.Join(root, "notes.txt"), "hello notes")
	write(t, filepath.Join(root, "sub", "deep.txt"), "deep text")
	write(t, filepath.Join(root, "binary.bin"), "a\x00b")
	symlink(t, secret, filepath.Join(root, "escape.txt"))               // absolute target outside
	symlink(t, "../"+filepath.Base(outside), filepath.Join(root, "up")) // relative, leads out
	symlink(t, "sub/deep.txt", filepath.Join(root, "inside.txt"))       // stays inside
	symlink(t, outside, filepath.Join(root, "sub", "dirlink"))          // a directory outside
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		path string
		want string // in the text, or in the error when refused
		ok   bool
	}{
		{"notes.txt", "hello notes", true},
		{"./sub/deep.txt", "deep text", true},
		{filepath.Join(root, "notes.txt"), "hello notes", true}, // absolute, inside
		{"inside.txt", "deep text", true},                       // a symlink that stays inside
		{".", "Directory .:\nbinary.bin\nescape.txt\nfifo\ninside.txt\nnotes.txt\nsub/\nup", true},
		{secret, "outside the working directory", false},
		{"/etc/passwd", "outside the working directory", false},
		{"../" + filepath.Base(outside) + "/secret.txt", "paths with .. are refused", false},
		{"sub/../notes.txt", "paths with .. are refused", false},
		{"escape.txt", "leads outside the working directory", false},
		{"up/secret.txt", "leads outside the working directory", false},
		{"sub/dirlink/secret.txt", "leads outside the working directory", false},
		{"binary.bin", "is a binary file", false},
		{"fifo", "is not a regular file", false},
		{"missing.txt", "no such file", false},
		{"", "needs a path", false},
	}
	for _, tt := range tests {
		got, err := readFile(root, tt.path)
		if tt.ok {
			if err != nil || !strings.Contains(got, tt.want) {
				t.Errorf("readFile(%q) = %q, %v; want %q", tt.path, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("readFile(%q) = %q, %v; want an error with %q", tt.path, got, err, tt.want)
		}
		if strings.Contains(got, "top secret") || (err != nil && strings.Contains(err.Error(), "top secret")) {
			t.Errorf("readFile(%q) leaked the secret", tt.path)
		}
	}
}

func TestReadFileCutsLargeFiles(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "big.txt"), strings.Repeat("é", readMaxBytes)) // 2 bytes a rune
	got, err := readFile(root, "big.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "[... cut: the first 262144 bytes of 524288 are shown]") || len(got) > readMaxBytes+100 {
		t.Errorf("len %d, tail %q", len(got), got[len(got)-80:])
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
