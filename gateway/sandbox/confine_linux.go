package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	seccomparch "github.com/elastic/go-seccomp-bpf/arch"
	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// dropCapabilities leaves the helper, on every thread, and whatever it
// starts, with no capability at all: the securebits that give root its
// capabilities at exec are locked off, the effective, permitted,
// inheritable and ambient sets are cleared (psx applies these to all
// threads), and the bounding set is emptied on this thread, the one the
// runtime is forked from (helperMain locks it), so that a program run as
// the namespace's root gains nothing at exec. The other threads never
// exec, and with no permitted capability cannot regain one.
func dropCapabilities() error {
	// linux/securebits.h: NOROOT, NO_SETUID_FIXUP, KEEP_CAPS and
	// NO_CAP_AMBIENT_RAISE, each with its lock bit.
	const (
		noRoot            = 1<<0 | 1<<1
		noSetuidFixup     = 1<<2 | 1<<3
		keepCapsLocked    = 1 << 5
		noCapAmbientRaise = 1<<6 | 1<<7
		bits              = noRoot | noSetuidFixup | keepCapsLocked | noCapAmbientRaise
	)
	if _, _, e := psx.Syscall6(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("securebits: %w", e)
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("bounding set, capability %d: %w", c, err)
		}
	}
	if _, _, e := psx.Syscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("ambient set: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 63
	}
	return n
}

// LandlockABI is the Landlock ABI version the kernel offers (0: none).
func LandlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// landlockCeiling is the newest Landlock ABI the sandbox uses. ABI 9
// restricts connecting to named unix sockets, which the helper's relay to
// the egress proxy does through a descriptor path Landlock cannot grant;
// the mount namespace already hides every other socket.
const landlockCeiling = 8

// landlock restricts the helper, and so the runtime, to the sandbox's own
// paths as a second layer under the mount namespace: reading and running
// the system directories, the program and the read-only paths; writing
// the workdir, the read-write paths, /tmp, HOME and /dev/shm; in its own
// network namespace, TCP only to the egress relay; no signals or abstract
// unix sockets outside its domain. It returns the ABI applied (0 when the
// kernel has no Landlock).
func (h *helper) landlock() (int, error) {
	abi := min(LandlockABI(), landlockCeiling)
	if abi == 0 {
		return 0, nil
	}
	var roDirs, roFiles, rwDirs, rwFiles []string
	for _, d := range SystemDirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			roDirs = append(roDirs, d)
		}
	}
	roDirs = append(roDirs, "/proc", "/dev")
	rwDirs = append(rwDirs, "/tmp", h.sp.Home, "/dev/shm")
	rwFiles = append(rwFiles, "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
	for _, m := range h.sp.Mounts {
		switch {
		case m.Writable && m.File:
			rwFiles = append(rwFiles, m.Target)
		case m.Writable:
			rwDirs = append(rwDirs, m.Target)
		case m.File:
			roFiles = append(roFiles, m.Target)
		default:
			roDirs = append(roDirs, m.Target)
		}
	}
	rules := []landlock.Rule{landlock.RODirs(roDirs...), landlock.RWDirs(rwDirs...)}
	if len(roFiles) > 0 {
		rules = append(rules, landlock.ROFiles(roFiles...))
	}
	rules = append(rules, landlock.RWFiles(rwFiles...))
	if h.sp.Network == NetworkProxy {
		rules = append(rules, landlock.ConnectTCP(ProxyPort))
	}
	cfg := landlock.V8
	if h.sp.Network == NetworkHost {
		// The host's network is the policy: restrict files and scopes only.
		cfg = landlock.Config{HandledAccessFS: cfg.HandledAccessFS, Scoped: cfg.Scoped}
	}
	if err := cfg.BestEffort().Restrict(rules...); err != nil {
		return 0, err
	}
	return abi, nil
}

