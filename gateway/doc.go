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
// The path of one push, in the order the data flows: the functions in
// parentheses, and after a colon a file called on the way and returned
// from:
//
//  1. session/run.go (handleLine): the Reader's line is checked against
//     its tools and decoded once, into a session.Publish for the
//     session's Owner: the gateway (sessionOwner, gateway.go).
//  2. messages.go (onMessage): its ids are checked.
//  3. admit.go (publish, then admit): backlog and rate limits; the
//     judgment shared with bcpgw check (publish.go: ValidatePublish,
//     rights, subscription, validation, filter); the budgets checked and
//     charged in one step under the gateway's lock (budget.go:
//     budgets.admitPush, which asks Verdict.Afford); then the commit.
//  4. store/delivery.go (AddDeliveryThen): the delivery and its events in
//     one transaction; once it is durable the Reader hears success and
//     the outbox is handed the delivery (outbox.enqueue).
//  5. outbox.go (courier, deliver): the Controller's courier takes it in
//     order and asks for a turn, with its retry policy (redeliver).
//  6. turns.go (bringTurn): the Controller's last session is asked, or
//     the supervisor for one (session/supervisor.go: Ensure), and the
//     turn queued on it (session/session.go: TurnSent).
//  7. session/run.go again, on the Controller's side (dispatch, then
//     handleLine): the turn is written to its stdin once the runtime is
//     free, and its result ends the turn.
//  8. outbox.go again (awaitAck, delivered): the acknowledgment is stored,
//     with the send if that was not recorded yet, in one write.
//
// Identity always comes from the pipe a message arrived on. Every refusal
// carries a section-6 code and is stored as an event.
package gateway
