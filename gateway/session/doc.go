// Package session runs agent runtimes: each one a sandboxed subprocess
// speaking JSON lines on its stdin and stdout (PROTOCOL.md section 5).
//
// A [Session] is one runtime process, from spawn to exit, owned by one
// goroutine (run.go): it spawns the runtime in its sandbox (sandbox.go,
// spawn.go), waits for ready, announces the Reader's subscriptions, sends
// turns (prompts, queries, deliveries) one at a time in order, bounds
// what the runtime may write (flood.go), and stops it gracefully or not.
// It checks the runtime's rights to each BCP message by the tools its
// definition grants, decodes the message once, and hands it to its
// [Owner] as a typed [Message]; everything else the runtime writes is
// audited through the same Owner.
//
// A [Supervisor] keeps one session per agent: it starts sessions on
// demand and at boot, restarts crashed ones with backoff, marks an agent
// failed after too many crashes and retries it after a cool-down, and
// applies a reload of the definitions (supervisor_reload.go). It tells
// its [SupervisorOwner] of each start, crash and restart.
//
// The package knows nothing of routing, budgets or storage beyond the
// events it reports: in bcpgw, package gateway is the owner.
package session
