package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Network is what a sandbox may reach.
type Network string

// The network modes.
const (
	// NetworkNone: a network namespace of its own with loopback only.
	NetworkNone Network = "none"
	// NetworkHost: the host's network, loopback services included.
	NetworkHost Network = "host"
	// NetworkProxy: loopback only, where 127.0.0.1:ProxyPort leads to the
	// gateway's egress proxy for this agent.
	NetworkProxy Network = "proxy"
)

// ProxyPort is where a runtime of network mode proxy finds the egress
// proxy inside its sandbox (HTTP_PROXY=http://127.0.0.1:3128).
const ProxyPort = 3128

// ProxyURL is the proxy address runtimes are given.
var ProxyURL = fmt.Sprintf("http://127.0.0.1:%d", ProxyPort)

// SystemDirs are visible read-only in every sandbox, at the same path:
// the programs and libraries a runtime needs, and /etc (its resolver and
// certificates). A missing one is skipped; a symbolic link (merged /usr)
// is recreated as the same link.
var SystemDirs = []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// helperArg0 marks the re-executed helper: Init runs it when os.Args[0]
// is this.
const helperArg0 = "bcpgw-sandbox-init"

// Policy is what one runtime may see and do.
type Policy struct {
	// Agent names the sandbox (its host name, its HOME).
	Agent string
	// Program is the runtime's program, an absolute path; Args are the
	// rest of its argv. Env is its whole environment.
	Program string
	Args    []string
	Env     []string
	// Workdir is the runtime's working directory, writable, at the same
	// path as outside. Required.
	Workdir string
	// ReadOnly and ReadWrite are further paths visible at the same path.
	ReadOnly  []string
	ReadWrite []string
	// Network is what it may reach. Default NetworkNone.
	Network Network
	// ProxySocket is the gateway's egress proxy for this agent, a unix
	// socket on the host (NetworkProxy only). The runtime never sees it:
	// the helper relays 127.0.0.1:ProxyPort to it.
	ProxySocket string
	// UID and GID are the host ids the sandbox's root is mapped to. Use
	// Owner for the right ones.
	UID, GID int
	// Helper is the helper program to run. Default: Helper().
	Helper string
}

// HelperName is the helper program's file name.
const HelperName = "bcpgw-sandbox"

// Helper returns the helper program to run: bcpgw-sandbox beside this
// process's executable when there is one that only its owner (this
// user, or root) can change, else this executable itself
// (/proc/self/exe), whose main must call Init. The small program is
// preferred: an idle sandbox's init then holds about a megabyte of
// private memory instead of the whole gateway binary's initialised state.
func Helper() string {
	exe, err := os.Executable()
	if err != nil {
		return "/proc/self/exe"
	}
	path := filepath.Join(filepath.Dir(exe), HelperName)
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 || fi.Mode()&0o022 != 0 {
		return "/proc/self/exe"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || (int(st.Uid) != os.Geteuid() && st.Uid != 0) {
		return "/proc/self/exe"
	}
	return path
}

// Home is the private HOME of the agent's sandbox (an empty tmpfs each
// session).
func (p *Policy) Home() string { return "/home/" + p.Agent }

// Owner returns the host uid and gid that an agent's sandbox runs as: the
// gateway's own when it is not root; when it is root, an unprivileged
// pair of the agent's own (AgentUID), so that a runtime holds no
// privilege over anything outside its sandbox.
func Owner(agent string) (uid, gid int) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), os.Getegid()
	}
	u := AgentUID(agent)
	return u, u
}

// AgentUID is the unprivileged uid (and gid) the sandbox of agent runs as
// when the gateway runs as root: a stable number from agent's name in
// [AgentUIDBase, AgentUIDBase+65536), far above the ids distributions
// give to users and to container ranges, so it owns nothing on the host
// but the agent's own writable paths.
func AgentUID(agent string) int {
	h := fnv.New32a()
	h.Write([]byte(agent))
	return AgentUIDBase + int(h.Sum32()%65536)
}

// AgentUIDBase is the first uid of the range AgentUID takes from.
const AgentUIDBase = 0x5bc00000

// Report is what the helper tells the gateway once the sandbox is up.
type Report struct {
	// Landlock is the Landlock ABI applied (0: the kernel has none).
	Landlock int `json:"landlock"`
	// Seccomp is true when the syscall filter is loaded (always, once up).
	Seccomp bool `json:"seccomp"`
	// RuntimePID is the runtime's pid inside the sandbox.
	RuntimePID int `json:"runtime_pid"`
}

// Exit is how the runtime ended, as the helper saw it.
type Exit struct {
	Code   int `json:"code"`             // exit code; -1 when killed by a signal
	Signal int `json:"signal,omitempty"` // the signal that killed it, if any
}

