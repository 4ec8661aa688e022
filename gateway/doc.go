// Package gateway is the bcpgw daemon: it adapts the protocol core (bcp)
// and the checked definitions (agents) to processes and storage.
//
// The runtimes' processes are package session's: a session.Session is one
// runtime, and a session.Supervisor keeps one session per agent. A
// [Gateway] owns the supervisor and routes between the sessions
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
// The path of one push, in the order the data flows, one file each:
//
//  1. session/run.go: the Reader's line is checked against its tools and
//     decoded once, into a session.Publish for the owner.
//  2. messages.go: the gateway (the sessions' owner) checks its ids.
//  3. admit.go: rate limits, backlog, validation, budgets checked and
//     charged in one step, and the commit (publish.go holds the judgment
//     shared with bcpgw check, budget.go the ledgers).
//  4. store/delivery.go: the delivery and its events, in one transaction;
//     the Reader hears success once it is durable.
//  5. outbox.go: the Controller's courier takes it in order and sends it
//     as a turn (prompt.go says how it reads), and marks it delivered on
//     the runtime's result.
//  6. session/session.go: the turn is queued and written to the
//     Controller's stdin; session/run.go dispatches it and takes the
//     result.
//
// Identity always comes from the pipe a message arrived on. Every refusal
// carries a section-6 code and is stored as an event.
package gateway
