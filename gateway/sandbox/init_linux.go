package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Init runs the sandbox helper when this process is one (os.Args[0] is
// the helper's mark) and never returns then; otherwise it returns at once.
// Call it first thing in main, and in TestMain of tests that start
// sandboxes.
func Init() {
	if len(os.Args) != 2 || os.Args[0] != helperArg0 {
		return
	}
	os.Exit(helperMain(os.Args[1]))
}

// helperMain is the helper: build the sandbox, start the runtime in it,
// stay as its init. The exit code is the runtime's (128+n for a signal);
// 125 means the sandbox could not be built, and the status pipe says why.
func helperMain(arg string) int {
	// One thread builds the sandbox and forks the runtime: the
	// per-thread state the runtime inherits (its bounding set) is set
	// on this one.
	runtime.LockOSThread()
	var sp spec
	if err := json.Unmarshal([]byte(arg), &sp); err != nil {
		fmt.Fprintln(os.Stderr, "bcpgw sandbox helper: bad spec:", err)
		return 125
	}
	if sp.HelperFD != 0 {
		unix.Close(sp.HelperFD)
	}
	st := os.NewFile(uintptr(sp.StatusFD), "status")
	unix.CloseOnExec(sp.StatusFD)
	say := func(s status) {
		b, _ := json.Marshal(s)
		_, _ = st.Write(append(b, '\n'))
	}
	h := &helper{sp: sp}
	rep, err := h.build()
	if err != nil {
		say(status{Error: err.Error()})
		return 125
	}
	child, err := h.start()
	if err != nil {
		say(status{Error: err.Error()})
		return 125
	}
	rep.RuntimePID = child
	say(status{Ready: &rep})
	// The helper keeps no copy of the runtime's pipes: the gateway sees
	// their ends as soon as the runtime (and what it started) let go.
	if null, err := os.OpenFile("/dev/null", os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup2(int(null.Fd()), fd)
		}
		null.Close()
	}
	// From here on the helper only waits: give back what the setup (and
	// the gateway binary's package initialisation) left on the heap, so
	// an idle sandbox costs little beyond its runtime.
	debug.SetGCPercent(10)
	debug.FreeOSMemory()
	exit := h.reap(child)
	say(status{Exited: &exit})
	if exit.Signal != 0 {
		return 128 + exit.Signal
	}
	return exit.Code
}

type helper struct {
	sp     spec
	newDir string // the new root while it is built
}

// build turns this process's fresh namespaces into the sandbox.
func (h *helper) build() (Report, error) {
	var rep Report
	if err := h.mounts(); err != nil {
		return rep, err
	}
	if err := unix.Sethostname([]byte(hostName(h.sp.Agent))); err != nil {
		return rep, fmt.Errorf("set host name: %w", err)
	}
	if h.sp.Network != NetworkHost {
		if err := loopbackUp(); err != nil {
			return rep, fmt.Errorf("bring up loopback: %w", err)
		}
	}
	if h.sp.Network == NetworkProxy {
		if err := h.relay(); err != nil {
			return rep, err
		}
	}
	// Nothing in /proc/1 for the runtime to read or trace.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return rep, fmt.Errorf("prctl dumpable: %w", err)
	}
	if err := dropCapabilities(); err != nil {
		return rep, fmt.Errorf("drop capabilities: %w", err)
	}
	abi, err := h.landlock()
	if err != nil {
		return rep, fmt.Errorf("landlock: %w", err)
	}
	rep.Landlock = abi
	if err := loadSeccomp(); err != nil {
		return rep, fmt.Errorf("seccomp: %w", err)
	}
	rep.Seccomp = true
	return rep, nil
}

func hostName(agent string) string {
	if len(agent) > 56 {
		agent = agent[:56]
	}
	return "bcpgw-" + agent
}

// Mount flags of every read-only and writable bind.
const (
	roAttr = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	rwAttr = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
)

