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

// unfixableSet is a set of agents whose runtimes cannot start, each for
// a reason retrying cannot fix: keyless (started on demand) needs a
// variable that is not set; missing, notexec and nopath (autostart) name
// a program that does not exist, is not executable, or is not in PATH.
func unfixableSet(t *testing.T) (dir string, notExec string) {
	t.Helper()
	tools := t.TempDir()
	notExec = filepath.Join(tools, "agent.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexec sleep 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return writeSet(t, map[string]string{
		"keyless.md": fmt.Sprintf("---\nname: keyless\nruntime: [%q]\nenv:\n  API_KEY: ${BCPGW_TEST_NEVER_SET}\n---\nNeeds a key.\n", testrt),
		"missing.md": "---\nname: missing\nautostart: true\nruntime: [./no-such-runtime]\n---\nMissing.\n",
		"notexec.md": fmt.Sprintf("---\nname: notexec\ndescription: not executable\nautostart: true\nruntime: [%q]\n---\nNot executable.\n", notExec),
		"nopath.md":  "---\nname: nopath\nautostart: true\nruntime:\n  - bcpgw-no-such-program\n  - --flag\n---\nNot in PATH.\n",
	}), notExec
}

// A runtime that cannot start for a reason retrying cannot fix (an unset
// ${VAR}, a program missing, not executable or not in PATH) fails its
// agent at once, not after a crash loop, and status, agents and the
// command that asked for it say why. It is still retried after the
// failed cool-down.
func TestUnfixableStartFailsAtOnce(t *testing.T) {
	dir, notExec := unfixableSet(t)
	state := opStateDir(t)
	var log testproc.Buffer
	gw := exec.Command(bin, "run", "--agents", dir, "--state", state)
	gw.Env = baseEnv()
	gw.Stdout, gw.Stderr = &log, &log
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = gw.Process.Signal(syscall.SIGTERM)
		_ = gw.Wait()
	}()
	unset := "env API_KEY: ${BCPGW_TEST_NEVER_SET} is not set in the gateway's environment"
	// Work sent to it is refused with the reason, at once.
	var r result
	opWait(t, "the gateway to answer a prompt", func() (bool, string) {
		r = run(t, runOpts{}, "prompt", "--state", state, "keyless", "hello")
		return r.code != exitNotRunning, r.String()
	})
	if r.code != exitFailed || !strings.Contains(r.stderr, "keyless: agent failed") || !strings.Contains(r.stderr, unset) {
		t.Errorf("prompt to keyless:\n%s", r)
	}
	reasons := map[string]string{
		"keyless": unset,
		"missing": filepath.Join(dir, "no-such-runtime") + ": no such file or directory (check the runtime path in the definition",
		"notexec": notExec + ": permission denied (" + notExec + " is not executable: chmod +x it)",
		"nopath":  `runtime "bcpgw-no-such-program" not found in PATH`,
	}
	opWait(t, "every agent failed, with its reason, in status", func() (bool, string) {
		r = run(t, runOpts{}, "status", "--state", state)
		for name, why := range reasons {
			if !strings.Contains(r.stdout, "FAILED "+name+": start "+name+": ") || !strings.Contains(r.stdout, why) {
				return false, r.String()
			}
		}
		return strings.Contains(r.stdout, "agents:     4 failed"), r.String()
	})
	if !strings.Contains(r.stdout, "retrying at") {
		t.Errorf("status does not say when they are retried:\n%s", r)
	}
	a := run(t, runOpts{}, "agents", "--state", state)
	for name, why := range reasons {
		line := ""
		for l := range strings.Lines(a.stdout) {
			if strings.HasPrefix(l, name+" ") {
				line = l
			}
		}
		if !strings.Contains(line, " failed ") || !strings.Contains(line, "retrying at") || !strings.Contains(line, "last error: start "+name+": ") ||
			!strings.Contains(line, why) {
			t.Errorf("agents, %s: %q\n%s", name, line, a)
		}
	}
	// Failed at the first attempt: one agent_failed each, no restart.
	// The events are stored in the background: status may show the
	// failures before they are.
	var ev result
	opWait(t, "the agent_failed events", func() (bool, string) {
		ev = run(t, runOpts{}, "events", "--state", state, "--type", "agent_failed")
		return strings.Count(ev.stdout, "cannot start: start ") >= 4, ev.String()
	})
	for name := range reasons {
		if n := strings.Count(ev.stdout, " agent_failed "+name+" cannot start: "); n != 1 {
			t.Errorf("%d agent_failed events for %s, want 1:\n%s", n, name, ev)
		}
	}
	if n := strings.Count(ev.stdout, "cannot start: start "); n != 4 {
		t.Errorf("%d agent_failed events say 'cannot start', want 4:\n%s", n, ev)
	}
	if strings.Contains(log.String(), "restarting agent after backoff") {
		t.Errorf("an agent was restarted before it failed:\n%s", log.String())
	}
}

