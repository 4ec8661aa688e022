package agents

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseTriOnyx checks that no file content panics the TriOnyx
// translation, that its errors name the file and a line inside it, and
// that what it accepts stays in the workspace: a workdir, read-only and
// writable paths under it, and a runtime.
func FuzzParseTriOnyx(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/trionyx/workspace/agent-definitions/*.md")
	for _, p := range seeds {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"---\nname: a\ntools: Read\n---\n",
		"---\nname: a\ntools: Read\nfs_read: [\"/../../etc/**\", \"x/**/*\", \"/a/*.md\"]\nfs_write: [/, \"/**\"]\n---\n",
		"---\nname: a\ntools: [Read]\nnetwork: [\"*.x.org:443\", \"127.0.0.1\"]\nheartbeat_every: 1\nidle_timeout: 99999999999999999h\n---\n",
		"---\nname: a\ntools: Read\nbcp_channels:\n  - {peer: b, role: controller, rates: {cat1: 1/second, cat2: \"3\", cat3: -1}, subscriptions: [{id: s, category: 2, questions: [{name: q, format: date}]}]}\n---\n",
		"---\nname: a\ntools: Read\nenv: {ANTHROPIC_BASE_URL: \"http://[::1]:99/v1\"}\nbrowser: yes\nbase_taint: high\nreflection: \"@daily\"\n---\n",
	} {
		f.Add([]byte(s))
	}
	ws := f.TempDir()
	defs := filepath.Join(ws, "agent-definitions")
	if err := os.MkdirAll(filepath.Join(ws, "x"), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		set := &Set{Dir: defs, opts: LoadOptions{
			Compat: CompatTriOnyx, DefaultRuntime: []string{"/bin/true"},
			LookupEnv: func(string) (string, bool) { return "", false },
		}}
		def, errs := set.parseFile("fuzz.md", data)
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, e := range errs {
			if e.File != "fuzz.md" || e.Line < 0 || e.Line > lines || e.Msg == "" {
				t.Fatalf("malformed error %+v (file has %d lines)", e, lines)
			}
		}
		for _, w := range set.Warnings {
			if w.File != "fuzz.md" || w.Line < 0 || w.Line > lines {
				t.Fatalf("malformed warning %+v", w)
			}
		}
		if len(errs) > 0 || def == nil {
			return
		}
		if !agentName.MatchString(def.Name) || len(def.Runtime) == 0 {
			t.Fatalf("accepted definition with name %q runtime %q", def.Name, def.Runtime)
		}
		inside := func(p string) bool { return strings.HasPrefix(p, ws+string(filepath.Separator)) }
		if !inside(def.Workdir) {
			t.Fatalf("workdir %s outside the workspace %s", def.Workdir, ws)
		}
		for _, p := range append(append([]string{}, def.Sandbox.ReadOnly...), def.Sandbox.ReadWrite...) {
			if p != ws && !inside(p) {
				t.Fatalf("sandbox path %s outside the workspace %s", p, ws)
			}
		}
		if def.Sandbox.None {
			t.Fatal("a TriOnyx definition came out unsandboxed")
		}
	})
}
