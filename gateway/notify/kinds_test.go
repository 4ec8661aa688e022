package notify

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestKindsCoverSource keeps Kinds in step with the code: every event
// kind written as a literal under gateway/ is in it.
func TestKindsCoverSource(t *testing.T) {
	re := regexp.MustCompile(`(?:Kind:\s*|kind\s*:?=\s*|\.audit\((?:a,\s*)?|\.acted\()"([a-z_]+)"`)
	found := map[string]string{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			found[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 30 {
		t.Fatalf("found only %d kinds in the source: the pattern no longer matches how events are written", len(found))
	}
	for kind, path := range found {
		if strings.HasSuffix(kind, "_") {
			continue // a prefix: "approval_" + status, "egress_" + outcome, "runtime_" + type
		}
		if !slices.Contains(Kinds, kind) {
			t.Errorf("event kind %q (%s) is not in notify.Kinds: add it to gateway/notify/kinds.go, so that a notify file may name it", kind, path)
		}
	}
}