// bcpgw validate warns, at the runtime key, about runtime programs it
// cannot find or execute; the set stays valid (exit 0): they may exist
// where the gateway runs.
func TestValidateWarnsAboutRuntimes(t *testing.T) {
	dir, notExec := unfixableSet(t)
	r := run(t, runOpts{}, "validate", dir)
	if r.code != 0 {
		t.Fatalf("validate:\n%s", r)
	}
	for _, want := range []string{
		"warning: " + filepath.Join(dir, "missing.md") + ":4: runtime: the agent cannot start here: stat " + filepath.Join(dir, "no-such-runtime") + ": no such file or directory",
		"warning: " + filepath.Join(dir, "notexec.md") + ":5: runtime: the agent cannot start here: " + notExec + ": permission denied (" + notExec + " is not executable: chmod +x it)",
		"warning: " + filepath.Join(dir, "nopath.md") + `:4: runtime: the agent cannot start here: runtime "bcpgw-no-such-program" not found in PATH`,
	} {
		if !strings.Contains(r.stderr, want+"") {
			t.Errorf("stderr lacks %q\n%s", want, r)
		}
	}
	if n := strings.Count(r.stderr, "warning: "); n != 3 || strings.Contains(r.stderr, "keyless") {
		t.Errorf("want 3 warnings, none about keyless (its program exists):\n%s", r)
	}
	var v validateJSON
	j := run(t, runOpts{}, "validate", "--json", dir)
	v = parseValidateJSON(t, j.stdout)
	lines := map[string]int{}
	for _, w := range v.Warnings {
		if w.Path == "runtime" {
			lines[filepath.Base(w.File)] = w.Line
		}
	}
	if want := map[string]int{"missing.md": 4, "notexec.md": 5, "nopath.md": 4}; fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Errorf("--json runtime warnings at %v, want %v\n%s", lines, want, j)
	}
}

// A sandbox the kernel will not give (here: no user namespaces may be
// created, user.max_user_namespaces = 0 in the gateway's own user
// namespace) fails the agent at once, saying so, instead of a crash loop
// on "fork/exec ...: no space left on device".
func TestSandboxKernelRefusalFailsAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the gateway runs in a user namespace of its own with the host's uids mapped")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("needs nsenter to reach the gateway's user namespace")
	}
	dir := writeSet(t, map[string]string{
		"solo.md": fmt.Sprintf("---\nname: solo\nautostart: true\nruntime: [%q]\n---\nSolo.\n", testrt),
	})
	state := opStateDir(t)
	var log testproc.Buffer
	// The gateway as root of a user namespace that maps every host uid
	// to itself, with a mount namespace of its own (it clones mounts for
	// the sandbox), where no further user namespace may be created.
	gw := exec.Command("/bin/sh", "-c", `echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"`,
		bin, "run", "--agents", dir, "--state", state)
	gw.Env = baseEnv()
	gw.Stdout, gw.Stderr = &log, &log
	gw.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}},
		GidMappingsEnableSetgroups: true,
	}
	if err := gw.Start(); err != nil {
		t.Skipf("cannot run the gateway in a user namespace here: %v", err)
	}
	defer func() {
		_ = gw.Process.Signal(syscall.SIGTERM)
		_ = gw.Wait()
	}()
	// Clients must share the gateway's user namespace (the socket refuses
	// any other).
	client := func(args ...string) result {
		full := append([]string{"--user", "--target", fmt.Sprint(gw.Process.Pid), "--", bin}, args...)
		cmd := exec.Command(nsenter, full...)
		cmd.Env = baseEnv()
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		r := result{stdout: out.String(), stderr: errb.String()}
		if err != nil {
			r.code = -1
			if cmd.ProcessState != nil {
				r.code = cmd.ProcessState.ExitCode()
			}
		}
		return r
	}
	want := "FAILED solo: start solo: sandbox of solo: the kernel refused its namespaces (no space left on device): a limit on namespaces is 0 or reached"
	var r result
	deadline := time.Now().Add(opTimeout)
	for {
		if r = client("status", "--state", state); strings.Contains(r.stdout, want) {
			break
		}
		if strings.Contains(log.String(), "max_user_namespaces: ") {
			t.Skipf("cannot limit user namespaces here:\n%s", log.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never said why solo failed:\n%s\ngateway log:\n%s", r, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(r.stdout, "bcpgw doctor shows what this machine provides") {
		t.Errorf("status does not point to bcpgw doctor:\n%s", r)
	}
	// The event is stored in the background: status may show the failure
	// before it is.
	var ev result
	opWait(t, "the agent_failed event", func() (bool, string) {
		ev = client("events", "--state", state, "--type", "agent_failed")
		return strings.Contains(ev.stdout, "agent_failed"), ev.String()
	})
	if n := strings.Count(ev.stdout, "agent_failed"); n != 1 || !strings.Contains(ev.stdout, "cannot start") {
		t.Errorf("agent_failed events (%d):\n%s", n, ev)
	}
	if strings.Contains(log.String(), "restarting agent after backoff") {
		t.Errorf("solo was restarted before it failed:\n%s", log.String())
	}
}

// examplesBuilt reports whether the examples' runtime, bin/demo-agent,
// has been built (make build): before, validate rightly warns that their
// agents cannot start.
func examplesBuilt() bool {
	_, err := os.Stat("../../bin/demo-agent")
	return err == nil
}

// examplesStderr is what bcpgw validate prints on stderr for the
// examples: nothing once bin/demo-agent is built, a warning for each
// agent's runtime before.
func examplesStderr() string {
	if examplesBuilt() {
		return ""
	}
	var b strings.Builder
	for _, a := range []string{"main", "researcher"} {
		fmt.Fprintf(&b, "warning: %s/%s.md:4: runtime: the agent cannot start here: stat %s: no such file or directory "+
			"(check the runtime path in the definition; relative paths are resolved against the definition's directory)\n",
			examples, a, mustAbs("../../bin/demo-agent"))
	}
	return b.String()
}

func mustAbs(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		panic(err)
	}
	return abs
}
