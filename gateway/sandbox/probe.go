package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Machine is what this machine provides for sandboxes (bcpgw doctor).
type Machine struct {
	Kernel string
	// Sandbox is nil when a sandbox could be built and run here; else
	// why not, with what to do.
	Sandbox error
	// Landlock is the ABI the kernel offers (0: none) and Applied what a
	// sandbox applied (at most landlockCeiling).
	Landlock, LandlockApplied int
	Seccomp                   bool
	// Notes are the kernel settings that explain a failure.
	Notes []string
	// UID is the host uid sandboxes run as (for the gateway's user).
	UID int
}

// Probe builds one real sandbox (running true in it, as the gateway's
// user would) and says what it got.
func Probe(ctx context.Context) Machine {
	m := Machine{Landlock: LandlockABI()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	for _, f := range []string{"/proc/sys/user/max_user_namespaces", "/proc/sys/kernel/unprivileged_userns_clone",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_userns"} {
		if b, err := os.ReadFile(f); err == nil {
			m.Notes = append(m.Notes, fmt.Sprintf("%s = %s", strings.TrimPrefix(f, "/proc/sys/"), strings.TrimSpace(string(b))))
		}
	}
	prog, err := exec.LookPath("true")
	if err != nil {
		m.Sandbox = fmt.Errorf("no true program to probe with: %w", err)
		return m
	}
	work, err := os.MkdirTemp("", "bcpgw-probe")
	if err != nil {
		m.Sandbox = err
		return m
	}
	defer os.RemoveAll(work)
	p := Policy{Agent: "probe", Program: prog, Workdir: work, Env: []string{"PATH=/usr/bin:/bin"}}
	p.UID, p.GID = Owner(p.Agent)
	if os.Geteuid() == 0 {
		_ = os.Chown(work, p.UID, p.GID)
	}
	m.UID = p.UID
	c, err := Command(p)
	if err != nil {
		m.Sandbox = err
		return m
	}
	defer c.Close()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err = c.Start()
	c.Started()
	if err != nil {
		m.Sandbox = fmt.Errorf("cannot create the namespaces: %w (user namespaces may be off: see the notes)", err)
		return m
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := c.WaitReady(rctx)
	if err != nil {
		c.Process.Kill()
		c.Wait()
		m.Sandbox = err
		return m
	}
	_ = c.Wait()
	m.LandlockApplied, m.Seccomp = rep.Landlock, rep.Seccomp
	if ex := c.Exit(); ex == nil || ex.Code != 0 {
		m.Sandbox = fmt.Errorf("the probe ran but did not exit cleanly (%+v): %s", ex, strings.TrimSpace(out.String()))
	}
	return m
}
