package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bcpgw doctor builds a real sandbox and says what each agent gets; an
// agent whose runtime could not start in its sandbox is named, with what
// to add, and the exit status says so.
func TestDoctor(t *testing.T) {
	// The shipped examples, with the demo runtime this test built (a
	// fresh clone has no bin/).
	ex := t.TempDir()
	for _, name := range []string{"main.md", "researcher.md"} {
		b, err := os.ReadFile(filepath.Join(examples, name))
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.Replace(string(b), "../../bin/demo-agent", demoAgent, 1))
		if err := os.WriteFile(filepath.Join(ex, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, runOpts{}, "doctor", ex, "--state", t.TempDir())
	if r.code != 0 {
		t.Fatalf("doctor on the examples:\n%s", r)
	}
	for _, want := range []string{"sandbox       ok", "landlock", "seccomp       true", "agent main: ", "agent researcher: ", "can start"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, r.stdout)
		}
	}

	// A script runtime in a directory the sandbox does not show: caught
	// with the fix, and no sandbox was needed to find out.
	dir := t.TempDir()
	tools := t.TempDir()
	script := filepath.Join(tools, "agent.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	def := "---\nname: solo\nruntime: [" + script + "]\n---\nSolo.\n"
	if err := os.WriteFile(filepath.Join(dir, "solo.md"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(t, runOpts{}, "doctor", dir, "--state", t.TempDir())
	want := "CANNOT START: sandbox of solo: runtime " + script + " is a script that is not visible inside the sandbox"
	if r.code != 1 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "add "+tools+" to sandbox.read_only") {
		t.Errorf("doctor on a script outside the sandbox: want exit 1 and %q\n%s", want, r)
	}
	// With its directory read-only, it can start.
	def = "---\nname: solo\nruntime: [" + script + "]\nsandbox: {read_only: [" + tools + "]}\n---\nSolo.\n"
	if err := os.WriteFile(filepath.Join(dir, "solo.md"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	if r = run(t, runOpts{}, "doctor", dir, "--state", t.TempDir()); r.code != 0 || !strings.Contains(r.stdout, "can start") {
		t.Errorf("doctor with the script's directory read-only:\n%s", r)
	}
}

// An agent whose runtime cannot run in its sandbox fails at once (no
// crash loop), and status and agents say why and what to do.
func TestSandboxStartFailureIsShown(t *testing.T) {
	dir, tools, state := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "state")
	script := filepath.Join(tools, "agent.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 100\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	def := "---\nname: solo\nruntime: [" + script + "]\nautostart: true\n---\nSolo.\n"
	if err := os.WriteFile(filepath.Join(dir, "solo.md"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := exec.Command(bin, "run", "--agents", dir, "--state", state)
	gw.Env = baseEnv()
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = gw.Process.Signal(syscall.SIGTERM)
		_ = gw.Wait()
	}()
	want := "FAILED solo: start solo: sandbox of solo: runtime " + script + " is a script that is not visible inside the sandbox"
	var r result
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if r = run(t, runOpts{}, "status", "--state", state); strings.Contains(r.stdout, want) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "add "+tools+" to sandbox.read_only") ||
		!strings.Contains(r.stdout, "bcpgw agents start NAME") {
		t.Fatalf("status never said why solo failed:\n%s", r)
	}
	if a := run(t, runOpts{}, "agents", "--state", state); !strings.Contains(a.stdout, "failed") || !strings.Contains(a.stdout, "add "+tools+" to sandbox.read_only") {
		t.Errorf("agents:\n%s", a)
	}
	// Failed at once: one attempt, not a crash loop. The event is stored
	// in the background: status may show the failure before it is.
	var ev result
	opWait(t, "the agent_failed event", func() (bool, string) {
		ev = run(t, runOpts{}, "events", "--state", state, "--type", "agent_failed")
		return strings.Contains(ev.stdout, "agent_failed"), ev.String()
	})
	if n := strings.Count(ev.stdout, "agent_failed"); n != 1 || !strings.Contains(ev.stdout, "cannot start") {
		t.Errorf("agent_failed events (%d):\n%s", n, ev)
	}
}
