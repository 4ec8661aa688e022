package reaper

import (
	"context"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// Reaper reaps the zombie children of this process that nobody waits
// for: orphans it adopted as a child subreaper. There should be one per
// process, made by New; two would reap each other's owned children.
type Reaper struct {
	pid  int           // this process: orphans become its children
	proc string        // where /proc is mounted
	tick time.Duration // how often Run looks without a SIGCHLD

	mu    sync.Mutex // held by Start across fork and record, and by each reap
	owned map[int]struct{}

	scans atomic.Int64 // completed looks, for tests
}

// defaultTick is how often Run looks for zombies without being woken by
// SIGCHLD. Every exit of a child raises SIGCHLD, but signals of the same
// kind coalesce; the tick is the backstop, so it can be slow.
const defaultTick = 5 * time.Second

// Start starts cmd (cmd.Start) and records its pid as owned, so Run does
// not reap it: the caller's cmd.Wait does. It holds the reaper's lock
// while it starts, so a child that exits at once is not reaped between
// its fork and the record. Call Release with the pid after cmd.Wait has
// returned. On a nil Reaper it is cmd.Start.
func (r *Reaper) Start(cmd *exec.Cmd) error {
	if r == nil {
		return cmd.Start()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	r.owned[cmd.Process.Pid] = struct{}{}
	return nil
}

// Release forgets an owned pid, once its cmd.Wait has returned: the
// number may then be given to an orphan that Run must reap. Releasing
// before cmd.Wait returns lets Run take the child's exit status. Safe on
// a nil Reaper and for pids it does not own.
func (r *Reaper) Release(pid int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.owned, pid)
}

// Run reaps every zombie child that is not owned, when SIGCHLD arrives
// and every few seconds, until ctx ends. It starts no goroutine. On a
// nil Reaper it only waits for ctx.
func (r *Reaper) Run(ctx context.Context) {
	if r == nil {
		<-ctx.Done()
		return
	}
	r.run(ctx)
}

// isOwned reports whether pid was started through Start and not yet
// released. The caller holds r.mu.
func (r *Reaper) isOwned(pid int) bool {
	_, ok := r.owned[pid]
	return ok
}
