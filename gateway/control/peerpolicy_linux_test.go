package control

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runClient runs name with args as a client of the socket: the test
// binary in helper mode, directly or under sh or unshare. It returns the
// server's first line and the pid of the process started.
func runClient(t *testing.T, socket, name string, args ...string) (wireMsg, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	// GORACE: a race-enabled binary otherwise sleeps a second as it exits.
	cmd.Env = []string{helperEnv + "=status", helperSocketEnv + "=" + socket, "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GORACE=atexit_sleep_ms=0"}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", cmd, err, out.String(), errOut.String())
	}
	line, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "REPLY ")
	if !ok {
		t.Fatalf("%s printed %q, want a reply line (stderr: %s)", cmd, out.String(), errOut.String())
	}
	var m wireMsg
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("reply %q: %v", line, err)
	}
	return m, cmd.Process.Pid
}

// wantRefused checks a reply and the one refusal the backend recorded,
// and returns that refusal.
func wantRefused(t *testing.T, ts *testServer, m wireMsg, reason string) fakeRefusal {
	t.Helper()
	if m.Error == nil || m.Error.Code != CodePermission || m.Error.Reason() != "permission_denied" || m.Result != nil {
		t.Fatalf("reply %+v, want a permission_denied (-32007) error and no result", m)
	}
	if !strings.Contains(m.Error.Message, reason) {
		t.Errorf("the client was told %q, want it to say %q", m.Error.Message, reason)
	}
	refused := ts.fb.refusals()
	if len(refused) != 1 {
		t.Fatalf("Backend.Refused called %d times (%+v), want once", len(refused), refused)
	}
	if refused[0].Why != m.Error.Message {
		t.Errorf("audited reason %q, the client heard %q: want the same", refused[0].Why, m.Error.Message)
	}
	if p := refused[0].Peer; p.UID != os.Getuid() || p.GID != os.Getgid() {
		t.Errorf("refused peer %+v, want uid %d gid %d", p, os.Getuid(), os.Getgid())
	}
	if n := len(ts.fb.callsOf("Status")); n != 0 {
		t.Errorf("the refused client's request reached the backend (%d status calls)", n)
	}
	wantAlive(t, ts)
	return refused[0]
}

// A runtime is a child of the gateway with the gateway's uid: it passes
// the uid check and must still be refused, and so must what it starts.
func TestPeerPolicyRefusesDescendants(t *testing.T) {
	t.Run("child", func(t *testing.T) {
		ts := startServer(t, newFakeBackend(), ServerConfig{})
		m, pid := runClient(t, ts.path, os.Args[0])
		r := wantRefused(t, ts, m, "pid "+strconv.Itoa(pid)+" descends from the gateway (a runtime or something it started): refused")
		if r.Peer.PID != pid {
			t.Errorf("refused pid %d, want the child's, %d", r.Peer.PID, pid)
		}
		if want := strconv.Itoa(pid) + " <- " + strconv.Itoa(os.Getpid()) + " (the gateway)"; !strings.Contains(r.Why, want) {
			t.Errorf("reason %q does not show the ancestry %q", r.Why, want)
		}
	})
	t.Run("grandchild under sh", func(t *testing.T) {
		ts := startServer(t, newFakeBackend(), ServerConfig{})
		// ": " after the client keeps sh from exec'ing it: sh stays in
		// the chain.
		m, shPID := runClient(t, ts.path, "sh", "-c", `"$0"; :`, os.Args[0])
		r := wantRefused(t, ts, m, "descends from the gateway (a runtime or something it started): refused")
		if r.Peer.PID == shPID || r.Peer.PID <= 0 {
			t.Fatalf("refused pid %d, want the client's, a child of sh (%d)", r.Peer.PID, shPID)
		}
		want := strconv.Itoa(r.Peer.PID) + " <- " + strconv.Itoa(shPID) + " <- " + strconv.Itoa(os.Getpid()) + " (the gateway)"
		if !strings.Contains(r.Why, want) {
			t.Errorf("reason %q does not show the ancestry %q", r.Why, want)
		}
	})
}

