package control

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PeerPolicy is the second check of a control connection, after the uid
// check (Authorize): whether the process that connected is one the
// gateway's own user runs at a terminal, or something the gateway runs.
//
// The uid check alone is not enough. Runtimes run as the gateway's user,
// so a hijacked runtime with a shell passes it, connects to the socket and
// approves its own Cat-3 item: the operator's decision would be the
// runtime's. Sandboxed runtimes do not see the socket at all, but the
// control plane must hold for unsandboxed ones too (sandbox: none), and
// against a sandbox that leaks it. So the policy refuses
//
//   - a peer in another user namespace or another pid namespace than the
//     gateway's (a sandboxed runtime, a container); a peer whose pid is 0
//     is in a pid namespace the gateway cannot see, and is refused too;
//   - a peer that descends from the gateway: runtimes and everything they
//     start. The gateway is a child subreaper (internal/reaper), so a
//     runtime's double-forked daemon stays its descendant rather than
//     becoming init's.
//
// It fails closed: a peer whose /proc entries cannot be read is refused.
// As a result a root peer is refused by a gateway that does not run as
// root, since only root may read a root process's namespaces; operators
// use the gateway's own user.
//
// What it cannot stop: an unsandboxed runtime that asks a service outside
// the gateway's tree to start the client for it (systemd-run --user, at,
// cron, ssh to localhost) is not a descendant. The sandbox, which hides
// the socket and those services, is the boundary; this policy is the
// layer under it.
//
// The zero value is the policy of the running gateway: its own pid and
// /proc.
type PeerPolicy struct {
	// GatewayPID is the process whose descendants are refused; default
	// os.Getpid(). The gateway's own pid is allowed (clients in the
	// gateway's process, as in tests). Tests set another pid to let their
	// own children connect.
	GatewayPID int
	// Proc is where the proc filesystem is mounted; default "/proc". The
	// namespaces compared against are those of Proc/self, the process
	// serving the socket. It must be the proc of the gateway's pid
	// namespace (the one SO_PEERCRED reports pids in).
	Proc string
}

// withDefaults fills in the zero fields.
func (pp PeerPolicy) withDefaults() PeerPolicy {
	if pp.GatewayPID == 0 {
		pp.GatewayPID = os.Getpid()
	}
	if pp.Proc == "" {
		pp.Proc = "/proc"
	}
	return pp
}

// maxAncestry bounds the walk up the parent chain, so a corrupt or
// looping tree cannot hold a connection forever. Real chains are a few
// dozen processes deep.
const maxAncestry = 4096

// walkRetries is how many times the walk restarts when a process in the
// chain exits under it (its child is reparented, and the next walk sees
// the new parent).
const walkRetries = 3

// Check returns nil if the process pid may use the control socket, or an
// *Error with CodePermission that tells the operator why not.
func (pp PeerPolicy) Check(pid int) error {
	pp = pp.withDefaults()
	if pid <= 0 {
		return Errorf(CodePermission, "the peer's pid is %d: it runs in a pid namespace the gateway cannot see (a sandbox or a container): refused", pid)
	}
	if pid == pp.GatewayPID {
		return nil
	}
	// Another user namespace is a sandbox or a container with its own
	// idea of uids; another pid namespace makes pids (and so the ancestry
	// below) mean something else.
	for _, ns := range [...]string{"user", "pid"} {
		if err := pp.sameNamespace(pid, ns); err != nil {
			return err
		}
	}
	return pp.notDescendant(pid)
}

