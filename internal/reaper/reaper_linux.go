package reaper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// New makes this process a child subreaper, so the orphans of its
// descendants become its children rather than init's, and returns the
// Reaper that reaps them; call Run. Call it once per process, before any
// child is started.
func New() (*Reaper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("reaper: become a child subreaper (prctl PR_SET_CHILD_SUBREAPER): %w", err)
	}
	r := newReaper(os.Getpid(), "/proc", defaultTick)
	// Run finds zombies through /proc: better to fail here than to let
	// them pile up unseen.
	if _, err := r.zombies(); err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}
	return r, nil
}

func newReaper(pid int, proc string, tick time.Duration) *Reaper {
	return &Reaper{pid: pid, proc: proc, tick: tick, owned: map[int]struct{}{}}
}

func (r *Reaper) run(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	t := time.NewTicker(r.tick)
	defer t.Stop()
	for {
		r.reap() // at once too: orphans may have died before Run
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-t.C:
		}
	}
}

// reap reaps the zombie children that are not owned. Errors reading
// /proc are left for the next look: there is nothing else to do.
func (r *Reaper) reap() {
	defer r.scans.Add(1)
	if !anyZombie() {
		return
	}
	pids, _ := r.zombies()
	for _, pid := range pids {
		r.reapOne(pid)
	}
}

// reapOne reaps pid unless it is owned. Under the lock, an owned pid is
// recorded already: Start holds the lock from before the fork to the
// record.
func (r *Reaper) reapOne(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.isOwned(pid) {
		return
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if !errors.Is(err, syscall.EINTR) {
			return // reaped, or not ours after all (ECHILD)
		}
	}
}

// anyZombie asks the kernel, without reaping, whether any child has
// exited: one system call that spares the scan of /proc on most looks.
// When in doubt it says yes.
func anyZombie() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	switch {
	case errors.Is(err, unix.ECHILD):
		return false // no children at all
	case err != nil:
		return true
	}
	return info.Signo != 0
}

// zombies lists the children of this process in state Z, from
// proc/<pid>/stat. A process that is gone by the time its stat is read
// is skipped.
func (r *Reaper) zombies() ([]int, error) {
	ents, err := os.ReadDir(r.proc)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.proc, e.Name(), "stat"))
		if err != nil {
			continue
		}
		state, ppid, ok := parseStat(b)
		if ok && ppid == r.pid && state == 'Z' {
			out = append(out, pid)
		}
	}
	return out, nil
}

// parseStat reads the state and the parent pid from a /proc/<pid>/stat
// line, "pid (comm) state ppid ...". comm may hold spaces and
// parentheses, so the fields start after the last ')'.
func parseStat(b []byte) (state byte, ppid int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], ppid, true
}
