package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sandboxSet is a controller main with every sandbox field set, a reader
// researcher with the defaults, and local, which opts out of the sandbox.
func sandboxSet(t *testing.T) string {
	t.Helper()
	return writeSet(t, map[string]string{
		"main.md": `---
name: main
runtime: [/bin/sh]
tools: BCPQuery
workdir: /srv/main
sandbox:
  read_only: [/opt/models, /opt/data]
  read_write: [/srv/cache]
  network: [api.openai.com:443, "*.example.org", "[::1]:8080"]
bcp_channels:
  - {peer: researcher, role: controller, max_category: 1, budget_bits: 100}
---
`,
		"researcher.md": `---
name: researcher
runtime: [/bin/sh]
tools: BCPRespond
bcp_channels:
  - {peer: main, role: reader, max_category: 1, budget_bits: 100}
---
`,
		"local.md": `---
name: local
runtime: [/bin/sh]
sandbox: none
---
`,
	})
}

const notSandboxed = "WARNING local: NOT SANDBOXED (sandbox: none): its runtime can reach everything its user can; " +
	"bcpgw run refuses this set unless started with --allow-unsandboxed\n"

// sandboxLines returns the "  sandbox: " lines of validate's summary, by
// agent.
func sandboxLines(t *testing.T, stdout string) map[string]string {
	t.Helper()
	got := map[string]string{}
	agent := ""
	for _, line := range strings.Split(stdout, "\n") {
		if name, ok := strings.CutPrefix(line, "agent "); ok {
			agent, _, _ = strings.Cut(name, " ")
		}
		if s, ok := strings.CutPrefix(line, "  sandbox: "); ok {
			if _, dup := got[agent]; dup {
				t.Errorf("agent %s has two sandbox lines", agent)
			}
			got[agent] = s
		}
	}
	return got
}

// Every agent's sandbox is one line of the summary; an unsandboxed agent
// is also a WARNING on stderr, and the set is still valid.
func TestValidateSandbox(t *testing.T) {
	t.Parallel()
	dir := sandboxSet(t)
	state := filepath.Join(t.TempDir(), "state")
	tests := []struct {
		name  string
		args  []string
		env   []string
		state string // how a default workdir is shown
	}{
		{"no state directory", []string{"validate", dir}, []string{"BCPGW_STATE="}, "<state>"},
		{"--state", []string{"validate", "--state", state, dir}, []string{"BCPGW_STATE="}, state},
		{"BCPGW_STATE", []string{"validate", dir}, []string{"BCPGW_STATE=" + state}, state},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, runOpts{env: tt.env}, tt.args...)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0 (sandbox: none is valid)\n%s", r.code, r)
			}
			if r.stderr != notSandboxed {
				t.Errorf("stderr:\ngot  %q\nwant %q", r.stderr, notSandboxed)
			}
			got := sandboxLines(t, r.stdout)
			want := map[string]string{
				"main": "workdir /srv/main, read-only [/opt/models, /opt/data], read-write [/srv/cache], " +
					"network [api.openai.com:443, *.example.org, [::1]:8080] through the egress proxy",
				"researcher": "workdir " + tt.state + "/work/researcher (default), read-only [], read-write [], network none",
				"local":      "none (NOT SANDBOXED: its runtime can reach everything its user can), workdir " + tt.state + "/work/local (default)",
			}
			for agent, w := range want {
				if got[agent] != w {
					t.Errorf("%s: sandbox line:\ngot  %q\nwant %q", agent, got[agent], w)
				}
			}
			if len(got) != len(want) {
				t.Errorf("sandbox lines for %d agents, want %d\n%s", len(got), len(want), r.stdout)
			}
		})
	}
}

// The shipped examples are sandboxed with the defaults.
func TestValidateExamplesSandbox(t *testing.T) {
	t.Parallel()
	r := run(t, runOpts{env: []string{"BCPGW_STATE="}}, "validate", examples)
	got := sandboxLines(t, r.stdout)
	for _, agent := range []string{"main", "researcher"} {
		want := "workdir <state>/work/" + agent + " (default), read-only [], read-write [], network none"
		if got[agent] != want {
			t.Errorf("%s: got %q, want %q", agent, got[agent], want)
		}
	}
}

