package control

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// What an operator group does not open: the limits of a member, who is
// not the gateway's user.

// runRequestAs runs the test binary with cred as a client that sends
// line to the socket, and returns the reply it got.
func runRequestAs(t *testing.T, binary, socket string, cred *syscall.Credential, line string) wireMsg {
	t.Helper()
	cmd := exec.Command(binary)
	cmd.Env = []string{helperEnv + "=request", helperSocketEnv + "=" + socket, helperRequestEnv + "=" + line, "PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper process: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	reply, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "REPLY ")
	if !ok {
		t.Fatalf("helper output %q, want a reply line", out.String())
	}
	var m wireMsg
	if err := json.Unmarshal([]byte(reply), &m); err != nil {
		t.Fatalf("reply %q: %v", reply, err)
	}
	return m
}

// A backup is a file the gateway, root, creates at a path the client
// names, holding text the client can choose (a note, a path in an
// event): for a member, a root-owned file anywhere (/etc/cron.d,
// /etc/ld.so.preload). Members may decide, not ask for backups; root
// still may.
func TestOperatorGroupMemberMayNotBackup(t *testing.T) {
	ts, binary := otherUIDSetupWith(t, ServerConfig{OperatorGroup: operatorGroup,
		PeerPolicy: PeerPolicy{GatewayPID: notAncestor(t)}}) // the test's children are the clients
	backup := reqLine(1, MethodBackup, BackupParams{Path: "/etc/bcpgw-member-backup"})

	member := &syscall.Credential{Uid: 4001, Gid: 5000, Groups: []uint32{operatorGroup}}
	m := runRequestAs(t, binary, ts.path, member, backup)
	if m.Error == nil || m.Error.Code != CodePermission || m.Result != nil {
		t.Errorf("member's backup: reply %+v, want permission_denied", m)
	}
	if calls := ts.fb.callsOf("Backup"); len(calls) != 0 {
		t.Errorf("the member's backup reached the backend: %+v", calls)
	}
	// The member is served otherwise.
	if m := runRequestAs(t, binary, ts.path, member, reqLine(2, MethodApprovalsList, nil)); m.Error != nil || m.Result == nil {
		t.Errorf("member's approvals.list: reply %+v, want a page", m)
	}
	// Root, the gateway's user here, still may.
	if m := runRequestAs(t, binary, ts.path, &syscall.Credential{Uid: 0, Gid: 0}, backup); m.Error != nil || m.Result == nil {
		t.Errorf("root's backup: reply %+v, want a result", m)
	}
	if calls := ts.fb.callsOf("Backup"); len(calls) != 1 || calls[0].Peer.UID != 0 {
		t.Errorf("backups reaching the backend: %+v, want root's only", calls)
	}
	wantAlive(t, ts)
}

// Letting a group through the state directory must not let it reach
// what the 0700 directory used to guard: a state file restored 0644, its
// WAL, a work directory made 0755. ListenGroup takes their group and
// other bits off; what a symbolic link in the directory points to is left
// alone.
func TestListenGroupTightensEntries(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the directory is given another group (chown)")
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	loose := map[string]os.FileMode{"bcpgw.db": 0o644, "bcpgw.db-wal": 0o664, "notes": 0o640}
	for name, perm := range loose {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, name), perm); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(outside, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}

	ln, err := ListenGroup(filepath.Join(dir, SocketName), operatorGroup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })

	want := map[string]os.FileMode{"bcpgw.db": 0o600, "bcpgw.db-wal": 0o600, "notes": 0o600, "work": 0o700, SocketName: 0o660}
	for name, perm := range want {
		if got := mode(t, filepath.Join(dir, name)).Perm(); got != perm {
			t.Errorf("%s: mode %v, want %v", name, got, perm)
		}
	}
	if got := mode(t, dir).Perm(); got != 0o710 {
		t.Errorf("state directory: mode %v, want 0710", got)
	}
	if got := mode(t, outside).Perm(); got != 0o644 {
		t.Errorf("the target of a symbolic link in the directory: mode %v, want 0644 untouched", got)
	}
}

// A gid is 32 bits: 2^32 would wrap to root's group at chown, and
// 2^32-1 would leave the group as it is, with the modes opened to it.
func TestCheckOperatorGroupRange(t *testing.T) {
	for _, gid := range []int{1 << 32, 1<<32 - 1, 1<<32 + 4242} {
		if err := CheckOperatorGroup(gid, 0); err == nil {
			t.Errorf("gid %d accepted", gid)
		}
	}
	if err := CheckOperatorGroup(1<<32-2, 0); err != nil {
		t.Errorf("gid %d: %v", 1<<32-2, err)
	}
}

// A setgid program of the operator group, run by a user outside it, has
// the group as its effective group: enough to reach the socket through
// the directory's and the socket's modes, not to be served. Membership is
// the user's: their primary (real) group or a supplementary one.
func TestOperatorGroupSetgidProgramIsNotAMember(t *testing.T) {
	ts, binary := otherUIDSetupWith(t, ServerConfig{OperatorGroup: operatorGroup,
		PeerPolicy: PeerPolicy{GatewayPID: notAncestor(t)}}) // the test's children are the clients
	setgid := binary + ".setgid"
	copyFile(t, binary, setgid, 0o755)
	if err := os.Chown(setgid, 0, operatorGroup); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(setgid, 0o755|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	out, pid := runAs(t, setgid, ts.path, &syscall.Credential{Uid: 4003, Gid: 5000, Groups: []uint32{5001}})
	if strings.HasPrefix(out, "DIAL-ERROR") {
		t.Skipf("the setgid program could not reach the socket (%s): a nosuid mount?", out)
	}
	line, _ := strings.CutPrefix(out, "REPLY ")
	var m wireMsg
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	if m.Error == nil || m.Error.Code != CodePermission || m.Result != nil {
		t.Errorf("non-member through a setgid program: reply %+v, want permission_denied", m)
	}
	if refused := ts.fb.refusals(); len(refused) != 1 || refused[0].Peer.PID != pid || refused[0].Peer.GID != operatorGroup {
		t.Errorf("refusals = %+v, want the setgid program's (pid %d, gid %d)", refused, pid, operatorGroup)
	}
	wantAlive(t, ts)
}
