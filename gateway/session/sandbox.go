package session

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/sandbox"
)

// workdir returns the runtime's working directory, creating the default
// one (WorkRoot/NAME, 0700) for a definition that sets none. A gateway
// running as root gives a sandboxed agent's writable paths to the
// agent's own uid (sandbox.Owner), as systemd does for a DynamicUser's
// StateDirectory.
func (c *Config) workdir(def *agents.Definition) (string, error) {
	dir := def.Workdir
	if dir == "" {
		if c.WorkRoot == "" {
			return "", errors.New("no workdir: the definition sets none and the gateway has no state directory to make one in")
		}
		dir = filepath.Join(c.WorkRoot, def.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("create the workdir: %w", err)
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("workdir %s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("workdir %s: %w", abs, unwrapPathErr(err))
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("workdir %s is not a directory", abs)
	}
	return abs, nil
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// command prepares the runtime's process: in its sandbox, or (sandbox:
// none) as a plain child in a process group of its own.
func (s *Session) command(def *agents.Definition, prog string, env []string, workdir string) (*exec.Cmd, error) {
	if err := checkExecutable(prog); err != nil {
		return nil, err
	}
	if def.Sandbox.None {
		cmd := exec.Command(prog, def.Runtime[1:]...)
		cmd.Env = env
		cmd.Dir = workdir
		// Its own process group, so that stopping it reaches its children.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd, nil
	}
	p := policyFor(def, prog, env, workdir)
	p.Helper = s.cfg.SandboxHelper
	if p.Network == sandbox.NetworkProxy {
		if s.cfg.Egress == nil {
			return nil, &sandbox.Error{Agent: def.Name, Msg: "its network is a list of destinations, and this gateway runs no egress proxy"}
		}
		sock, err := s.cfg.Egress(def)
		if err != nil {
			return nil, &sandbox.Error{Agent: def.Name, Msg: fmt.Sprintf("egress proxy: %v", err)}
		}
		p.ProxySocket = sock
	}
	if err := sandbox.CheckProgram(p); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		owned := append([]string{workdir}, p.ReadWrite...)
		if p.ProxySocket != "" {
			owned = append(owned, p.ProxySocket)
		}
		for _, path := range owned {
			if err := chownTree(path, p.UID, p.GID); err != nil {
				return nil, &sandbox.Error{Agent: def.Name, Msg: fmt.Sprintf("give %s to the sandbox's uid %d: %v", path, p.UID, err)}
			}
		}
	}
	cmd, err := sandbox.Command(p)
	if err != nil {
		return nil, err
	}
	s.sandbox = cmd
	return cmd.Cmd, nil
}

// checkExecutable catches the common mistakes first, with the hints a
// plain exec would give. Both are permanent: retrying cannot fix them.
func checkExecutable(prog string) error {
	switch fi, err := os.Stat(prog); {
	case err != nil:
		return permanentError{fmt.Errorf("%w%s", err, startHint(prog, err))}
	case fi.IsDir() || fi.Mode()&0o111 == 0:
		return permanentError{fmt.Errorf("%s: %w%s", prog, os.ErrPermission, startHint(prog, os.ErrPermission))}
	}
	return nil
}

// policyFor is the sandbox policy of def's runtime.
func policyFor(def *agents.Definition, prog string, env []string, workdir string) sandbox.Policy {
	p := sandbox.Policy{
		Agent: def.Name, Program: prog, Args: def.Runtime[1:], Workdir: workdir,
		ReadOnly: def.Sandbox.ReadOnly, ReadWrite: def.Sandbox.ReadWrite, Network: sandbox.NetworkNone,
	}
	p.UID, p.GID = sandbox.Owner(def.Name)
	switch def.Sandbox.Network.Mode {
	case agents.NetworkHost:
		p.Network = sandbox.NetworkHost
	case agents.NetworkProxy:
		p.Network = sandbox.NetworkProxy
	}
	p.Env = sandboxEnv(env, def, p)
	return p
}

// CheckAgent says, without starting anything, whether def's runtime can
// start as its definition says on this machine: its ${VAR}s are set in
// lookup, its program exists and is executable, and (sandboxed) the
// program and its interpreter are visible inside the sandbox. stateDir
// places the default workdir. bcpgw doctor uses it.
func CheckAgent(def *agents.Definition, stateDir string, lookup func(string) (string, bool)) error {
	env, err := runtimeEnv(def, lookup)
	if err != nil {
		return err
	}
	path, _ := envValue(env, "PATH")
	prog, err := runtimeProgram(def, path)
	if err != nil {
		return err
	}
	if err := checkExecutable(prog); err != nil {
		return err
	}
	if def.Sandbox.None {
		return nil
	}
	workdir := def.Workdir
	if workdir == "" {
		workdir = agents.DefaultWorkdir(stateDir, def.Name)
	}
	if abs, err := filepath.Abs(workdir); err == nil {
		workdir = abs
	}
	return sandbox.CheckProgram(policyFor(def, prog, env, workdir))
}

// sandboxEnv is the runtime's environment inside its sandbox: HOME is the
// sandbox's private one unless the definition sets it, and a runtime
// behind the egress proxy is told where it is (both spellings, as curl,
// Python and Go read them).
func sandboxEnv(env []string, def *agents.Definition, p sandbox.Policy) []string {
	out := make([]string, 0, len(env)+5)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" {
			continue
		}
		out = append(out, kv)
	}
	home := p.Home()
	if h, ok := def.Env["HOME"]; ok {
		home = h
		if v, ok := envValue(env, "HOME"); ok {
			home = v
		}
	}
	out = append(out, "HOME="+home)
	if p.Network == sandbox.NetworkProxy {
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"} {
			if _, set := def.Env[k]; !set {
				out = append(out, k+"="+sandbox.ProxyURL)
			}
		}
	}
	return out
}

// chownTree gives path and everything under it to uid:gid, without
// following symbolic links.
func chownTree(path string, uid, gid int) error {
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// waitExit blocks until the process of pidfd has exited, without reaping
// it (the exec.Cmd's Wait does that).
func waitExit(pidfd int) {
	for {
		err := unix.Waitid(unix.P_PIDFD, pidfd, nil, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// sandboxSummary says how the session's runtime is contained, for its
// events and for operators.
func (s *Session) sandboxSummary() string {
	if s.sandbox == nil {
		return "NOT SANDBOXED"
	}
	ll := "no Landlock"
	if s.report.Landlock > 0 {
		ll = fmt.Sprintf("Landlock ABI %d", s.report.Landlock)
	}
	return fmt.Sprintf("sandboxed: namespaces, seccomp, %s, network %s", ll, networkName(s.cfg.Def))
}

func networkName(def *agents.Definition) string {
	switch def.Sandbox.Network.Mode {
	case agents.NetworkHost:
		return "host"
	case agents.NetworkProxy:
		names := make([]string, len(def.Sandbox.Network.Allow))
		for i, d := range def.Sandbox.Network.Allow {
			names[i] = d.String()
		}
		return "via proxy to " + strings.Join(names, ", ")
	}
	return "none"
}
