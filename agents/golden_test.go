package agents_test

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
)

var update = flag.Bool("update", false, "rewrite golden files")

// generated holds files that a golden case needs but that are better
// written by the test than committed: keyed by case ("broken/<case>"),
// then file name.
var generated = map[string]map[string][]byte{
	"broken/binary-file": {
		// A PNG header: not UTF-8, with NUL bytes.
		"logo.md": {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, '\r', 'I', 'H', 'D', 'R', 0xff, 0xfe},
	},
	"broken/invalid-utf8": {
		"main.md": []byte("---\nname: main\nruntime: [bin/agent]\ndescription: caf\xe9\n---\nbody\n"),
	},
}

// TestGolden loads every case directory under testdata/broken and
// testdata/valid and compares what LoadDir reports with the case's
// golden.txt: errors (one per line), then "warning: " lines, then "note: "
// lines. Each case is copied into a fresh directory named "agents" (without
// its golden.txt, which would otherwise be noted as a skipped file), so
// messages read "agents/main.md:LINE: ...". Run with -update to rewrite the
// golden files, then review every change by hand.
func TestGolden(t *testing.T) {
	for _, kind := range []string{"broken", "valid"} {
		cases, err := os.ReadDir(filepath.Join("testdata", kind))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if !c.IsDir() {
				continue
			}
			name := kind + "/" + c.Name()
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				src := filepath.Join("testdata", kind, c.Name())
				root := t.TempDir()
				dir := filepath.Join(root, "agents")
				copyCase(t, src, dir)
				for file, data := range generated[name] {
					if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}

				set, err := agents.LoadDir(dir)
				var (
					errs     []*agents.ParseError
					warnings []*agents.Warning
					notes    []string
				)
				if kind == "valid" {
					if err != nil {
						t.Fatalf("LoadDir: unexpected error:\n%v", err)
					}
					warnings, notes = set.Warnings, set.Notes
				} else {
					var le *agents.LoadError
					if !errors.As(err, &le) {
						t.Fatalf("LoadDir: got error %v (%T), want a *agents.LoadError", err, err)
					}
					if set != nil {
						t.Errorf("LoadDir returned a set along with its error")
					}
					if len(le.Errors) == 0 {
						t.Fatalf("LoadError has no errors")
					}
					errs, warnings, notes = le.Errors, le.Warnings, le.Notes
				}
				checkSorted(t, errs, warnings)
				checkLines(t, errs, warnings)

				var b strings.Builder
				for _, e := range errs {
					b.WriteString(e.Error() + "\n")
				}
				for _, w := range warnings {
					b.WriteString("warning: " + w.String() + "\n")
				}
				for _, n := range notes {
					b.WriteString("note: " + n + "\n")
				}
				got := strings.ReplaceAll(b.String(), root+string(filepath.Separator), "")

				goldenPath := filepath.Join(src, "golden.txt")
				if *update {
					if err := os.WriteFile(goldenPath, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(goldenPath)
				if err != nil {
					t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
				}
				if got != string(want) {
					t.Errorf("LoadDir(%s) output differs from %s\n--- got\n%s--- want\n%s", src, goldenPath, got, want)
				}
			})
		}
	}
}

// copyCase copies a case directory, except its golden.txt, to dst.
func copyCase(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if rel == "golden.txt" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkSorted checks that errors and warnings come sorted by file, then
// line.
func checkSorted(t *testing.T, errs []*agents.ParseError, warnings []*agents.Warning) {
	t.Helper()
	byPos := func(a, b *agents.ParseError) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	}
	if !slices.IsSortedFunc(errs, byPos) {
		t.Errorf("errors are not sorted by file and line")
	}
	ws := make([]*agents.ParseError, len(warnings))
	for i, w := range warnings {
		ws[i] = (*agents.ParseError)(w)
	}
	if !slices.IsSortedFunc(ws, byPos) {
		t.Errorf("warnings are not sorted by file and line")
	}
}

// checkLines checks that every reported line exists in its file.
func checkLines(t *testing.T, errs []*agents.ParseError, warnings []*agents.Warning) {
	t.Helper()
	all := slices.Clone(errs)
	for _, w := range warnings {
		all = append(all, (*agents.ParseError)(w))
	}
	for _, e := range all {
		if e.Line < 0 {
			t.Errorf("%s: negative line", e.Error())
			continue
		}
		if e.Line == 0 {
			continue
		}
		data, err := os.ReadFile(e.File)
		if err != nil {
			t.Errorf("%s: names a file that cannot be read: %v", e.Error(), err)
			continue
		}
		if n := bytes.Count(data, []byte("\n")) + 1; e.Line > n {
			t.Errorf("%s: line %d is past the end of the file (%d lines)", e.Error(), e.Line, n)
		}
	}
}
