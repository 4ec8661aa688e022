package control

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// operatorGroup is the group of the operator-group tests: a gid no user
// of the machine is expected to hold.
const operatorGroup = 4242

// A gateway with an operator group serves its members, by primary or
// supplementary group, checked from /proc and not from what the peer
// claims; others cannot even reach the socket, and one that does (the
// modes loosened by hand) is refused like any other user.
func TestOperatorGroupMembersAreServed(t *testing.T) {
	ts, binary := otherUIDSetupWith(t, ServerConfig{OperatorGroup: operatorGroup,
		PeerPolicy: PeerPolicy{GatewayPID: notAncestor(t)}}) // the test's children are the clients

	// The modes ListenGroup made: the directory traversable by the group
	// only, the socket read-write by it.
	for path, want := range map[string]os.FileMode{filepath.Dir(ts.path): 0o710, ts.path: 0o660} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != want || st.Gid != operatorGroup {
			t.Errorf("%s: mode %v group %d, want %v group %d", path, fi.Mode().Perm(), st.Gid, want, operatorGroup)
		}
	}

	reply := func(out string) wireMsg {
		t.Helper()
		line, ok := strings.CutPrefix(out, "REPLY ")
		if !ok {
			t.Fatalf("helper output %q, want a reply line", out)
		}
		var m wireMsg
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("reply %q: %v", line, err)
		}
		return m
	}
	for _, cred := range []*syscall.Credential{
		{Uid: 4001, Gid: operatorGroup},                               // primary group
		{Uid: 4002, Gid: 5000, Groups: []uint32{5001, operatorGroup}}, // supplementary
	} {
		out, _ := runAs(t, binary, ts.path, cred)
		if m := reply(out); m.Error != nil || m.Result == nil {
			t.Errorf("member uid %d: reply %+v, want a status", cred.Uid, m)
		}
	}
	// Not a member: the directory stops it.
	if out, _ := runAs(t, binary, ts.path, &syscall.Credential{Uid: 4003, Gid: 5000}); !strings.HasPrefix(out, "DIAL-ERROR eacces=true") {
		t.Errorf("non-member: %q, want connect refused by the directory's mode", out)
	}
	// Not a member, with the modes loosened by hand: the server refuses.
	if err := os.Chmod(filepath.Dir(ts.path), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ts.path, 0o666); err != nil {
		t.Fatal(err)
	}
	out, pid := runAs(t, binary, ts.path, &syscall.Credential{Uid: 4003, Gid: 5000, Groups: []uint32{5001}})
	if m := reply(out); m.Error == nil || m.Error.Code != CodePermission || m.Result != nil {
		t.Errorf("non-member through loosened modes: reply %+v, want permission_denied", m)
	}
	refused := ts.fb.refusals()
	if len(refused) != 1 || refused[0].Peer.UID != 4003 || refused[0].Peer.PID != pid || !strings.Contains(refused[0].Why, "operator group") {
		t.Errorf("refusals = %+v, want uid 4003's, naming the operator group", refused)
	}
	wantAlive(t, ts)
}

func TestCheckOperatorGroup(t *testing.T) {
	if err := CheckOperatorGroup(4242, 0); err != nil {
		t.Errorf("root gateway, group 4242: %v", err)
	}
	if err := CheckOperatorGroup(0, 0); err == nil {
		t.Error("group 0 accepted")
	}
	if err := CheckOperatorGroup(4242, 1000); err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("non-root gateway: %v, want a refusal saying it needs root", err)
	}
}