// status is one line on the status pipe.
type status struct {
	Error  string  `json:"error,omitempty"`
	Ready  *Report `json:"ready,omitempty"`
	Exited *Exit   `json:"exited,omitempty"`
}

// Error is a sandbox that could not be built: the kernel lacks
// something, or a path is wrong. Retrying cannot fix it.
type Error struct {
	Agent string
	Msg   string
}

func (e *Error) Error() string { return fmt.Sprintf("sandbox of %s: %s", e.Agent, e.Msg) }

// mount is one path bound into the sandbox, as the helper receives it:
// from Source, a path the helper can reach itself, or FD, a detached
// mount tree the gateway cloned (when it runs as root).
type mount struct {
	Target   string `json:"target"`
	Source   string `json:"source,omitempty"`
	FD       int    `json:"fd,omitempty"`
	Writable bool   `json:"writable,omitempty"`
	File     bool   `json:"file,omitempty"` // not a directory
	device   bool   // one of the helper's own /dev nodes: devices allowed
}

// spec is the policy as the helper receives it (argv[1], JSON).
type spec struct {
	Agent    string   `json:"agent"`
	Program  string   `json:"program"`
	Args     []string `json:"args"`
	Workdir  string   `json:"workdir"`
	Home     string   `json:"home"`
	Mounts   []mount  `json:"mounts"`
	Network  Network  `json:"network"`
	ProxyFD  int      `json:"proxy_fd"`            // 0: none
	HelperFD int      `json:"helper_fd,omitempty"` // the helper's own program, to close
	StatusFD int      `json:"status_fd"`
}

// Cmd is a runtime to be started in a sandbox: an *exec.Cmd of the helper
// (set its pipes and start it as usual), and the helper's status pipe.
type Cmd struct {
	*exec.Cmd
	policy Policy
	status *os.File
	lines  *bufio.Reader
	files  []*os.File // passed to the helper; closed once it started
}

