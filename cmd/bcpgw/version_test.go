package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// embedded reads a binary's build information as go version -m prints
// it: the module version and the build settings.
func embedded(t *testing.T, binary string) (modVersion string, settings map[string]string) {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", binary).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", binary, err)
	}
	settings = map[string]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "mod":
			modVersion = f[2]
		case len(f) == 2 && f[0] == "build":
			k, v, _ := strings.Cut(f[1], "=")
			settings[k] = v
		}
	}
	return modVersion, settings
}

// checkVersion runs binary's version and --version and checks them
// against what go version -m reads from the same binary.
func checkVersion(t *testing.T, binary string) (commitLine string) {
	t.Helper()
	outs := map[string]string{}
	for _, arg := range []string{"version", "--version", "-v"} {
		out, err := exec.Command(binary, arg).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", binary, arg, err, out)
		}
		outs[arg] = string(out)
	}
	if outs["version"] != outs["--version"] || outs["version"] != outs["-v"] {
		t.Fatalf("version, --version and -v differ:\n%q\n%q\n%q", outs["version"], outs["--version"], outs["-v"])
	}
	lines := strings.Split(strings.TrimSuffix(outs["version"], "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got:\n%s", outs["version"])
	}
	mod, settings := embedded(t, binary)
	wantVersion := mod
	if mod == "(devel)" || mod == "" {
		wantVersion = "devel"
	}
	if lines[0] != "bcpgw "+wantVersion {
		t.Errorf("first line %q, want %q (module version %q)", lines[0], "bcpgw "+wantVersion, mod)
	}
	if want := "built with " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH; lines[2] != want {
		t.Errorf("last line %q, want %q", lines[2], want)
	}
	rev := settings["vcs.revision"]
	switch {
	case rev == "":
		if !strings.HasPrefix(lines[1], "commit unknown (built without version control information") {
			t.Errorf("no commit stamped, but the commit line is %q", lines[1])
		}
	default:
		want := "commit " + rev + " (" + settings["vcs.time"] + ")"
		if settings["vcs.modified"] == "true" {
			want += ", dirty: built with uncommitted changes"
		}
		if lines[1] != want {
			t.Errorf("commit line %q, want %q", lines[1], want)
		}
	}
	return lines[1]
}

// bcpgw version and --version print the module version, the commit (and
// whether the tree was dirty) and the Go version, from the binary's build
// information: for a binary built without VCS stamping, and (in a git
// checkout) for one built with it, as make build does.
func TestVersion(t *testing.T) {
	checkVersion(t, bin)
	if r := run(t, runOpts{}, "version", "extra"); r.code != exitUsage {
		t.Errorf("version extra:\n%s", r)
	}

	dir := t.TempDir()
	plain := filepath.Join(dir, "bcpgw-novcs")
	if out, err := exec.Command("go", "build", "-buildvcs=false", "-o", plain, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=false: %v\n%s", err, out)
	}
	if line := checkVersion(t, plain); !strings.HasPrefix(line, "commit unknown") {
		t.Errorf("-buildvcs=false: %q", line)
	}

	if err := exec.Command("git", "status", "--porcelain").Run(); err != nil {
		t.Skipf("not a git checkout git can read (%v): the stamped build is not checked", err)
	}
	stamped := filepath.Join(dir, "bcpgw-vcs")
	if out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", stamped, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildvcs=auto: %v\n%s", err, out)
	}
	line := checkVersion(t, stamped)
	if !regexp.MustCompile(`^commit [0-9a-f]{40} \(\d{4}-\d\d-\d\dT`).MatchString(line) {
		t.Errorf("stamped build: commit line %q", line)
	}
}
