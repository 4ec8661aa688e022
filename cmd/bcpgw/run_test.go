package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// demoSet writes a reader that autostarts the demo runtime and publishes
// every 100ms, and its controller.
func demoSet(t *testing.T) string {
	t.Helper()
	return writeSet(t, map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
runtime: [%q, --role, controller]
tools: [BCPQuery]
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 1
    budget_bits: 100
    subscriptions:
      - {id: alerts, category: 1, fields: [{name: urgent, type: boolean}]}
---
`, demoAgent),
		"researcher.md": fmt.Sprintf(`---
name: researcher
runtime: [%q, --role, reader, --interval, 100ms]
autostart: true
tools: [BCPPublish]
bcp_channels:
  - {peer: main, role: reader, max_category: 1, budget_bits: 100}
---
`, demoAgent),
	})
}

func TestRunStartsAgentsAndStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			cmd := exec.Command(bin, "run", "--agents", demoSet(t), "--state", state, "--log-level", "debug")
			cmd.Env = append(os.Environ(), "BCPGW_AGENTS=", "BCPGW_STATE=")
			var stderr testproc.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			// The reader autostarts, hears its subscription, publishes, and
			// the controller receives the push.
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(stderr.String(), "delivery alerts from researcher (Cat-1, 1.0 bits)") {
				if time.Now().After(deadline) {
					t.Fatalf("no validated publish in the logs:\n%s", stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("state dir: %v, mode %v; want 0700", err, fi.Mode().Perm())
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("gateway exited with %v after %s\n%s", err, sig, stderr.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("gateway did not stop after %s", sig)
			}
			for _, want := range []string{
				"kind=session_started",
				"1 subscription(s) announced",
				"published alerts: Published to controller main (Cat-1, 1.0 bits)",
				"kind=session_stopped",
				"gateway stopped",
			} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("logs lack %q\n%s", want, stderr.String())
				}
			}
		})
	}
}

func TestRunUsageAndDefinitionErrors(t *testing.T) {
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "x.md"), []byte("no frontmatter"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no agents", []string{"run", "--state", t.TempDir()}, 2, "--agents is required"},
		{"no state", []string{"run", "--agents", demoSet(t)}, 2, "--state is required"},
		{"bad level", []string{"run", "--agents", demoSet(t), "--state", t.TempDir(), "--log-level", "loud"}, 2, `--log-level: "loud"`},
		{"bad format", []string{"run", "--agents", demoSet(t), "--state", t.TempDir(), "--log-format", "xml"}, 2, `--log-format: "xml"`},
		{"invalid set", []string{"run", "--agents", bad, "--state", t.TempDir()}, 1, "x.md: no frontmatter"},
		{"bad turn timeout", []string{"run", "--agents", demoSet(t), "--state", t.TempDir(), "--turn-timeout", "0"}, 2, "--turn-timeout must be at least 1s, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, runOpts{}, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tt.code, tt.want)
			}
		})
	}
}
