package agents_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/internal/netpolicy"
)

func TestSandbox(t *testing.T) {
	t.Parallel()
	dest := func(s string) netpolicy.Destination {
		d, err := netpolicy.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	none := agents.Network{Mode: agents.NetworkNone}
	tests := []struct {
		yaml string
		want func(dir string) agents.Sandbox
	}{
		{"", func(string) agents.Sandbox { return agents.Sandbox{Network: none} }},
		{"sandbox: {}\n", func(string) agents.Sandbox { return agents.Sandbox{Network: none} }},
		{"sandbox: none\n", func(string) agents.Sandbox { return agents.Sandbox{None: true, Network: none} }},
		{"sandbox: \"none\"\n", func(string) agents.Sandbox { return agents.Sandbox{None: true, Network: none} }},
		{"sandbox: {network: none}\n", func(string) agents.Sandbox { return agents.Sandbox{Network: none} }},
		{"sandbox: {network: host}\n", func(string) agents.Sandbox {
			return agents.Sandbox{Network: agents.Network{Mode: agents.NetworkHost}}
		}},
		{"sandbox:\n  network: [api.openai.com, \"*.example.org:443\", \"127.0.0.1:11434\", \"[::1]:8080\"]\n", func(string) agents.Sandbox {
			return agents.Sandbox{Network: agents.Network{Mode: agents.NetworkProxy, Allow: []netpolicy.Destination{
				dest("api.openai.com"), dest("*.example.org:443"), dest("127.0.0.1:11434"), dest("[::1]:8080"),
			}}}
		}},
		{"sandbox:\n  read_only: [/opt/models/, ../data, //usr//share]\n  read_write: [/srv/drop, ../drop/./x/..]\n", func(dir string) agents.Sandbox {
			up := filepath.Dir(dir)
			return agents.Sandbox{
				ReadOnly:  []string{"/opt/models", filepath.Join(up, "data"), "/usr/share"},
				ReadWrite: []string{"/srv/drop", filepath.Join(up, "drop")},
				Network:   none,
			}
		}},
		// A read-only subdirectory of the agents directory is allowed: the
		// loader does not look into subdirectories.
		{"sandbox: {read_only: [sources]}\n", func(dir string) agents.Sandbox {
			return agents.Sandbox{ReadOnly: []string{filepath.Join(dir, "sources")}, Network: none}
		}},
	}
	for _, tt := range tests {
		dir := writeSet(t, map[string]string{"solo.md": solo(tt.yaml)})
		got, want := mustLoad(t, dir).Agent("solo").Sandbox, tt.want(dir)
		if got.None != want.None || !slices.Equal(got.ReadOnly, want.ReadOnly) || !slices.Equal(got.ReadWrite, want.ReadWrite) ||
			got.Network.Mode != want.Network.Mode || !slices.Equal(got.Network.Allow, want.Network.Allow) {
			t.Errorf("%q: Sandbox:\ngot  %+v\nwant %+v", tt.yaml, got, want)
		}
	}
}

func TestSandboxErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml string
		want []string // errors, without the directory
	}{
		{"sandbox: off\n", []string{`solo.md:4: sandbox: must be none or a map of read_only, read_write and network, got "off"`}},
		{"sandbox: None\n", []string{`solo.md:4: sandbox: must be none or a map of read_only, read_write and network, got "None"`}},
		{"sandbox: false\n", []string{`solo.md:4: sandbox: must be none or a map of read_only, read_write and network, got a boolean`}},
		{"sandbox:\n", []string{`solo.md:4: sandbox: must be none or a map of read_only, read_write and network, got nothing`}},
		{"sandbox: [none]\n", []string{`solo.md:4: sandbox: must be none or a map of read_only, read_write and network, got a list`}},
		{"sandbox:\n  read_only: [/a]\n  writable: [/b]\n", []string{`solo.md:6: sandbox.writable: unknown field (known: network, read_only, read_write)`}},
		{"sandbox:\n  read_only: /opt/models\n", []string{`solo.md:5: sandbox.read_only: must be a list, got a string`}},
		{"sandbox:\n  read_write: [\"\", /, \"/srv/a\\0\", /srv/b, /srv/b/, {x: 1}]\n", []string{
			`solo.md:5: sandbox.read_write[0]: must not be empty`,
			`solo.md:5: sandbox.read_write[1]: "/" is the root directory: name the directories the runtime needs`,
			`solo.md:5: sandbox.read_write[2]: must not contain a NUL character`,
			`solo.md:5: sandbox.read_write[4]: /srv/b is listed twice (also sandbox.read_write[3])`,
			`solo.md:5: sandbox.read_write[5]: must be a string, got a map`,
		}},
		{"sandbox:\n  read_write: [/srv/x]\n  read_only: [/srv/y, /srv/x]\n", []string{
			`solo.md:5: sandbox.read_write[0]: /srv/x is also read-only (sandbox.read_only[1]); list a path once, in read_write if the runtime must write it`,
		}},
		{"sandbox: {network: []}\n", []string{`solo.md:4: sandbox.network: an empty list allows nothing: write none for no network`}},
		{"sandbox: {network: all}\n", []string{`solo.md:4: sandbox.network: must be none, host or a list of destinations: write [all] for one destination`}},
		{"sandbox: {network: \"http://x\"}\n", []string{`solo.md:4: sandbox.network: must be none, host or a list of destinations, got "http://x"`}},
		{"sandbox: {network: 8080}\n", []string{`solo.md:4: sandbox.network: must be none, host or a list of destinations, got an integer`}},
		{"sandbox: {network: {host: x}}\n", []string{`solo.md:4: sandbox.network: must be none, host or a list of destinations, got a map`}},
		{"sandbox:\n  network:\n    - api.openai.com\n    - https://api.openai.com/v1\n    - \"*\"\n    - host\n    - \"x:99999\"\n    - API.openai.com.\n", []string{
			`solo.md:7: sandbox.network[1]: "https://api.openai.com/v1": write a host or host:port, not a URL`,
			`solo.md:8: sandbox.network[2]: "*": '*' is allowed only as a leading "*."`,
			`solo.md:9: sandbox.network[3]: "host" in a list would be a host name; for the mode write network: host`,
			`solo.md:10: sandbox.network[4]: "x:99999": port "99999" is not a number from 1 to 65535`,
			`solo.md:11: sandbox.network[5]: api.openai.com is listed twice (also sandbox.network[0])`,
		}},
	}
	for _, tt := range tests {
		dir := writeSet(t, map[string]string{"solo.md": solo(tt.yaml)})
		if got := errorLines(loadErrors(t, dir), dir); !slices.Equal(got, tt.want) {
			t.Errorf("%q:\ngot  %q\nwant %q", tt.yaml, got, tt.want)
		}
	}
}