// notAncestor starts a process that is no ancestor of this test's
// processes, to stand for the gateway: its descendants would be refused,
// this process and its children are not among them.
func notAncestor(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// A process that is not the gateway's descendant, in the gateway's
// namespaces, with its uid, is served: the operator's shell.
func TestPeerPolicyAcceptsOthers(t *testing.T) {
	gw := notAncestor(t)
	ts := startServer(t, newFakeBackend(), ServerConfig{PeerPolicy: PeerPolicy{GatewayPID: gw}})

	// This process itself, in a pid other than the gateway's.
	cl := dial(t, ts.path)
	if _, err := cl.Status(callCtx(t)); err != nil {
		t.Fatalf("status from a process that is not the gateway's descendant: %v", err)
	}
	// A child of this process: a sibling of the gateway, as `bcpgw
	// status` run from the shell that started the gateway.
	m, _ := runClient(t, ts.path, os.Args[0])
	if m.Error != nil || m.Result == nil {
		t.Fatalf("reply %+v, want a status result", m)
	}
	if r := ts.fb.refusals(); len(r) != 0 {
		t.Errorf("refusals %+v, want none", r)
	}
	if n := len(ts.fb.callsOf("Status")); n != 2 {
		t.Errorf("%d status calls reached the backend, want 2", n)
	}
}

// canUnshare skips the test unless unshare can run a process with args
// (a new user namespace needs unprivileged user namespaces, or root).
func canUnshare(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("unshare is not installed: %v", err)
	}
	out, err := exec.Command("unshare", append(args, "true")...).CombinedOutput()
	if err != nil {
		t.Skipf("unshare %s cannot run here (%v: %s): user or pid namespaces are not available", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// A sandboxed runtime, or anything in another user namespace, is refused
// for its namespace even when it is not the gateway's descendant (the
// gateway's pid here is another process), and even though the kernel
// maps its uid to ours.
func TestPeerPolicyRefusesOtherUserNamespace(t *testing.T) {
	canUnshare(t, "-U", "-r")
	ts := startServer(t, newFakeBackend(), ServerConfig{PeerPolicy: PeerPolicy{GatewayPID: notAncestor(t)}})
	m, pid := runClient(t, ts.path, "unshare", "-U", "-r", os.Args[0])
	r := wantRefused(t, ts, m, "pid "+strconv.Itoa(pid)+" is in another user namespace")
	if r.Peer.PID != pid {
		t.Errorf("refused pid %d, want %d (unshare execs the client)", r.Peer.PID, pid)
	}
}

// A process in a pid namespace of its own (and the gateway's user
// namespace) is refused for its pid namespace. Creating one without a
// new user namespace takes root.
func TestPeerPolicyRefusesOtherPidNamespace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: a pid namespace in the gateway's own user namespace takes CAP_SYS_ADMIN")
	}
	canUnshare(t, "-p", "-f")
	ts := startServer(t, newFakeBackend(), ServerConfig{PeerPolicy: PeerPolicy{GatewayPID: notAncestor(t)}})
	m, _ := runClient(t, ts.path, "unshare", "-p", "-f", os.Args[0])
	wantRefused(t, ts, m, "is in another pid namespace")
}

// acceptChild listens on a fresh socket, starts the test binary as a
// client of it and returns the server's side of its connection and the
// client's process (killed and waited for when the test ends).
func acceptChild(t *testing.T) (*net.UnixConn, *exec.Cmd) {
	t.Helper()
	path := filepath.Join(shortTempDir(t), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{helperEnv + "=status", helperSocketEnv + "=" + path, "GORACE=atexit_sleep_ms=0"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait() // an error if the test reaped it already
	})
	_ = ln.SetDeadline(time.Now().Add(hangGuard))
	c, err := ln.AcceptUnix()
	if err != nil {
		t.Fatalf("accept the child's connection: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, cmd
}

// The check runs on the process that connected, not on whatever holds
// its pid later: a peer that exits while (or before) it is checked is
// refused, since its pid may name another process by then.
func TestCheckPeerProcessHoldsThePeer(t *testing.T) {
	t.Run("alive", func(t *testing.T) {
		c, cmd := acceptChild(t)
		var checked int
		err := checkPeerProcess(c, cmd.Process.Pid, func(pid int) error { checked = pid; return nil })
		if err != nil || checked != cmd.Process.Pid {
			t.Fatalf("checkPeerProcess = %v after checking pid %d, want nil after checking %d", err, checked, cmd.Process.Pid)
		}
	})
	t.Run("exits during the check", func(t *testing.T) {
		c, cmd := acceptChild(t)
		err := checkPeerProcess(c, cmd.Process.Pid, func(int) error {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait() // reaped: its pid is free for another process
			return nil
		})
		wantCode(t, err, CodePermission)
		if want := "pid " + strconv.Itoa(cmd.Process.Pid) + " exited while it was being checked"; !strings.Contains(err.Error(), want) {
			t.Errorf("err = %q, want it to say %q", err, want)
		}
	})
	t.Run("exited before the check", func(t *testing.T) {
		c, cmd := acceptChild(t)
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		err := checkPeerProcess(c, cmd.Process.Pid, func(int) error { return nil })
		wantCode(t, err, CodePermission)
		if !strings.Contains(err.Error(), "exited") {
			t.Errorf("err = %q, want it to say the peer exited", err)
		}
	})
	t.Run("the check's refusal", func(t *testing.T) {
		c, cmd := acceptChild(t)
		want := Errorf(CodePermission, "no")
		if err := checkPeerProcess(c, cmd.Process.Pid, func(int) error { return want }); err != want {
			t.Fatalf("checkPeerProcess = %v, want the check's error", err)
		}
	})
}

// The zero policy is the running process's: this test process is
// allowed (it is the "gateway"), and it is not its own descendant.
func TestPeerPolicyZeroValue(t *testing.T) {
	if err := (PeerPolicy{}).Check(os.Getpid()); err != nil {
		t.Errorf("Check(own pid) = %v, want allowed", err)
	}
	// The parent (go test, a shell) is not a descendant of this process;
	// its namespaces are readable if it is of the same user.
	ppid := os.Getppid()
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(ppid), &st); err != nil || int(st.Uid) != os.Getuid() {
		t.Skipf("the parent, pid %d, is not this user's process (%v): it would be refused, as its namespaces cannot be read", ppid, err)
	}
	if err := (PeerPolicy{}).Check(ppid); err != nil {
		t.Errorf("Check(parent pid %d) = %v, want allowed", ppid, err)
	}
}
