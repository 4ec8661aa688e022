// Package gateway is the bcpgw daemon: it adapts the protocol core (bcp)
// and the checked definitions (agents) to processes and storage.
//
// A [Session] is one runtime process, owned by one goroutine; a
// [Supervisor] keeps one session per agent, starting them on demand and
// restarting crashed ones with backoff. A [Gateway] routes between them
// (PROTOCOL.md sections 5 and 6):
//
//   - A Reader's publish is judged by [ValidatePublish] (rights,
//     subscription, validation) and [Verdict.Afford] (budgets): the same
//     two steps [JudgePublish] runs for the operator's dry run, `bcpgw
//     check`. The gateway checks and charges the budgets in one step under
//     its lock (budgets.admitPush); budgets are per session (budget.go).
//   - What is accepted is committed to the store (package store) before the
//     Reader hears success, then delivered by the outbox: one courier per
//     Controller sends deliveries as turns, in order, one at a time, and
//     sends the same delivery again after a crash of either side.
//   - Queries go from a Controller to a Reader as turns; their answers are
//     judged against the query's spec and delivered like pushes.
//   - Cat-3 data, and Cat-2 data with anomalies under on_anomaly review,
//     waits in the approval queue until an operator approves it (bound to
//     the hash of what was shown), rejects it, or it expires.
//
// Identity always comes from the pipe a message arrived on. Every refusal
// carries a section-6 code and is stored as an event.
package gateway