// deniedSyscalls are refused with EPERM inside every sandbox: nothing a
// runtime needs, and each a way to reach around the namespaces (ptrace,
// process_vm_*, mount and friends, setns, unshare), into the kernel's
// larger attack surfaces (bpf, keyctl, perf_event_open, userfaultfd,
// module and kexec loading), or at the host (reboot, swap, acct).
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev",
	"bpf", "keyctl", "add_key", "request_key",
	"mount", "umount2", "pivot_root", "setns", "unshare",
	"perf_event_open", "userfaultfd",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"open_by_handle_at", "swapon", "swapoff", "reboot", "acct", "quotactl",
}

// ioURing submits system calls that no filter sees.
var ioURing = []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}

// newMountAPI is the mount API of Linux 5.2 and later, refused like mount.
var newMountAPI = []string{"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr"}

// namespaceFlags may not be passed to clone: a new namespace is a way to
// regain capabilities (in a user namespace of its own) and more kernel
// surface.
var namespaceFlags = []uint64{unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
	unix.CLONE_NEWIPC, unix.CLONE_NEWUTS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWTIME}

// seccompPolicy is the syscall filter of every sandbox.
func seccompPolicy() seccomp.Policy {
	var conds []seccomp.NameWithConditions
	for _, f := range namespaceFlags {
		conds = append(conds, seccomp.NameWithConditions{Name: "clone", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: f}}})
	}
	groups := []seccomp.SyscallGroup{
		{Action: seccomp.ActionErrno, Names: deniedSyscalls, NamesWithCondtions: conds},
		// clone3 passes its flags in memory, where a filter cannot look:
		// ENOSYS makes C libraries and Go fall back to clone.
		{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
	}
	for _, more := range [][]string{newMountAPI, ioURing} {
		if knownSyscalls(more) {
			groups[0].Names = append(groups[0].Names, more...)
		}
	}
	return seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
}

// knownSyscalls reports whether the filter library knows every name (its
// tables may predate the newest calls).
func knownSyscalls(names []string) bool {
	p := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: []seccomp.SyscallGroup{{Action: seccomp.ActionErrno, Names: names}}}
	_, err := p.Assemble()
	return err == nil
}

// loadSeccomp loads the filters on every thread (TSYNC) with
// no_new_privs; the runtime inherits them and cannot remove them. The
// policy is go-seccomp-bpf's; a second, tiny filter does the two things
// its matching cannot: it kills any system call made through another
// architecture's entry (the policy lets those through to its default,
// so i386's int 0x80 would reach unshare), and it refuses TIOCSTI and
// TIOCLINUX by the 32 bits of the command the kernel reads (the policy
// compares all 64).
func loadSeccomp() error {
	if err := seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: seccompPolicy()}); err != nil {
		return err
	}
	prog, err := guardProgram()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("load the architecture guard: %w", e)
	}
	return nil
}

// seccomp_data offsets (linux/seccomp.h): nr, arch, then the arguments.
const (
	dataNr      = 0
	dataArch    = 4
	dataArg1Low = 16 + 8 // args[1], its low 32 bits on a little-endian machine
)

// guardProgram is the architecture and terminal guard (see loadSeccomp).
func guardProgram() ([]unix.SockFilter, error) {
	info, err := seccomparch.GetInfo("")
	if err != nil {
		return nil, err
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, errors.New("the terminal guard assumes a little-endian machine")
	}
	const (
		allow = unix.SECCOMP_RET_ALLOW
		kill  = unix.SECCOMP_RET_KILL_PROCESS
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	)
	insns, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: dataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: kill},
		bpf.LoadAbsolute{Off: dataNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_IOCTL, SkipFalse: 4},
		bpf.LoadAbsolute{Off: dataArg1Low, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCSTI, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCLINUX, SkipFalse: 1},
		bpf.RetConstant{Val: eperm},
		bpf.RetConstant{Val: allow},
	})
	if err != nil {
		return nil, err
	}
	out := make([]unix.SockFilter, len(insns))
	for i, in := range insns {
		out[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return out, nil
}
