package agents

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse checks that no file content panics the parser, and that every
// outcome is well formed: a definition with a valid name, or errors that
// name the file and a line inside it.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("../examples/agents/*.md")
	for _, p := range seeds {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"",
		"---\n---\n",
		"---\n- a\n- b\n---\n",
		"---\nname: x\n\truntime: y\n---\n",
		"---\nname: a\nruntime: b\nbcp_channels:\n  - {peer: c, role: controller, max_category: 3, budget_bits: 1, subscriptions: [{id: s, category: 2, questions: [{id: q, question: q, max_words: 1}]}]}\n---\nbody",
		"---\nname: &a x\nruntime: *a\n---\n",
		"---\nname: a\nname: b\n---\n",
		"no frontmatter",
		"---\n\"0000\r0\n---", // a lone CR: YAML's line break, not ours (found by fuzzing)
		"---\r\nname: a\r\nruntime: b\r\n---\r\n",
		"---\nname: a\n",
		"\x00\x01\x02",
		"---\nname: a\nruntime: b\nworkdir: ../w\nsandbox:\n  read_only: [x, /y/, \"\"]\n  read_write: [/, \"a\\0\"]\n  network: [\"[::1]:8\", \"*.a.b\", host]\n---\n",
		"---\nname: a\nruntime: b\nsandbox: none\n---\n",
		"---\nname: a\nruntime: b\nsandbox: {network: []}\n---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		def, err := Parse("fuzz.md", data)
		if err == nil {
			if !agentName.MatchString(def.Name) || len(def.Runtime) == 0 {
				t.Fatalf("accepted definition with name %q runtime %q", def.Name, def.Runtime)
			}
			return
		}
		le, ok := err.(*LoadError)
		if !ok || len(le.Errors) == 0 {
			t.Fatalf("error is %T %v, want a *LoadError with errors", err, err)
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, e := range le.Errors {
			if e.File != "fuzz.md" || e.Line < 0 || e.Line > lines || e.Msg == "" {
				t.Fatalf("malformed error %+v (file has %d lines)", e, lines)
			}
			if !strings.HasPrefix(e.Error(), "fuzz.md") {
				t.Fatalf("error text %q does not start with the file", e.Error())
			}
		}
	})
}