// TestUnsandboxed: sandbox: none loads (it is the operator's call, made
// again when starting the gateway), and Set lists who asked for it.
func TestUnsandboxed(t *testing.T) {
	t.Parallel()
	files := pairSet(1, 1, "")
	files["main.md"] = strings.Replace(files["main.md"], "tools:", "sandbox: none\ntools:", 1)
	files["zed.md"] = solo("sandbox: none\n")
	files["other.md"] = strings.Replace(solo(""), "name: solo", "name: other", 1)
	set := mustLoad(t, writeSet(t, files))
	var got []string
	for _, d := range set.Unsandboxed() {
		got = append(got, d.Name)
	}
	if want := []string{"main", "solo"}; !slices.Equal(got, want) {
		t.Errorf("Unsandboxed: got %q, want %q", got, want)
	}
	if got := mustLoad(t, examplesDir).Unsandboxed(); len(got) != 0 {
		t.Errorf("examples: Unsandboxed: got %d agents, want none", len(got))
	}
}

// pathSet is pairSet (main controls researcher) with extra top-level YAML
// for each agent; "DIR" in it is replaced by base, a directory outside the
// agents directory.
func pathSet(t *testing.T, mainYAML, researcherYAML string) (agentsDir, base string) {
	t.Helper()
	root := t.TempDir()
	base = filepath.Join(root, "base")
	files := pairSet(1, 1, "")
	files["main.md"] = strings.Replace(files["main.md"], "tools:", strings.ReplaceAll(mainYAML, "DIR", base)+"tools:", 1)
	files["researcher.md"] = strings.Replace(files["researcher.md"], "tools:", strings.ReplaceAll(researcherYAML, "DIR", base)+"tools:", 1)
	agentsDir = filepath.Join(root, "agents")
	for name, content := range files {
		if err := os.MkdirAll(agentsDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(agentsDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return agentsDir, base
}

// TestReaderWritesControllerPaths: a Reader may not write where a
// Controller works or reads; the reverse, and disjoint paths, are fine.
func TestReaderWritesControllerPaths(t *testing.T) {
	t.Parallel()
	const why = ": what a Reader writes must reach a Controller only through the gateway"
	tests := []struct {
		name             string
		main, researcher string
		want             []string // errors; BASE for the directory outside the agents directory
	}{
		{"disjoint", "workdir: DIR/main\nsandbox: {read_only: [DIR/models]}\n", "workdir: DIR/researcher\nsandbox: {read_write: [DIR/drop]}\n", nil},
		{"both read the same directory", "sandbox: {read_only: [DIR/models]}\n", "sandbox: {read_only: [DIR/models]}\n", nil},
		{"controller writes where the reader reads", "sandbox: {read_write: [DIR/out]}\n", "sandbox: {read_only: [DIR/out]}\n", nil},
		{"same workdir", "workdir: DIR/shared\n", "workdir: DIR/shared\n", []string{
			"researcher.md:4: workdir: reader researcher may write BASE/shared, which is BASE/shared (workdir of controller main, main.md:4)" + why,
		}},
		{"reader workdir inside the controller's read_only", "sandbox: {read_only: [DIR]}\n", "workdir: DIR/researcher\n", []string{
			"researcher.md:4: workdir: reader researcher may write BASE/researcher, which is inside BASE (sandbox.read_only[0] of controller main, main.md:4)" + why,
		}},
		{"reader read_write contains the controller's workdir", "workdir: DIR/main\n", "sandbox:\n  read_write: [/srv/x, DIR]\n", []string{
			"researcher.md:5: sandbox.read_write[1]: reader researcher may write BASE, which contains BASE/main (workdir of controller main, main.md:4)" + why,
		}},
		{"every overlap reported", "workdir: DIR/main\nsandbox: {read_write: [DIR/out]}\n", "workdir: DIR\n", []string{
			"researcher.md:4: workdir: reader researcher may write BASE, which contains BASE/main (workdir of controller main, main.md:4)" + why,
			"researcher.md:4: workdir: reader researcher may write BASE, which contains BASE/out (sandbox.read_write[0] of controller main, main.md:5)" + why,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir, base := pathSet(t, tt.main, tt.researcher)
			_, err := agents.LoadDir(dir)
			var got []string
			if err != nil {
				got = errorLines(loadErrors(t, dir), dir)
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, strings.ReplaceAll(strings.ReplaceAll(w, "BASE", base), dir+string(filepath.Separator), ""))
			}
			if !slices.Equal(got, want) {
				t.Errorf("\ngot  %q\nwant %q", got, want)
			}
		})
	}
}

// TestAgentAndStateDirectories: what may not reach into the agents
// directory (always known) and the state directory (when given).
func TestAgentAndStateDirectories(t *testing.T) {
	t.Parallel()
	const (
		agentsWhy = ": a runtime must not be able to change definitions; choose a directory outside it"
		stateWhy  = ": it holds the gateway's store, its control socket and the agents' own workdirs; choose a directory outside it"
		workdirOr = ", or leave workdir out for one of its own under the state directory"
		hidden    = ": it must not be visible inside a sandbox; name the directories the runtime needs"
	)
	tests := []struct {
		name  string
		yaml  string // solo's; AGENTS, STATE and ROOT are replaced
		state bool   // load with the state directory
		want  []string
	}{
		{"workdir outside both", "workdir: ROOT/work\n", true, nil},
		{"workdir is the state directory", "workdir: STATE\n", true, []string{"solo.md:4: workdir: STATE is the state directory STATE" + stateWhy + workdirOr}},
		{"workdir inside the state directory", "workdir: STATE/work/solo\n", true, []string{"solo.md:4: workdir: STATE/work/solo is inside the state directory STATE" + stateWhy + workdirOr}},
		{"state directory unknown", "workdir: STATE/work/solo\n", false, nil},
		{"workdir contains both", "workdir: ROOT\n", true, []string{
			"solo.md:4: workdir: ROOT contains the agents directory AGENTS" + agentsWhy + workdirOr,
			"solo.md:4: workdir: ROOT contains the state directory STATE" + stateWhy + workdirOr,
		}},
		{"read_write inside the agents directory", "sandbox: {read_write: [drafts]}\n", false, []string{"solo.md:4: sandbox.read_write[0]: AGENTS/drafts is inside the agents directory AGENTS" + agentsWhy}},
		{"read_write contains the state directory", "sandbox: {read_write: [/tmp/x, ROOT]}\n", true, []string{
			"solo.md:4: sandbox.read_write[1]: ROOT contains the agents directory AGENTS" + agentsWhy,
			"solo.md:4: sandbox.read_write[1]: ROOT contains the state directory STATE" + stateWhy,
		}},
		{"read_only inside the agents directory", "sandbox: {read_only: [sources]}\n", true, nil},
		{"read_only is the agents directory", "sandbox: {read_only: [.]}\n", true, []string{"solo.md:4: sandbox.read_only[0]: AGENTS is the agents directory AGENTS" + hidden}},
		{"read_only inside the state directory", "sandbox: {read_only: [STATE/work/other]}\n", true, []string{"solo.md:4: sandbox.read_only[0]: STATE/work/other is inside the state directory STATE" + hidden}},
		{"read_only contains both", "sandbox: {read_only: [ROOT]}\n", true, []string{
			"solo.md:4: sandbox.read_only[0]: ROOT contains the agents directory AGENTS" + hidden,
			"solo.md:4: sandbox.read_only[0]: ROOT contains the state directory STATE" + hidden,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			dir, state := filepath.Join(root, "agents"), filepath.Join(root, "state")
			replace := strings.NewReplacer("AGENTS", dir, "STATE", state, "ROOT", root).Replace
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "solo.md"), []byte(solo(replace(tt.yaml))), 0o644); err != nil {
				t.Fatal(err)
			}
			opts := agents.LoadOptions{}
			if tt.state {
				opts.StateDir = state
			}
			got := loadLines(t, dir, opts)
			var want []string
			for _, w := range tt.want {
				want = append(want, strings.ReplaceAll(replace(w), dir+string(filepath.Separator), ""))
			}
			if !slices.Equal(got, want) {
				t.Errorf("\ngot  %q\nwant %q", got, want)
			}
		})
	}
}

