//go:build linux

package control

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestAuthorize(t *testing.T) {
	tests := []struct {
		name    string
		peer    int
		self    int
		allowed bool
	}{
		{"same uid", 1000, 1000, true},
		{"root peer", 0, 1000, true},
		{"root gateway, root peer", 0, 0, true},
		{"other uid", 1001, 1000, false},
		{"nobody", 65534, 1000, false},
		{"user peer of a root gateway", 1000, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Authorize(Peer{UID: tt.peer, PID: 1}, tt.self)
			if tt.allowed {
				if err != nil {
					t.Fatalf("Authorize(uid %d, self %d) = %v, want allowed", tt.peer, tt.self, err)
				}
				return
			}
			wantCode(t, err, CodePermission)
			if !strings.Contains(err.Error(), "uid") {
				t.Errorf("message %q does not name the uid", err)
			}
		})
	}
}

const nobody = 65534

// otherUIDSetup prepares a server that a process of uid nobody can
// reach through the filesystem: a fresh world-traversable directory in
// /tmp holding the socket and a copy of the test binary.
func otherUIDSetup(t *testing.T) (ts *testServer, binary string) {
	t.Helper()
	return otherUIDSetupWith(t, ServerConfig{})
}

// otherUIDSetupWith is otherUIDSetup with a server of cfg.
func otherUIDSetupWith(t *testing.T, cfg ServerConfig) (ts *testServer, binary string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: the test runs a client as uid 65534 (SysProcAttr.Credential)")
	}
	dir, err := os.MkdirTemp("/tmp", "ctlpc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	binary = filepath.Join(dir, "control.test")
	copyFile(t, os.Args[0], binary, 0o755)

	ts = startServerAt(t, filepath.Join(dir, "state", SocketName), newFakeBackend(), cfg)
	return ts, binary
}

func copyFile(t *testing.T, from, to string, perm os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, perm); err != nil {
		t.Fatal(err)
	}
}

// runAsNobody runs the test binary as uid/gid 65534 in helper mode
// against the socket, and returns its output and pid.
func runAsNobody(t *testing.T, binary, socket string) (string, int) {
	t.Helper()
	return runAs(t, binary, socket, &syscall.Credential{Uid: nobody, Gid: nobody})
}

// runAs runs the test binary with cred in helper mode against the
// socket, and returns its output and pid.
func runAs(t *testing.T, binary, socket string, cred *syscall.Credential) (string, int) {
	t.Helper()
	cmd := exec.Command(binary)
	cmd.Env = []string{helperEnv + "=status", helperSocketEnv + "=" + socket, "PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper process: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	return strings.TrimSpace(out.String()), cmd.Process.Pid
}

// With the socket's mode opened to everyone, SO_PEERCRED still refuses
// another uid.
func TestPeerCredRefusesOtherUID(t *testing.T) {
	ts, binary := otherUIDSetup(t)
	// Deliberately loosen what Listen made private.
	if err := os.Chmod(filepath.Dir(ts.path), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ts.path, 0o777); err != nil {
		t.Fatal(err)
	}

	out, pid := runAsNobody(t, binary, ts.path)
	line, ok := strings.CutPrefix(out, "REPLY ")
	if !ok {
		t.Fatalf("helper output %q, want a reply line", out)
	}
	var m wireMsg
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("reply %q: %v", line, err)
	}
	if m.Error == nil || m.Error.Code != CodePermission || m.Error.Reason() != "permission_denied" || string(m.ID) != "null" {
		t.Fatalf("reply %s, want a permission_denied (-32007) error with id null", line)
	}
	if m.Result != nil {
		t.Errorf("the refused client got a result: %s", m.Result)
	}

	refused := ts.fb.refusals()
	if len(refused) != 1 {
		t.Fatalf("Backend.Refused called %d times, want once", len(refused))
	}
	if p := refused[0].Peer; p.UID != nobody || p.GID != nobody || p.PID != pid {
		t.Errorf("refused peer = %+v, want uid %d gid %d pid %d", p, nobody, nobody, pid)
	}
	if !strings.Contains(refused[0].Why, "65534") {
		t.Errorf("refusal reason %q does not name the uid", refused[0].Why)
	}
	if n := len(ts.fb.callsOf("Status")); n != 0 {
		t.Errorf("the refused client's request reached the backend (%d status calls)", n)
	}
	wantAlive(t, ts)
}

// With the socket's own 0600 mode, another uid cannot even connect,
// though the directory is open.
func TestSocketModeRefusesOtherUID(t *testing.T) {
	ts, binary := otherUIDSetup(t)
	if err := os.Chmod(filepath.Dir(ts.path), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, ts.path).Perm(); got != 0o600 {
		t.Fatalf("socket mode %v, want 0600", got)
	}

	out, _ := runAsNobody(t, binary, ts.path)
	if !strings.HasPrefix(out, "DIAL-ERROR eacces=true") {
		t.Fatalf("helper output %q, want connect to fail with permission denied", out)
	}
	if r := ts.fb.refusals(); len(r) != 0 {
		t.Errorf("Backend.Refused called %d times: the connection should not have reached the server", len(r))
	}
	wantAlive(t, ts)
}
