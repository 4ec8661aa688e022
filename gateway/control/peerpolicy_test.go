package control

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeProc is a /proc tree in a temporary directory: stat files and
// namespace links, written as the kernel shows them.
type fakeProc struct {
	t    *testing.T
	root string
}

const (
	fakeGateway = 100
	hostUserNS  = "user:[4026531837]"
	hostPidNS   = "pid:[4026531836]"
)

// newFakeProc returns a tree where the gateway (pid 100, a child of
// pid 1) is in the host namespaces.
func newFakeProc(t *testing.T) *fakeProc {
	fp := &fakeProc{t: t, root: t.TempDir()}
	fp.ns("self", hostUserNS, hostPidNS)
	fp.proc(1, "systemd", 0, hostUserNS, hostPidNS)
	fp.proc(fakeGateway, "bcpgw", 1, hostUserNS, hostPidNS)
	return fp
}

// proc adds a process; an empty namespace leaves its link out.
func (fp *fakeProc) proc(pid int, comm string, ppid int, userNS, pidNS string) {
	fp.t.Helper()
	fp.stat(pid, fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 42 0 0\n", pid, comm, ppid, pid, pid))
	fp.ns(strconv.Itoa(pid), userNS, pidNS)
}

func (fp *fakeProc) stat(pid int, content string) {
	fp.t.Helper()
	dir := filepath.Join(fp.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fp.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(content), 0o644); err != nil {
		fp.t.Fatal(err)
	}
}

// ns writes the namespace links of dir ("self" or a pid): symlinks whose
// targets are the kernel's names, as readlink shows them.
func (fp *fakeProc) ns(dir, userNS, pidNS string) {
	fp.t.Helper()
	nsDir := filepath.Join(fp.root, dir, "ns")
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		fp.t.Fatal(err)
	}
	for name, target := range map[string]string{"user": userNS, "pid": pidNS} {
		if target == "" {
			continue
		}
		if err := os.Symlink(target, filepath.Join(nsDir, name)); err != nil {
			fp.t.Fatal(err)
		}
	}
}

func (fp *fakeProc) policy() PeerPolicy {
	return PeerPolicy{GatewayPID: fakeGateway, Proc: fp.root}
}