// loadLines loads dir with opts and returns its errors as errorLines does,
// or nil when it loads.
func loadLines(t *testing.T, dir string, opts agents.LoadOptions) []string {
	t.Helper()
	set, err := agents.Load(dir, opts)
	if err == nil {
		return nil
	}
	le, ok := err.(*agents.LoadError)
	if !ok || set != nil {
		t.Fatalf("Load: got set %v, error %v (%T); want a *agents.LoadError", set != nil, err, err)
	}
	return errorLines(le, dir)
}

// TestPathRulesFollowSymlinks: a symlink does not dodge the path rules,
// whether it stands for the protected directory or for the path named in
// the definition, and whether or not the path below it exists yet.
func TestPathRulesFollowSymlinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		if err := os.Symlink(target, name); err != nil {
			t.Skipf("symlink: %v", err)
		}
	}
	real := filepath.Join(root, "real")
	mk(filepath.Join(real, "agents"))
	mk(filepath.Join(real, "state"))
	mk(filepath.Join(root, "shared"))
	link(filepath.Join(real, "agents"), filepath.Join(root, "agents-link")) // another name for the agents directory
	link(filepath.Join(real, "state"), filepath.Join(root, "state-link"))
	link(filepath.Join(root, "shared"), filepath.Join(root, "shared-link"))
	dir := filepath.Join(real, "agents")

	tests := []struct {
		name  string
		main  string // main's extra YAML; ROOT is replaced
		state string // the state directory given to Load
		want  string // the one error expected, after "main.md:4: "; ROOT is replaced
	}{
		{"workdir through a link to the agents directory", "workdir: ROOT/agents-link/work\n", "",
			"workdir: ROOT/agents-link/work (through symlinks ROOT/real/agents/work) is inside the agents directory ROOT/real/agents: a runtime must not be able to change definitions; choose a directory outside it, or leave workdir out for one of its own under the state directory"},
		{"state directory given through a link", "workdir: ROOT/real/state/work\n", "ROOT/state-link",
			"workdir: ROOT/real/state/work is inside the state directory ROOT/state-link (through symlinks ROOT/real/state): it holds the gateway's store, its control socket and the agents' own workdirs; choose a directory outside it, or leave workdir out for one of its own under the state directory"},
	}
	for _, tt := range tests {
		replace := strings.NewReplacer("ROOT", root).Replace
		if err := os.WriteFile(filepath.Join(dir, "main.md"), []byte(strings.Replace(solo(replace(tt.main)), "name: solo", "name: main", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		got := loadLines(t, dir, agents.LoadOptions{StateDir: replace(tt.state)})
		// As errorLines does: the agents directory and its separator go.
		want := []string{"main.md:4: " + strings.ReplaceAll(replace(tt.want), dir+string(filepath.Separator), "")}
		if !slices.Equal(got, want) {
			t.Errorf("%s:\ngot  %q\nwant %q", tt.name, got, want)
		}
	}

	// A Reader writing through a link into what a Controller reads.
	agentsDir, _ := pathSet(t, "sandbox: {read_only: ["+filepath.Join(root, "shared")+"]}\n",
		"sandbox: {read_write: ["+filepath.Join(root, "shared-link", "inbox")+"]}\n")
	got := errorLines(loadErrors(t, agentsDir), agentsDir)
	want := []string{"researcher.md:4: sandbox.read_write[0]: reader researcher may write " + filepath.Join(root, "shared-link", "inbox") +
		" (through symlinks " + filepath.Join(root, "shared", "inbox") + "), which is inside " + filepath.Join(root, "shared") +
		" (sandbox.read_only[0] of controller main, main.md:4): what a Reader writes must reach a Controller only through the gateway"}
	if !slices.Equal(got, want) {
		t.Errorf("reader through a link:\ngot  %q\nwant %q", got, want)
	}
}