// Command prepares the sandboxed runtime of p.
func Command(p Policy) (*Cmd, error) {
	if p.Network == "" {
		p.Network = NetworkNone
	}
	if !filepath.IsAbs(p.Program) || !filepath.IsAbs(p.Workdir) {
		return nil, &Error{Agent: p.Agent, Msg: "program and workdir must be absolute paths"}
	}
	c := &Cmd{policy: p}
	ok := false
	defer func() {
		if !ok {
			c.closeFiles()
		}
	}()
	sp := spec{Agent: p.Agent, Program: p.Program, Args: p.Args, Workdir: p.Workdir, Home: p.Home(), Network: p.Network}
	// fd numbers in the helper: ExtraFiles[i] becomes 3+i.
	pass := func(f *os.File) int {
		c.files = append(c.files, f)
		return 2 + len(c.files)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox status pipe: %w", err)
	}
	c.status, c.lines = r, bufio.NewReader(r)
	sp.StatusFD = pass(w)
	asRoot := os.Geteuid() == 0
	add := func(path string, writable bool, what string) error {
		fi, err := os.Stat(path)
		if err != nil {
			return &Error{Agent: p.Agent, Msg: fmt.Sprintf("%s %s: %v", what, path, unwrapPath(err))}
		}
		m := mount{Target: filepath.Clean(path), Source: filepath.Clean(path), Writable: writable, File: !fi.IsDir()}
		if asRoot {
			// The sandbox's uid may not traverse the path (the default
			// workdir lives in the gateway's 0700 state directory): the
			// gateway clones the mount itself and hands it over.
			fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
			if err != nil {
				return &Error{Agent: p.Agent, Msg: fmt.Sprintf("%s %s: open_tree: %v", what, path, err)}
			}
			m.Source, m.FD = "", pass(os.NewFile(uintptr(fd), path))
		}
		sp.Mounts = append(sp.Mounts, m)
		return nil
	}
	if err := add(p.Workdir, true, "workdir"); err != nil {
		return nil, err
	}
	for _, path := range p.ReadOnly {
		if err := add(path, false, "sandbox.read_only"); err != nil {
			return nil, err
		}
	}
	for _, path := range p.ReadWrite {
		if err := add(path, true, "sandbox.read_write"); err != nil {
			return nil, err
		}
	}
	if !Visible(p, p.Program) {
		if err := add(p.Program, false, "runtime"); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(sp.Mounts, func(a, b mount) int { return strings.Compare(a.Target, b.Target) })
	if p.Network == NetworkProxy {
		if p.ProxySocket == "" {
			return nil, &Error{Agent: p.Agent, Msg: "network proxy without an egress socket"}
		}
		f, err := os.OpenFile(p.ProxySocket, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &Error{Agent: p.Agent, Msg: fmt.Sprintf("egress proxy socket: %v", err)}
		}
		sp.ProxyFD = pass(f)
	}
	arg, err := json.Marshal(sp)
	if err != nil {
		return nil, err
	}
	if p.Helper == "" {
		p.Helper = Helper()
	}
	path := p.Helper
	if path != "/proc/self/exe" {
		// Run from a descriptor, as /proc/self/exe is: the sandbox's uid
		// need not be able to reach the helper's directory (a 0700 home
		// of a root gateway). The helper closes its copy first thing.
		f, err := os.Open(p.Helper)
		if err != nil {
			return nil, &Error{Agent: p.Agent, Msg: fmt.Sprintf("sandbox helper: %v", err)}
		}
		sp.HelperFD = pass(f)
		path = fdPath(sp.HelperFD)
		arg, err = json.Marshal(sp)
		if err != nil {
			return nil, err
		}
	}
	cmd := &exec.Cmd{Path: path, Args: []string{helperArg0, string(arg)}, Env: p.Env, Dir: "/"}
	cmd.ExtraFiles = c.files
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if p.Network != NetworkHost {
		flags |= unix.CLONE_NEWNET
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  flags,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: p.UID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: p.GID, Size: 1}},
		// Become the namespace's root, which is the mapped host uid: a
		// gateway running as root would otherwise stay host root inside.
		Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		// An unprivileged gateway may not allow setgroups in the new
		// namespace (and its runtimes keep its groups, as its user).
		GidMappingsEnableSetgroups: false,
		// Its own session: no controlling terminal to inject into, and a
		// process group the gateway signals as a whole.
		Setsid: true,
		// The sandbox dies with the gateway.
		Pdeathsig: syscall.SIGKILL,
	}
	if asRoot {
		// A root gateway's supplementary groups (group root among them)
		// would still open group-readable files on the host: drop them
		// all. Only root can allow setgroups in the namespace, and after
		// the helper's setup nothing inside holds CAP_SETGID to use it.
		cmd.SysProcAttr.GidMappingsEnableSetgroups = true
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
	}
	c.Cmd = cmd
	ok = true
	return c, nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Started must be called once the helper was started (or failed to
// start): it closes the gateway's copies of what was passed to it.
func (c *Cmd) Started() { c.closeFiles() }

func (c *Cmd) closeFiles() {
	for _, f := range c.files {
		f.Close()
	}
	c.files = nil
}

// Close releases the status pipe. Safe to call more than once.
func (c *Cmd) Close() {
	c.closeFiles()
	if c.status != nil {
		c.status.Close()
	}
}

// WaitReady waits for the helper's first word: the sandbox is up and the
// runtime started, or the *Error that says why not. It gives up at ctx's
// end.
func (c *Cmd) WaitReady(ctx context.Context) (Report, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.status.SetReadDeadline(dl)
	} else {
		_ = c.status.SetReadDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = c.status.SetReadDeadline(time.Now()) })
	defer stop()
	st, err := c.next()
	switch {
	case err != nil && ctx.Err() != nil:
		return Report{}, ctx.Err()
	case err != nil:
		return Report{}, &Error{Agent: c.policy.Agent, Msg: fmt.Sprintf("the sandbox helper ended before the sandbox was up (%v)", err)}
	case st.Error != "":
		return Report{}, &Error{Agent: c.policy.Agent, Msg: st.Error}
	case st.Ready == nil:
		return Report{}, &Error{Agent: c.policy.Agent, Msg: "the sandbox helper said something unexpected"}
	}
	return *st.Ready, nil
}

// Exit reads how the runtime ended, once the helper has exited: nil if
// the helper was killed before it could say.
func (c *Cmd) Exit() *Exit {
	_ = c.status.SetReadDeadline(time.Now().Add(time.Second))
	st, err := c.next()
	if err != nil {
		return nil
	}
	return st.Exited
}

func (c *Cmd) next() (status, error) {
	line, err := c.lines.ReadBytes('\n')
	if err != nil {
		if err == io.EOF && len(line) == 0 {
			return status{}, io.EOF
		}
		if len(line) == 0 {
			return status{}, err
		}
	}
	var st status
	if err := json.Unmarshal(line, &st); err != nil {
		return status{}, fmt.Errorf("malformed status %q", line)
	}
	return st, nil
}

// Visible reports whether path is visible inside p's sandbox without a
// mount of its own: under a system directory, the workdir or one of the
// policy's paths. Symbolic links are resolved first, as the kernel will.
func Visible(p Policy, path string) bool {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	roots := append([]string{p.Workdir}, p.ReadOnly...)
	roots = append(roots, p.ReadWrite...)
	for _, d := range SystemDirs {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			roots = append(roots, real)
		}
	}
	for _, r := range roots {
		if within(path, r) {
			return true
		}
	}
	return false
}

// within reports whether path is root or lies under it.
func within(path, root string) bool {
	path, root = filepath.Clean(path), filepath.Clean(root)
	return path == root || root == "/" || strings.HasPrefix(path, root+"/")
}