func TestPeerPolicyCheck(t *testing.T) {
	const (
		otherUserNS = "user:[4026532999]"
		otherPidNS  = "pid:[4026532998]"
	)
	tests := []struct {
		name  string
		setup func(fp *fakeProc)
		pid   int
		// want is "" for allowed, else fragments the refusal must hold.
		want []string
	}{
		{"the gateway itself", func(*fakeProc) {}, fakeGateway, nil},
		{"an operator's shell", func(fp *fakeProc) {
			fp.proc(200, "sshd", 1, hostUserNS, hostPidNS)
			fp.proc(300, "bash", 200, hostUserNS, hostPidNS)
			fp.proc(400, "bcpgw", 300, hostUserNS, hostPidNS)
		}, 400, nil},
		{"a process started outside our pid namespace (ppid 0)", func(fp *fakeProc) {
			fp.proc(400, "bcpgw", 0, hostUserNS, hostPidNS)
		}, 400, nil},
		{"init", func(*fakeProc) {}, 1, nil},
		{"a runtime", func(fp *fakeProc) {
			fp.proc(4242, "python3", fakeGateway, hostUserNS, hostPidNS)
		}, 4242, []string{"pid 4242 descends from the gateway (a runtime or something it started): refused", "4242 <- 100 (the gateway)"}},
		{"a runtime's grandchild with an odd name", func(fp *fakeProc) {
			fp.proc(4242, "python3", fakeGateway, hostUserNS, hostPidNS)
			fp.proc(4300, "sh", 4242, hostUserNS, hostPidNS)
			fp.proc(4301, "a) S 1 (b", 4300, hostUserNS, hostPidNS)
		}, 4301, []string{"pid 4301 descends from the gateway", "4301 <- 4300 <- 4242 <- 100"}},
		{"a runtime's daemon adopted by the gateway (subreaper)", func(fp *fakeProc) {
			fp.proc(5000, "daemon", fakeGateway, hostUserNS, hostPidNS)
		}, 5000, []string{"pid 5000 descends from the gateway"}},
		{"pid 0: a pid namespace we cannot see", func(*fakeProc) {}, 0,
			[]string{"pid is 0", "pid namespace the gateway cannot see"}},
		{"another user namespace", func(fp *fakeProc) {
			fp.proc(600, "sh", 1, otherUserNS, hostPidNS)
		}, 600, []string{"pid 600 is in another user namespace (user:[4026532999]) than the gateway (user:[4026531837])"}},
		{"another pid namespace", func(fp *fakeProc) {
			fp.proc(601, "sh", 1, hostUserNS, otherPidNS)
		}, 601, []string{"pid 601 is in another pid namespace"}},
		{"a process that is gone", func(*fakeProc) {}, 777,
			[]string{"cannot read the user namespace of pid 777", "the process is gone"}},
		{"an unreadable namespace link", func(fp *fakeProc) {
			fp.proc(602, "sh", 1, hostUserNS, "")
		}, 602, []string{"cannot read the pid namespace of pid 602"}},
		{"the gateway's own namespaces unreadable", func(fp *fakeProc) {
			if err := os.RemoveAll(filepath.Join(fp.root, "self")); err != nil {
				fp.t.Fatal(err)
			}
			fp.proc(400, "bcpgw", 1, hostUserNS, hostPidNS)
		}, 400, []string{"cannot read the gateway's own user namespace"}},
		{"a stat that cannot be read", func(fp *fakeProc) {
			fp.ns("603", hostUserNS, hostPidNS)
		}, 603, []string{"cannot tell whether pid 603 descends from the gateway", "603/stat"}},
		{"an ancestor whose stat is missing", func(fp *fakeProc) {
			fp.proc(604, "sh", 650, hostUserNS, hostPidNS)
		}, 604, []string{"cannot tell whether pid 604 descends from the gateway", "pid 650, in its ancestry, exited"}},
		{"a malformed stat", func(fp *fakeProc) {
			fp.ns("605", hostUserNS, hostPidNS)
			fp.stat(605, "605 sh S 1")
		}, 605, []string{"cannot tell whether pid 605", "no ')'"}},
		{"a stat with a bad parent", func(fp *fakeProc) {
			fp.ns("606", hostUserNS, hostPidNS)
			fp.stat(606, "606 (sh) S x 1")
		}, 606, []string{"parent pid \"x\" is not a number"}},
		{"a looping chain", func(fp *fakeProc) {
			fp.proc(700, "a", 701, hostUserNS, hostPidNS)
			fp.proc(701, "b", 700, hostUserNS, hostPidNS)
		}, 700, []string{"cannot tell whether pid 700", "loops"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := newFakeProc(t)
			tt.setup(fp)
			err := fp.policy().Check(tt.pid)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check(%d) = %v, want allowed", tt.pid, err)
				}
				return
			}
			wantCode(t, err, CodePermission)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check(%d) = %q, want it to say %q", tt.pid, err, w)
				}
			}
			if !strings.Contains(err.Error(), "refused") {
				t.Errorf("Check(%d) = %q does not say the peer was refused", tt.pid, err)
			}
		})
	}
}

// NewServer fills in the policy's defaults.
func TestNewServerPeerPolicyDefaults(t *testing.T) {
	s := NewServer(ServerConfig{Backend: newFakeBackend()})
	if got, want := s.cfg.PeerPolicy, (PeerPolicy{GatewayPID: os.Getpid(), Proc: "/proc"}); got != want {
		t.Errorf("default policy = %+v, want %+v", got, want)
	}
	s = NewServer(ServerConfig{Backend: newFakeBackend(), PeerPolicy: PeerPolicy{GatewayPID: 7, Proc: "/x"}})
	if got, want := s.cfg.PeerPolicy, (PeerPolicy{GatewayPID: 7, Proc: "/x"}); got != want {
		t.Errorf("policy = %+v, want %+v", got, want)
	}
}