// member refuses pid unless it runs as uid and holds group gid, as its
// primary (real) group or a supplementary one (read from
// Proc/<pid>/status, the kernel's view, not the peer's claim); an
// effective group from a setgid program does not count. The refusal says no more than
// the uid check would: another user learns nothing of the policy.
func (pp PeerPolicy) member(pid, uid, gid int) error {
	pp = pp.withDefaults()
	refuse := Errorf(CodePermission, "uid %d may not use this control socket: only the gateway's user, root and members of its operator group may", uid)
	if pid <= 0 {
		return refuse
	}
	status, err := os.ReadFile(filepath.Join(pp.Proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return refuse
	}
	want := strconv.Itoa(gid)
	uidOK, member := false, false
	for _, line := range strings.Split(string(status), "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(value)
		switch key {
		case "Uid": // real, effective, saved, filesystem: all of them
			uidOK = len(fields) == 4
			for _, f := range fields {
				uidOK = uidOK && f == strconv.Itoa(uid)
			}
		case "Gid": // the real group: the user's primary group
			// Not the effective one: a setgid program of the group, run
			// by anyone, has it as its effective group (and can reach
			// the socket by it), but does not make its user a member.
			member = member || len(fields) > 0 && fields[0] == want
		case "Groups":
			for _, f := range fields {
				member = member || f == want
			}
		}
	}
	if !uidOK || !member {
		return refuse
	}
	return nil
}

// sameNamespace refuses pid if it is not in the gateway's namespace of
// kind ns. Namespaces are compared by the links' targets ("user:[4026531837]"),
// which name the namespace's inode.
func (pp PeerPolicy) sameNamespace(pid int, ns string) error {
	self, err := os.Readlink(filepath.Join(pp.Proc, "self", "ns", ns))
	if err != nil {
		return Errorf(CodePermission, "cannot read the gateway's own %s namespace, so pid %d cannot be checked: %v: refused", ns, pid, err)
	}
	peer, err := os.Readlink(filepath.Join(pp.Proc, strconv.Itoa(pid), "ns", ns))
	if err != nil {
		return Errorf(CodePermission, "cannot read the %s namespace of pid %d (%v), so the gateway cannot tell whether it is sandboxed: refused%s", ns, pid, err, procHint(err))
	}
	if peer != self {
		return Errorf(CodePermission, "pid %d is in another %s namespace (%s) than the gateway (%s): a sandboxed runtime or a container: refused", pid, ns, peer, self)
	}
	return nil
}

// procHint adds advice to an error reading /proc.
func procHint(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return " (the process is gone, or /proc is not the gateway's)"
	case errors.Is(err, fs.ErrPermission):
		return " (a process of another user, root included, or one that made itself undumpable: use the control socket as the gateway's user)"
	}
	return ""
}

// notDescendant walks pid's parent chain through Proc/<pid>/stat and
// refuses pid if the gateway is in it. A process that exits under the
// walk reparents its children, so the walk starts over a few times
// before it gives up (and refuses).
func (pp PeerPolicy) notDescendant(pid int) error {
	var err error
	for range walkRetries {
		var chain []int
		chain, err = pp.ancestry(pid)
		if err == nil {
			if len(chain) > 0 && chain[len(chain)-1] == pp.GatewayPID {
				return Errorf(CodePermission, "pid %d descends from the gateway (a runtime or something it started): refused; its ancestry: %s (the gateway)", pid, joinPIDs(chain))
			}
			return nil
		}
		var gone *ancestorGone
		if !errors.As(err, &gone) {
			break
		}
	}
	return Errorf(CodePermission, "cannot tell whether pid %d descends from the gateway: %v: refused", pid, err)
}

// ancestorGone is a process of the chain whose stat could not be read
// because it exited.
type ancestorGone struct {
	pid int
	err error
}

func (e *ancestorGone) Error() string {
	return fmt.Sprintf("pid %d, in its ancestry, exited during the check: %v", e.pid, e.err)
}

// ancestry returns pid and its ancestors up to the first that is the
// gateway, or up to the top of the chain (a process whose parent is 0:
// pid 1, a kernel thread, or a process whose parent is outside our pid
// namespace).
func (pp PeerPolicy) ancestry(pid int) ([]int, error) {
	chain := []int{pid}
	seen := map[int]bool{pid: true}
	for p := pid; ; {
		ppid, err := parentOf(pp.Proc, p)
		if err != nil {
			if p != pid && errors.Is(err, fs.ErrNotExist) {
				return nil, &ancestorGone{pid: p, err: err}
			}
			if p == pid {
				return nil, fmt.Errorf("%w%s", err, procHint(err))
			}
			return nil, err
		}
		if ppid <= 0 {
			return chain, nil
		}
		chain = append(chain, ppid)
		switch {
		case ppid == pp.GatewayPID:
			return chain, nil
		case seen[ppid]:
			return nil, fmt.Errorf("the parent chain loops: %s", joinPIDs(chain))
		case len(chain) > maxAncestry:
			return nil, fmt.Errorf("the parent chain is longer than %d processes", maxAncestry)
		}
		seen[ppid] = true
		p = ppid
	}
}

// parentOf reads the parent pid of pid from proc/<pid>/stat.
func parentOf(proc string, pid int) (int, error) {
	path := filepath.Join(proc, strconv.Itoa(pid), "stat")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses,
	// so the fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no ')' after the command name", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("%s: too few fields", path)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil || ppid < 0 {
		return 0, fmt.Errorf("%s: parent pid %q is not a number", path, f[1])
	}
	return ppid, nil
}

// joinPIDs renders a parent chain, child first: "4242 <- 4200 <- 100".
func joinPIDs(chain []int) string {
	s := make([]string, len(chain))
	for i, p := range chain {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " <- ")
}
