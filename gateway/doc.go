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
//     decoded once, into a session.Publish for the session's owner.
//  2. messages.go: the gateway, that owner, checks its ids.
//  3. admit.go: backlog, rate limits, then the judgment, then the budgets
//     checked and charged in one step, then the commit.
//  4. publish.go: the judgment, shared with bcpgw check: rights,
//     subscription, validation, filter (ValidatePublish), and what the
//     budgets allow (Verdict.Afford).
//  5. store/delivery.go: the delivery and its events in one transaction;
//     the Reader hears success once it is durable.
//  6. outbox.go: the Controller's courier takes it in order and asks for
//     a turn (deliver), with its retry policy (redeliver).
//  7. turns.go: the Controller's session is found or started, and the
//     turn queued on it (bringTurn).
//  8. session/session.go: the turn is written to the Controller's stdin
//     once the runtime is free; its result (session/run.go again, now on
//     the Controller's side) acknowledges the delivery.
//
// Identity always comes from the pipe a message arrived on. Every refusal
// carries a section-6 code and is stored as an event.
package gateway
