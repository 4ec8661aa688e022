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
		// Refused since the Reader may not read a Controller's writable
		// paths either (TestSandboxReaderReadsControllerPaths).
		{"controller writes where the reader reads", "sandbox: {read_write: [DIR/out]}\n", "sandbox: {read_only: [DIR/out]}\n", []string{
			"researcher.md:4: sandbox.read_only[0]: reader researcher may read BASE/out, which is BASE/out (sandbox.read_write[0] of controller main, main.md:4): what a Controller keeps must reach a Reader only through the gateway",
		}},
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

// pathCase is a set of agents for the rules between agents' paths. Each
// file is "NAME": extra top-level YAML for that agent, from line 4 on (a
// first line setting runtime replaces the runtime on line 3); main
// (Controller) and researcher (its Reader) come from pairSet, any other
// name is an agent without channels. Test names must not hold a comma:
// t.TempDir keeps it, and ROOT is written in YAML flow lists. In the YAML, in links and in
// the errors, ROOT is a fresh directory (the agents directory is
// ROOT/agents and is left out of the errors, as errorLines does) and
// STATE is ROOT/state.
type pathCase struct {
	name  string
	files map[string]string
	dirs  []string          // directories to create, ROOT/...
	links map[string]string // symlinks to create: name -> target, both ROOT/... or absolute
	state bool              // load with STATE as the state directory
	want  []string
}

// Ends of the messages of the rules between agents' paths.
const (
	ownWhy = "its runtime could replace a directory on the way with a symlink and redirect this path the next time its sandbox is built; " +
		"choose a path outside it (what lies inside is already visible, and writable, through it)"
	otherWhy    = "'s runtime could replace a directory on the way with a symlink and redirect this path the next time a runtime starts; choose a path outside it"
	ownPathsWhy = ": each agent's writable paths must be its own (a gateway running as root gives them to the agent's uid); choose paths that do not overlap"
	keepsWhy    = ": what a Controller keeps must reach a Reader only through the gateway"
	runtimeWhy  = " runs; install it outside every other agent's writable paths"
	systemWhy   = ": the sandbox has its own /proc and /dev, and the host's /proc, /sys, /dev and /run expose the gateway and the system; name another directory"
)

