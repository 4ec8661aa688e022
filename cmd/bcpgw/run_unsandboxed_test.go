package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// unsandboxedSet is a pair where both agents opt out of the sandbox;
// nothing autostarts.
func unsandboxedSet(t *testing.T) string {
	t.Helper()
	return writeSet(t, map[string]string{
		"main.md": `---
name: main
runtime: [bin/demo-agent]
tools: BCPQuery
sandbox: none
bcp_channels:
  - {peer: researcher, role: controller, max_category: 1, budget_bits: 100}
---
`,
		"researcher.md": `---
name: researcher
runtime: [bin/demo-agent]
tools: BCPRespond
sandbox: none
bcp_channels:
  - {peer: main, role: reader, max_category: 1, budget_bits: 100}
---
`,
	})
}

// bcpgw run refuses sandbox: none without --allow-unsandboxed, before it
// creates anything, and applies the state-directory rule.
func TestRunRefusals(t *testing.T) {
	t.Parallel()
	unsandboxed := unsandboxedSet(t)
	root := t.TempDir()
	state := filepath.Join(root, "state")
	inState := writeSet(t, map[string]string{"solo.md": "---\nname: solo\nruntime: [bin/demo-agent]\nworkdir: " + state + "/mine\n---\n"})
	tests := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"sandbox: none", []string{"run", "--agents", unsandboxed, "--state", state}, []string{
			"refusing to run without a sandbox: main (" + filepath.Join(unsandboxed, "main.md") + "), researcher (" +
				filepath.Join(unsandboxed, "researcher.md") + ") say sandbox: none, so their runtimes could reach everything this user can; " +
				"remove sandbox: none, or start bcpgw run with --allow-unsandboxed",
		}},
		{"workdir in the state directory", []string{"run", "--agents", inState, "--state", state}, []string{
			"definitions do not load:",
			filepath.Join(inState, "solo.md") + ":4: workdir: " + state + "/mine is inside the state directory " + state,
		}},
	}
	for _, tt := range tests {
		r := run(t, runOpts{env: []string{"BCPGW_STATE="}}, tt.args...)
		if r.code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s", tt.name, r.code, r)
		}
		for _, w := range tt.wants {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q\n%s", tt.name, w, r.stderr)
			}
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("%s: the state directory was created (%v); a refused run must create nothing", tt.name, err)
		}
	}
}

// With --allow-unsandboxed the same set runs.
func TestRunAllowUnsandboxed(t *testing.T) {
	t.Parallel()
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(bin, "run", "--agents", unsandboxedSet(t), "--state", state, "--allow-unsandboxed")
	cmd.Env = append(os.Environ(), "BCPGW_AGENTS=", "BCPGW_STATE=")
	var stderr testproc.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), "gateway running") {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not start with --allow-unsandboxed:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("gateway exited with %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not stop after SIGTERM")
	}
}