// mounts assembles the new root on a tmpfs over /tmp (which only this
// mount namespace sees) and pivots into it, as bubblewrap does.
func (h *helper) mounts() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// The sources are opened before the new root's tmpfs hides /tmp,
	// where they may lie (the gateway hands a root-owned one over as a
	// mount of its own instead, in FD).
	for i := range h.sp.Mounts {
		m := &h.sp.Mounts[i]
		if m.FD != 0 {
			continue
		}
		fd, err := unix.Open(m.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", m.Source, err)
		}
		m.Source = fdPath(fd)
	}
	h.newDir = "/tmp"
	if err := unix.Mount("tmpfs", h.newDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mount the new root: %w", err)
	}
	for _, d := range SystemDirs {
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("%s: %w", d, err)
		case fi.Mode()&os.ModeSymlink != 0:
			to, err := os.Readlink(d)
			if err != nil {
				return err
			}
			if err := os.Symlink(to, h.at(d)); err != nil {
				return fmt.Errorf("link %s: %w", d, err)
			}
		case fi.IsDir():
			if err := h.bind(mount{Source: d}, d, false, false); err != nil {
				return err
			}
		}
	}
	if err := h.mkdir("/proc"); err != nil {
		return err
	}
	if err := unix.Mount("proc", h.at("/proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := h.dev(); err != nil {
		return err
	}
	if err := h.tmpfs("/tmp", "mode=1777,size=256m"); err != nil {
		return err
	}
	if err := h.tmpfs(h.sp.Home, "mode=0700,size=256m"); err != nil {
		return err
	}
	for _, m := range h.sp.Mounts {
		if err := h.bind(m, m.Target, m.Writable, m.File); err != nil {
			return err
		}
	}
	// Into the new root; the old one is detached and gone.
	if err := unix.Chdir(h.newDir); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := setAttr("/", unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return nil
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// at is path inside the new root, as seen before the pivot.
func (h *helper) at(path string) string { return filepath.Join(h.newDir, path) }

func (h *helper) mkdir(path string) error {
	if err := os.MkdirAll(h.at(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}

// bind mounts src at target in the new root, recursively, read-only
// unless writable; never with setuid programs or device files.
func (h *helper) bind(src mount, target string, writable, file bool) error {
	dst := h.at(target)
	if file {
		if err := h.mkdir(filepath.Dir(target)); err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return fmt.Errorf("create %s: %w", target, err)
		}
		f.Close()
	} else if err := h.mkdir(target); err != nil {
		return err
	}
	if src.FD != 0 {
		err := unix.MoveMount(src.FD, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(src.FD)
		if err != nil {
			return fmt.Errorf("attach %s: %w", target, err)
		}
	} else if err := unix.Mount(src.Source, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", target, err)
	}
	attr := uint64(roAttr)
	switch {
	case src.device:
		attr = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC // the device nodes themselves
	case writable:
		attr = rwAttr
	}
	if err := setAttr(dst, attr, true); err != nil {
		return fmt.Errorf("restrict %s: %w", target, err)
	}
	return nil
}

// setAttr sets mount attributes on path (and the mounts under it).
func setAttr(path string, attr uint64, recursive bool) error {
	flags := 0
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	err := unix.MountSetattr(unix.AT_FDCWD, path, uint(flags), &unix.MountAttr{Attr_set: attr})
	if errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("mount_setattr: the kernel is too old (Linux 5.12 or later is needed): %w", err)
	}
	return err
}

func (h *helper) tmpfs(path, opts string) error {
	if err := h.mkdir(path); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", h.at(path), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount %s: %w", path, err)
	}
	return nil
}

// dev makes a /dev of harmless nodes only: no disks, no terminals, no
// kernel interfaces.
func (h *helper) dev() error {
	if err := h.tmpfs("/dev", "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom"} {
		if err := h.bind(mount{Source: "/dev/" + n, device: true}, "/dev/"+n, true, true); err != nil {
			return err
		}
	}
	for name, to := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(to, h.at("/dev/"+name)); err != nil {
			return fmt.Errorf("link /dev/%s: %w", name, err)
		}
	}
	return h.tmpfs("/dev/shm", "mode=1777,size=64m")
}

// loopbackUp brings up lo in the sandbox's own network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// relay listens on 127.0.0.1:ProxyPort inside the sandbox and copies each
// connection to the gateway's egress proxy, reached through the socket's
// descriptor (the socket itself is not visible in the sandbox). It runs
// for the sandbox's life.
func (h *helper) relay() error {
	ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", ProxyPort))
	if err != nil {
		return fmt.Errorf("egress relay: %w", err)
	}
	target := fdPath(h.sp.ProxyFD)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("unix", target)
				if err != nil {
					return
				}
				defer up.Close()
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = io.Copy(up, c)
					if cw, ok := up.(interface{ CloseWrite() error }); ok {
						_ = cw.CloseWrite()
					}
				}()
				_, _ = io.Copy(c, up)
				if cw, ok := c.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				wg.Wait()
			}()
		}
	}()
	return nil
}

// start runs the runtime with the helper's stdin, stdout and stderr (the
// gateway's pipes) and returns its pid.
func (h *helper) start() (int, error) {
	// Nothing but stdin, stdout and stderr reaches the runtime: not the
	// helper's status pipe, nor any descriptor the gateway itself
	// inherited from whoever started it (a descriptor crosses every
	// namespace and file permission).
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, fmt.Errorf("close the helper's descriptors on exec: %w", err)
	}
	cmd := exec.Command(h.sp.Program)
	cmd.Args = append([]string{h.sp.Program}, h.sp.Args...)
	cmd.Env = os.Environ()
	cmd.Dir = h.sp.Workdir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start the runtime %s inside the sandbox: %w", h.sp.Program, unwrapPath(err))
	}
	return cmd.Process.Pid, nil
}

// reap is init's job: forward SIGTERM, SIGINT and SIGHUP to the runtime,
// reap every process that ends, and return when the runtime has.
func (h *helper) reap(child int) Exit {
	// The signals not forwarded are ignored: the runtime may signal
	// its init, and Go's default for most of them is to exit.
	signal.Ignore(unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGPIPE, unix.SIGALRM, unix.SIGVTALRM, unix.SIGPROF,
		unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGPWR, unix.SIGSTKFLT, unix.SIGIO, unix.SIGTRAP)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	go func() {
		for s := range sigs {
			_ = unix.Kill(child, s.(syscall.Signal))
		}
	}()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return Exit{Code: -1}
		}
		if pid != child {
			continue
		}
		if ws.Signaled() {
			return Exit{Code: -1, Signal: int(ws.Signal())}
		}
		return Exit{Code: ws.ExitStatus()}
	}
}