// --state applies the state-directory rule; without it the same set is
// valid. A relative --state is resolved against the working directory.
func TestValidateStateDirectory(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	dir := writeSet(t, map[string]string{"solo.md": fmt.Sprintf(`---
name: solo
runtime: [bin/demo-agent]
workdir: %s/work/solo
sandbox: {read_only: [%s]}
---
`, state, filepath.Dir(state))})
	r := run(t, runOpts{env: []string{"BCPGW_STATE="}}, "validate", dir)
	if r.code != 0 {
		t.Errorf("without --state: exit %d, want 0\n%s", r.code, r)
	}
	cwd, err := os.Getwd() // the binary runs here too
	if err != nil {
		t.Fatal(err)
	}
	relative, err := filepath.Rel(cwd, state)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"validate", "--state", state, dir},
		{"validate", "--state", relative + "/", dir},
	} {
		r = run(t, runOpts{env: []string{"BCPGW_STATE="}}, args...)
		file := filepath.Join(dir, "solo.md")
		want := []string{
			fmt.Sprintf("error: %s:4: workdir: %s/work/solo is inside the state directory %s: ", file, state, state),
			fmt.Sprintf("error: %s:5: sandbox.read_only[0]: %s contains the state directory %s: ", file, filepath.Dir(state), state),
		}
		lines := strings.Split(r.stderr, "\n")
		if r.code != 1 || len(lines) < len(want) {
			t.Fatalf("%q: exit %d, want 1 and %d errors\n%s", args, r.code, len(want), r)
		}
		for i, w := range want {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("%q: stderr line %d:\ngot  %q\nwant %q...", args, i, lines[i], w)
			}
		}
	}
}

func TestValidateSandboxJSON(t *testing.T) {
	t.Parallel()
	dir := sandboxSet(t)
	state := filepath.Join(t.TempDir(), "state")
	type sandbox struct {
		None           bool     `json:"none"`
		Workdir        string   `json:"workdir"`
		WorkdirDefault bool     `json:"workdir_default"`
		ReadOnly       []string `json:"read_only"`
		ReadWrite      []string `json:"read_write"`
		Network        string   `json:"network"`
		Allow          []string `json:"allow"`
	}
	for _, st := range []string{"", state} {
		args := []string{"validate", "--json", dir}
		if st != "" {
			args = append(args, "--state", st)
		}
		r := run(t, runOpts{env: []string{"BCPGW_STATE="}}, args...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("%q: want exit 0 and no stderr (the report carries everything)\n%s", args, r)
		}
		parseValidateJSON(t, r.stdout) // the report's shape
		var report struct {
			Agents []struct {
				Name    string          `json:"name"`
				Sandbox json.RawMessage `json:"sandbox"`
			} `json:"agents"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &report); err != nil {
			t.Fatal(err)
		}
		got := map[string]sandbox{}
		for _, a := range report.Agents {
			keys, _, err := objectMembers(string(a.Sandbox) + "\n")
			if want := []string{"none", "workdir", "workdir_default", "read_only", "read_write", "network", "allow"}; err != nil || !slices.Equal(keys, want) {
				t.Errorf("%s: sandbox keys %q (%v), want %q", a.Name, keys, err, want)
			}
			var sb sandbox
			if err := json.Unmarshal(a.Sandbox, &sb); err != nil {
				t.Fatal(err)
			}
			if sb.ReadOnly == nil || sb.ReadWrite == nil || sb.Allow == nil {
				t.Errorf("%s: read_only, read_write and allow must be arrays, never null: %s", a.Name, a.Sandbox)
			}
			got[a.Name] = sb
		}
		defaultWorkdir := func(agent string) string {
			if st == "" {
				return ""
			}
			return filepath.Join(st, "work", agent)
		}
		want := map[string]sandbox{
			"main": {Workdir: "/srv/main", ReadOnly: []string{"/opt/models", "/opt/data"}, ReadWrite: []string{"/srv/cache"},
				Network: "proxy", Allow: []string{"api.openai.com:443", "*.example.org", "[::1]:8080"}},
			"researcher": {Workdir: defaultWorkdir("researcher"), WorkdirDefault: true, ReadOnly: []string{}, ReadWrite: []string{}, Network: "none", Allow: []string{}},
			"local":      {None: true, Workdir: defaultWorkdir("local"), WorkdirDefault: true, ReadOnly: []string{}, ReadWrite: []string{}, Network: "none", Allow: []string{}},
		}
		for name, w := range want {
			g := got[name]
			if g.None != w.None || g.Workdir != w.Workdir || g.WorkdirDefault != w.WorkdirDefault || g.Network != w.Network ||
				!slices.Equal(g.ReadOnly, w.ReadOnly) || !slices.Equal(g.ReadWrite, w.ReadWrite) || !slices.Equal(g.Allow, w.Allow) {
				t.Errorf("--state %q: %s: sandbox:\ngot  %+v\nwant %+v", st, name, g, w)
			}
		}
	}
}
