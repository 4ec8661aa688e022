// Package reaper makes the gateway a child subreaper and reaps the
// orphans that makes it inherit.
//
// Why: the control socket refuses any process that descends from the
// gateway (a runtime, or anything a runtime starts), by walking the
// peer's parent chain. A runtime that double-forks a daemon would escape
// that check: when the daemon's parent exits, the kernel hands the
// daemon to init, and it no longer descends from the gateway. As a child
// subreaper (prctl PR_SET_CHILD_SUBREAPER) the gateway is handed such
// orphans instead, so they stay its descendants.
//
// The price: the gateway becomes the parent of processes it never
// started, and must reap them when they exit, or they stay zombies for
// as long as it runs. Reaping must not take the exit status of the
// children it did start: os/exec waits for those itself, and a child
// reaped by anyone else makes cmd.Wait fail ("no child processes") and
// loses its exit code. So every child the process starts goes through
// Reaper.Start, which records its pid as owned under the lock the reaper
// holds when it reaps, and Reaper.Release forgets it once cmd.Wait has
// returned. Run reaps the others, pid by pid, never with wait(-1).
//
// A nil *Reaper is valid: Start is cmd.Start, Release does nothing, Run
// waits for its context. Callers that do not want a subreaper (tests,
// other platforms) leave it out.
package reaper