func runPathCases(t *testing.T, tests []pathCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			dir, state := filepath.Join(root, "agents"), filepath.Join(root, "state")
			replace := strings.NewReplacer("ROOT", root, "STATE", state).Replace
			for _, d := range append([]string{"ROOT/agents"}, tt.dirs...) {
				if err := os.MkdirAll(replace(d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, target := range tt.links {
				if err := os.Symlink(replace(target), replace(name)); err != nil {
					t.Skipf("symlink: %v", err)
				}
			}
			// extra's first line, when it sets runtime, replaces the
			// template's runtime line (line 3).
			def := func(template, extra string) string {
				extra = replace(extra)
				if strings.HasPrefix(extra, "runtime:") {
					line, rest, _ := strings.Cut(extra, "\n")
					template = strings.Replace(template, "runtime: [bin/demo-agent]", line, 1)
					extra = rest
				}
				return strings.Replace(template, "tools:", extra+"tools:", 1)
			}
			files := map[string]string{}
			_, hasMain := tt.files["main"]
			_, hasResearcher := tt.files["researcher"]
			if hasMain || hasResearcher {
				for name, content := range pairSet(1, 1, "") {
					files[name] = def(content, tt.files[strings.TrimSuffix(name, ".md")])
				}
			}
			for name, extra := range tt.files {
				if name != "main" && name != "researcher" {
					files[name+".md"] = def("---\nname: "+name+"\nruntime: [bin/demo-agent]\ntools: []\n---\n", extra)
				}
			}
			for name, content := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
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

// TestSandboxNoPathBelowWritable: no agent's path may lie strictly inside a
// sandboxed agent's writable path, its own included: the runtime could
// replace a directory on the way with a symlink, and the gateway, which
// resolves every path when it builds the next sandbox, would bind where
// the symlink points.
func TestSandboxNoPathBelowWritable(t *testing.T) {
	t.Parallel()
	runPathCases(t, []pathCase{
		{name: "disjoint", files: map[string]string{"rd": "workdir: ROOT/rd\nsandbox: {read_write: [ROOT/drop], read_only: [ROOT/pub]}\n"}},
		{name: "read_write is the workdir itself", files: map[string]string{"rd": "workdir: ROOT/rd\nsandbox: {read_write: [ROOT/rd]}\n"}},
		{name: "a sibling with the same prefix", files: map[string]string{"rd": "workdir: ROOT/rd\nsandbox: {read_write: [ROOT/rd-docs], read_only: [ROOT/rdx]}\n"}},
		{name: "read_write below its own workdir", files: map[string]string{"rd": "workdir: ROOT/rd\nsandbox: {read_write: [ROOT/rd/x/docs]}\n"}, want: []string{
			"rd.md:5: sandbox.read_write[0]: agent rd may write ROOT/rd/x/docs, which is inside ROOT/rd (its own workdir, writable): " + ownWhy,
		}},
		{name: "read_only below its own read_write", files: map[string]string{"rd": "sandbox:\n  read_write: [ROOT/rw]\n  read_only: [ROOT/rw/models]\n"}, want: []string{
			"rd.md:6: sandbox.read_only[0]: agent rd may read ROOT/rw/models, which is inside ROOT/rw (its own sandbox.read_write[0], writable): " + ownWhy,
		}},
		{name: "workdir below its own read_write", files: map[string]string{"rd": "workdir: ROOT/rw/rd\nsandbox:\n  read_write: [ROOT/out, ROOT/rw]\n"}, want: []string{
			"rd.md:4: workdir: agent rd may write ROOT/rw/rd, which is inside ROOT/rw (its own sandbox.read_write[1], writable): " + ownWhy,
		}},
		{name: "read_write below its own read_write", files: map[string]string{"rd": "sandbox:\n  read_write: [ROOT/rw/a/b, ROOT/rw]\n"}, want: []string{
			"rd.md:5: sandbox.read_write[0]: agent rd may write ROOT/rw/a/b, which is inside ROOT/rw (its own sandbox.read_write[1], writable): " + ownWhy,
		}},
		{name: "read_only below another agent's read_write", files: map[string]string{
			"alpha": "sandbox: {read_write: [ROOT/alpha]}\n",
			"beta":  "sandbox: {read_only: [ROOT/alpha/pub]}\n",
		}, want: []string{
			"beta.md:4: sandbox.read_only[0]: agent beta may read ROOT/alpha/pub, which is inside ROOT/alpha (sandbox.read_write[0] of agent alpha, alpha.md:4), writable by alpha: alpha" + otherWhy,
		}},
		{name: "read_only containing another agent's read_write", files: map[string]string{
			"alpha": "sandbox: {read_write: [ROOT/share/alpha]}\n",
			"beta":  "sandbox: {read_only: [ROOT/share]}\n",
		}},
		{name: "an unsandboxed agent's workdir below a writable path", files: map[string]string{
			"alpha": "sandbox: {read_write: [ROOT/alpha]}\n",
			"beta":  "sandbox: none\nworkdir: ROOT/alpha/beta\n",
		}, want: []string{
			"beta.md:5: workdir: agent beta may write ROOT/alpha/beta, which is inside ROOT/alpha (sandbox.read_write[0] of agent alpha, alpha.md:4), writable by alpha: alpha" + otherWhy,
		}},
		{name: "an unsandboxed agent writes nothing for the rules", files: map[string]string{
			"alpha": "sandbox: none\nworkdir: ROOT/alpha\n",
			"beta":  "sandbox: {read_only: [ROOT/alpha/pub]}\n",
		}},
		// Symlinks do not dodge the rule, on either side.
		{name: "through a link to its own workdir", dirs: []string{"ROOT/rd"}, links: map[string]string{"ROOT/rd-link": "ROOT/rd"},
			files: map[string]string{"rd": "workdir: ROOT/rd\nsandbox: {read_write: [ROOT/rd-link/x/docs]}\n"}, want: []string{
				"rd.md:5: sandbox.read_write[0]: agent rd may write ROOT/rd-link/x/docs (through symlinks ROOT/rd/x/docs), which is inside ROOT/rd (its own workdir, writable): " + ownWhy,
			}},
		{name: "a workdir named through a link", dirs: []string{"ROOT/rd"}, links: map[string]string{"ROOT/rd-link": "ROOT/rd"},
			files: map[string]string{"rd": "workdir: ROOT/rd-link\nsandbox: {read_only: [ROOT/rd/models]}\n"}, want: []string{
				"rd.md:5: sandbox.read_only[0]: agent rd may read ROOT/rd/models, which is inside ROOT/rd-link (through symlinks ROOT/rd) (its own workdir, writable): " + ownWhy,
			}},
		// The attack itself: ROOT/pub is already a link into alpha's
		// directory (alpha replaced it, or the operator made it).
		{name: "another agent's path already redirected", dirs: []string{"ROOT/alpha/x"}, links: map[string]string{"ROOT/pub": "ROOT/alpha/x"},
			files: map[string]string{
				"alpha": "sandbox: {read_write: [ROOT/alpha]}\n",
				"beta":  "sandbox: {read_only: [ROOT/pub/docs]}\n",
			}, want: []string{
				"beta.md:4: sandbox.read_only[0]: agent beta may read ROOT/pub/docs (through symlinks ROOT/alpha/x/docs), which is inside ROOT/alpha (sandbox.read_write[0] of agent alpha, alpha.md:4), writable by alpha: alpha" + otherWhy,
			}},
		// A pair already refused by the Reader rule is not reported again.
		{name: "a controller's path below a reader's workdir", files: map[string]string{
			"main":       "sandbox: {read_only: [ROOT/rd/shared]}\n",
			"researcher": "workdir: ROOT/rd\n",
		}, want: []string{
			"researcher.md:4: workdir: reader researcher may write ROOT/rd, which contains ROOT/rd/shared (sandbox.read_only[0] of controller main, main.md:4): what a Reader writes must reach a Controller only through the gateway",
		}},
		// A path in another agent's default workdir is in the state
		// directory, and reported as such only.
		{name: "in another agent's default workdir", state: true, files: map[string]string{
			"alpha": "",
			"beta":  "sandbox: {read_only: [STATE/work/alpha/pub]}\n",
		}, want: []string{
			"beta.md:4: sandbox.read_only[0]: STATE/work/alpha/pub is inside the state directory STATE: it must not be visible inside a sandbox; name the directories the runtime needs",
		}},
	})
}

// TestSandboxWritablePathsAreOwn: two sandboxed agents may not share writable
// paths in any way.
func TestSandboxWritablePathsAreOwn(t *testing.T) {
	t.Parallel()
	runPathCases(t, []pathCase{
		{name: "disjoint", files: map[string]string{
			"alpha": "workdir: ROOT/alpha\nsandbox: {read_write: [ROOT/shared]}\n",
			"beta":  "workdir: ROOT/beta\nsandbox: {read_write: [ROOT/shared2]}\n",
		}},
		{name: "both read one directory", files: map[string]string{
			"alpha": "sandbox: {read_only: [ROOT/models]}\n",
			"beta":  "sandbox: {read_only: [ROOT/models]}\n",
		}},
		{name: "the same read_write", files: map[string]string{
			"alpha": "sandbox: {read_write: [ROOT/shared]}\n",
			"beta":  "sandbox: {read_write: [ROOT/shared]}\n",
		}, want: []string{
			"beta.md:4: sandbox.read_write[0]: agent beta may write ROOT/shared, which is ROOT/shared (sandbox.read_write[0] of agent alpha, alpha.md:4)" + ownPathsWhy,
		}},
		{name: "the same workdir", files: map[string]string{
			"alpha": "workdir: ROOT/work\n",
			"beta":  "workdir: ROOT/work\n",
		}, want: []string{
			"beta.md:4: workdir: agent beta may write ROOT/work, which is ROOT/work (workdir of agent alpha, alpha.md:4)" + ownPathsWhy,
		}},
		{name: "a workdir containing another's read_write", files: map[string]string{
			"alpha": "sandbox:\n  read_write: [ROOT/a, ROOT/srv/alpha]\n",
			"beta":  "workdir: ROOT/srv\n",
		}, want: []string{
			"beta.md:4: workdir: agent beta may write ROOT/srv, which contains ROOT/srv/alpha (sandbox.read_write[1] of agent alpha, alpha.md:5)" + ownPathsWhy,
		}},
		{name: "a read_write inside another's workdir", files: map[string]string{
			"alpha": "workdir: ROOT/alpha\n",
			"beta":  "sandbox: {read_write: [ROOT/alpha/inbox]}\n",
		}, want: []string{
			"beta.md:4: sandbox.read_write[0]: agent beta may write ROOT/alpha/inbox, which is inside ROOT/alpha (workdir of agent alpha, alpha.md:4)" + ownPathsWhy,
		}},
		{name: "through a link", dirs: []string{"ROOT/shared"}, links: map[string]string{"ROOT/shared-link": "ROOT/shared"}, files: map[string]string{
			"alpha": "sandbox: {read_write: [ROOT/shared]}\n",
			"beta":  "sandbox: {read_write: [ROOT/shared-link/beta]}\n",
		}, want: []string{
			"beta.md:4: sandbox.read_write[0]: agent beta may write ROOT/shared-link/beta (through symlinks ROOT/shared/beta), which is inside ROOT/shared (sandbox.read_write[0] of agent alpha, alpha.md:4)" + ownPathsWhy,
		}},
		{name: "the same directory under two names", dirs: []string{"ROOT/shared"}, links: map[string]string{"ROOT/shared-link": "ROOT/shared"}, files: map[string]string{
			"alpha": "workdir: ROOT/shared-link\n",
			"beta":  "workdir: ROOT/shared\n",
		}, want: []string{
			"beta.md:4: workdir: agent beta may write ROOT/shared, which is ROOT/shared-link (through symlinks ROOT/shared) (workdir of agent alpha, alpha.md:4)" + ownPathsWhy,
		}},
		// An unsandboxed agent can reach everything anyway: its workdir is
		// not "its own" for this rule.
		{name: "an unsandboxed agent's workdir", files: map[string]string{
			"alpha": "sandbox: none\nworkdir: ROOT/shared\n",
			"beta":  "workdir: ROOT/shared\n",
		}},
		// A Reader and its Controller: reported once, by the Reader rule.
		{name: "a reader and a controller", files: map[string]string{
			"main":       "sandbox: {read_write: [ROOT/out]}\n",
			"researcher": "sandbox: {read_write: [ROOT/out]}\n",
		}, want: []string{
			"researcher.md:4: sandbox.read_write[0]: reader researcher may write ROOT/out, which is ROOT/out (sandbox.read_write[0] of controller main, main.md:4): what a Reader writes must reach a Controller only through the gateway",
		}},
	})
}

// TestSandboxReaderReadsControllerPaths: a Reader may not read what a Controller
// may write; the Reader rule for its writable paths still holds.
func TestSandboxReaderReadsControllerPaths(t *testing.T) {
	t.Parallel()
	runPathCases(t, []pathCase{
		{name: "disjoint", files: map[string]string{
			"main":       "workdir: ROOT/main\nsandbox: {read_write: [ROOT/out]}\n",
			"researcher": "sandbox: {read_only: [ROOT/sources, ROOT/outside]}\n",
		}},
		{name: "a reader reads a controller's read_write", files: map[string]string{
			"main":       "sandbox: {read_write: [ROOT/out]}\n",
			"researcher": "sandbox: {read_only: [ROOT/out]}\n",
		}, want: []string{
			"researcher.md:4: sandbox.read_only[0]: reader researcher may read ROOT/out, which is ROOT/out (sandbox.read_write[0] of controller main, main.md:4)" + keepsWhy,
		}},
		{name: "a reader reads above a controller's workdir", files: map[string]string{
			"main":       "workdir: ROOT/srv/main\n",
			"researcher": "sandbox: {read_only: [ROOT/srv]}\n",
		}, want: []string{
			"researcher.md:4: sandbox.read_only[0]: reader researcher may read ROOT/srv, which contains ROOT/srv/main (workdir of controller main, main.md:4)" + keepsWhy,
		}},
		// Also below a writable path (the next rule): reported once.
		{name: "a reader reads inside a controller's workdir", files: map[string]string{
			"main":       "workdir: ROOT/main\n",
			"researcher": "sandbox: {read_only: [ROOT/main/notes]}\n",
		}, want: []string{
			"researcher.md:4: sandbox.read_only[0]: reader researcher may read ROOT/main/notes, which is inside ROOT/main (workdir of controller main, main.md:4)" + keepsWhy,
		}},
		{name: "an unsandboxed controller's workdir", files: map[string]string{
			"main":       "sandbox: none\nworkdir: ROOT/main\n",
			"researcher": "sandbox: {read_only: [ROOT/main]}\n",
		}, want: []string{
			"researcher.md:4: sandbox.read_only[0]: reader researcher may read ROOT/main, which is ROOT/main (workdir of controller main, main.md:5)" + keepsWhy,
		}},
		{name: "through a link", dirs: []string{"ROOT/main"}, links: map[string]string{"ROOT/main-link": "ROOT/main"}, files: map[string]string{
			"main":       "workdir: ROOT/main\n",
			"researcher": "sandbox: {read_only: [ROOT/main-link]}\n",
		}, want: []string{
			"researcher.md:4: sandbox.read_only[0]: reader researcher may read ROOT/main-link (through symlinks ROOT/main), which is ROOT/main (workdir of controller main, main.md:4)" + keepsWhy,
		}},
	})
}

// TestSandboxRuntimeOutsideOthersWritable: an agent's runtime program and its
// absolute arguments may not be where another sandboxed agent writes.
func TestSandboxRuntimeOutsideOthersWritable(t *testing.T) {
	t.Parallel()
	runPathCases(t, []pathCase{
		{name: "in its own workdir", files: map[string]string{
			"alpha": "runtime: [ROOT/alpha/bin/agent, ROOT/alpha/agent.py]\nworkdir: ROOT/alpha\n",
		}},
		{name: "a program from PATH and relative arguments", files: map[string]string{
			"alpha": "runtime: [python3, beta/agent.py]\n",
			"beta":  "workdir: ROOT/agents/../beta\n",
		}},
		{name: "program in another agent's workdir", files: map[string]string{
			"alpha": "runtime: [ROOT/beta/bin/agent]\n",
			"beta":  "workdir: ROOT/beta\n",
		}, want: []string{
			"alpha.md:3: runtime[0]: runtime program ROOT/beta/bin/agent of agent alpha is inside ROOT/beta (workdir of agent beta, beta.md:4), writable by beta: beta's runtime could change what alpha" + runtimeWhy,
		}},
		{name: "program is another agent's read_write file", files: map[string]string{
			"alpha": "runtime: [ROOT/bin/agent]\n",
			"beta":  "sandbox: {read_write: [ROOT/bin/agent]}\n",
		}, want: []string{
			"alpha.md:3: runtime[0]: runtime program ROOT/bin/agent of agent alpha is ROOT/bin/agent (sandbox.read_write[0] of agent beta, beta.md:4), writable by beta: beta's runtime could change what alpha" + runtimeWhy,
		}},
		{name: "a relative program resolved against the definition", files: map[string]string{
			"alpha": "runtime: [../tools/agent]\n",
			"beta":  "sandbox: {read_write: [ROOT/tools]}\n",
		}, want: []string{
			"alpha.md:3: runtime[0]: runtime program ROOT/tools/agent of agent alpha is inside ROOT/tools (sandbox.read_write[0] of agent beta, beta.md:4), writable by beta: beta's runtime could change what alpha" + runtimeWhy,
		}},
		{name: "an absolute argument", files: map[string]string{
			"alpha": "runtime: [/usr/bin/python3, -u, ROOT/shared/agent.py]\n",
			"beta":  "sandbox: {read_write: [ROOT/shared]}\n",
		}, want: []string{
			"alpha.md:3: runtime[2]: runtime argument ROOT/shared/agent.py of agent alpha is inside ROOT/shared (sandbox.read_write[0] of agent beta, beta.md:4), writable by beta: beta's runtime could change what alpha" + runtimeWhy,
		}},
		{name: "runtime written as one string", files: map[string]string{
			"alpha": "runtime: python3 ROOT/beta/agent.py\n",
			"beta":  "workdir: ROOT/beta\n",
		}, want: []string{
			"alpha.md:3: runtime[1]: runtime argument ROOT/beta/agent.py of agent alpha is inside ROOT/beta (workdir of agent beta, beta.md:4), writable by beta: beta's runtime could change what alpha" + runtimeWhy,
		}},
		{name: "an unsandboxed agent's program", files: map[string]string{
			"alpha": "runtime: [ROOT/beta/agent]\nsandbox: none\n",
			"beta":  "workdir: ROOT/beta\n",
		}, want: []string{
			"alpha.md:3: runtime[0]: runtime program ROOT/beta/agent of agent alpha is inside ROOT/beta (workdir of agent beta, beta.md:4), writable by beta: beta's runtime could change what alpha" + runtimeWhy,
		}},
		{name: "in an unsandboxed agent's workdir", files: map[string]string{
			"alpha": "runtime: [ROOT/beta/agent]\n",
			"beta":  "sandbox: none\nworkdir: ROOT/beta\n",
		}},
		{name: "in another agent's default workdir", state: true, files: map[string]string{
			"alpha": "runtime: [STATE/work/beta/agent]\n",
			"beta":  "",
		}, want: []string{
			"alpha.md:3: runtime[0]: runtime program STATE/work/beta/agent of agent alpha is inside STATE/work/beta (default workdir of agent beta, under the state directory), writable by beta: beta's runtime could change what alpha" + runtimeWhy,
		}},
		{name: "default workdirs unknown without the state directory", files: map[string]string{
			"alpha": "runtime: [STATE/work/beta/agent]\n",
			"beta":  "",
		}},
		{name: "through a link", dirs: []string{"ROOT/beta"}, links: map[string]string{"ROOT/tools": "ROOT/beta"}, files: map[string]string{
			"alpha": "runtime: [ROOT/tools/agent]\n",
			"beta":  "workdir: ROOT/beta\n",
		}, want: []string{
			"alpha.md:3: runtime[0]: runtime program ROOT/tools/agent (through symlinks ROOT/beta/agent) of agent alpha is inside ROOT/beta (workdir of agent beta, beta.md:4), writable by beta: beta's runtime could change what alpha" + runtimeWhy,
		}},
		{name: "a reader rewriting its controller's code", files: map[string]string{
			"main":       "runtime: [ROOT/code/agent]\n",
			"researcher": "sandbox: {read_write: [ROOT/code]}\n",
		}, want: []string{
			"main.md:3: runtime[0]: runtime program ROOT/code/agent of agent main is inside ROOT/code (sandbox.read_write[0] of agent researcher, researcher.md:4), writable by researcher: researcher's runtime could change what main" + runtimeWhy,
		}},
	})
}

// TestSandboxSystemDirectories: the host's /proc, /sys, /dev and /run are not
// for a sandbox.
func TestSandboxSystemDirectories(t *testing.T) {
	t.Parallel()
	runPathCases(t, []pathCase{
		{name: "similar names", files: map[string]string{"alpha": "workdir: /procs/alpha\nsandbox: {read_only: [/sysroot, /devices], read_write: [/runner]}\n"}},
		{name: "an unsandboxed agent", files: map[string]string{"alpha": "sandbox: none\nworkdir: /run/alpha\n"}},
		{name: "each directory", files: map[string]string{"alpha": "workdir: /run/alpha\nsandbox:\n  read_only: [/proc, /sys/kernel]\n  read_write: [/dev/shm/x, /proc/self/root/srv]\n"}, want: []string{
			"alpha.md:4: workdir: /run/alpha is inside the host's /run" + systemWhy,
			"alpha.md:6: sandbox.read_only[0]: /proc is the host's /proc" + systemWhy,
			"alpha.md:6: sandbox.read_only[1]: /sys/kernel is inside the host's /sys" + systemWhy,
			"alpha.md:7: sandbox.read_write[0]: /dev/shm/x is inside the host's /dev" + systemWhy,
			"alpha.md:7: sandbox.read_write[1]: /proc/self/root/srv is inside the host's /proc" + systemWhy,
		}},
		{name: "through links", links: map[string]string{"ROOT/devices": "/dev", "ROOT/runlink": "/run"}, files: map[string]string{
			"alpha": "workdir: ROOT/runlink/alpha\nsandbox: {read_only: [ROOT/devices]}\n",
		}, want: []string{
			"alpha.md:4: workdir: ROOT/runlink/alpha (through symlinks /run/alpha) is inside the host's /run" + systemWhy,
			"alpha.md:5: sandbox.read_only[0]: ROOT/devices (through symlinks /dev) is the host's /dev" + systemWhy,
		}},
	})
}
