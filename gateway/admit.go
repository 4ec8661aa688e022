package gateway

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// Admission: a Reader's push (publish) or answer (answer) that passed its
// checks is stored, as a delivery or an approval item (admit), before the
// Reader hears the verdict. The messages come from messages.go; the
// deliveries go on to the outbox (outbox.go).

// admitted is an accepted push or answer on its way to the store.
type admitted struct {
	link   *agents.Link
	sess   *session.Session // the Reader session it came from
	spec   bcp.Spec
	result bcp.Result
	bits   float64
	paid   payment       // a push's charge, given back if it is not kept
	query  *pendingQuery // nil for a push
	subID  string
	detail string     // the success detail the Reader hears
	rates  []rateSlot // a push's places in the rate limits: given back if it is not kept
}

// publish handles a Reader's push (PROTOCOL.md section 5, Push).
func (g *Gateway) publish(s *session.Session, line []byte, r runtime.Response) {
	reply := s.ReplyLater()
	// The backlog is checked first: under a flood, the refusals then cost
	// no validation.
	pair := store.Pair{Controller: r.Controller, Reader: s.Name()}
	if !g.backlog.reserve(pair) {
		e := bcp.Errorf(bcp.BacklogFull, "'%s' has %d deliveries from '%s' still to acknowledge; nothing was charged: send it again later",
			r.Controller, g.backlog.pending(pair), s.Name())
		g.refusePush(s.Name(), r, e, e.Error(), line, reply)
		return
	}
	set := g.set.Load()
	slot, ok := g.pushRate(s, line, r, reply, set) // channel rates (ratelimit.go)
	if !ok {
		g.backlog.release(pair)
		return
	}
	// Validation, the costly part, runs unlocked; the budgets are then
	// checked and charged in one step, under the lock.
	v := ValidatePublish(set, Publish{Reader: s.Name(), Controller: r.Controller, SubscriptionID: r.SubscriptionID, Response: r.Response})
	if v.Filtered { // accepted, not delivered (subscription_policy.go)
		slot.release()
		g.backlog.release(pair)
		g.recordFiltered(s.Name(), v, reply)
		return
	}
	subSlot := g.rates.subscriptionRate(&v, g.now()) // the subscription's rate_limit
	var link *agents.Link
	var paid payment
	if v.Accepted() {
		link = set.Link(r.Controller, s.Name())
		g.mu.Lock()
		paid = g.budgets.admitPush(link, s, &v)
		g.mu.Unlock()
	}
	if !v.Accepted() {
		slot.release()
		subSlot.release()
		g.backlog.release(pair)
		g.refusePush(s.Name(), r, v.Err, v.Detail(), line, reply)
		return
	}
	g.admit(reply, admitted{
		link: link, sess: s, spec: v.Subscription.Spec, result: v.Result, bits: v.Charged(), paid: paid,
		subID: r.SubscriptionID, detail: v.Detail(), rates: []rateSlot{slot, subSlot},
	})
}

// refusePush refuses a Reader's push with e: audited with the line that
// carried it, counted, and answered with detail. The refusal counts in
// its subscription's figures only if the subscription exists: a Reader
// cannot add rows or metric labels with ids of its own.
func (g *Gateway) refusePush(reader string, r runtime.Response, e *bcp.Error, detail string, line []byte, reply *session.PendingReply) {
	ev := store.Event{Kind: "refused", Agent: reader, Peer: r.Controller, Code: string(e.Code), Detail: e.Error(), Ref: r.SubscriptionID,
		Payload: store.ClipPayload(line)}
	if g.set.Load().Subscription(r.Controller, reader, r.SubscriptionID) != nil {
		ev.Subscription = r.SubscriptionID
	}
	g.event(ev)
	g.metrics.publish("refused", e)
	g.metrics.subscriptionFigure(ev)
	reply.Send(runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: r.SubscriptionID, Detail: detail})
}

// answer handles a Reader's answer to a query (PROTOCOL.md section 5,
// Pull). A refused answer leaves the query open, so the Reader can try
// again until it times out.
func (g *Gateway) answer(s *session.Session, line []byte, r runtime.Response) {
	reply := s.ReplyLater()
	refuse := func(e *bcp.Error, controller string) {
		g.refused(s.Name(), controller, e, line, r.QueryID)
		g.metrics.answer("refused", e)
		reply.Send(runtime.ValidationResult{Type: runtime.TypeValidationResult, QueryID: r.QueryID, Detail: e.Error()})
	}
	g.mu.Lock()
	q := g.queries[r.QueryID]
	g.mu.Unlock()
	// A query addressed to another Reader does not exist for this one.
	if q == nil || q.reader != s.Name() {
		refuse(bcp.Errorf(bcp.QueryNotFound, "No pending query '%s' for agent '%s'", r.QueryID, s.Name()), "")
		return
	}
	set := g.set.Load()
	link := set.Link(q.controller, q.reader)
	if link == nil {
		g.finishQuery(q)
		refuse(bcp.Errorf(bcp.NoChannel, "The channel between '%s' and '%s' no longer exists", q.controller, q.reader), q.controller)
		return
	}
	res, err := bcp.Validate(q.spec, r.Response)
	if err != nil {
		refuse(asBCPError(err), q.controller)
		return
	}
	if !g.finishQuery(q) { // timed out meanwhile
		refuse(bcp.Errorf(bcp.QueryNotFound, "No pending query '%s' for agent '%s': it timed out", r.QueryID, s.Name()), q.controller)
		return
	}
	g.admit(reply, admitted{
		link: link, sess: s, spec: q.spec, result: res, bits: q.bits, query: q,
		detail: successDetail(q.controller, q.id, q.spec.Category, q.bits),
	})
}

// admit stores an accepted push or answer: as a delivery, answering the
// Reader once it is durable, or as an approval item, answering it once an
// operator has decided.
func (g *Gateway) admit(reply *session.PendingReply, a admitted) {
	controller, reader := a.link.Controller.Name, a.link.Reader.Name
	verdict := runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: a.subID}
	requestID := ""
	if a.query != nil {
		verdict.QueryID, requestID = a.query.id, a.query.requestID
	}
	kind := "publish_accepted"
	if a.query != nil {
		kind = "answer_accepted"
	}
	// A push reserved its place in the backlog (publish); an answer takes
	// one now. Only a delivery keeps it.
	pair := store.Pair{Controller: controller, Reader: reader}
	if a.query != nil {
		g.backlog.add(pair)
	}
	if a.result.Route != bcp.RouteDeliver {
		g.backlog.release(pair)
	}
	now := g.now()
	ev := store.Event{Time: now, Kind: kind, Agent: reader, Peer: controller, Detail: a.detail, Category: int(a.spec.Category), Bits: a.bits}
	if a.query == nil {
		ev.Subscription = a.subID // counted in its figures
	}
	// undo gives back the charge of a push the store could not keep: it
	// was never accepted. (A query's charge stays: the query was sent.)
	undo := func(err error) {
		if a.result.Route == bcp.RouteDeliver {
			g.backlog.release(pair)
		}
		if a.query == nil {
			g.mu.Lock()
			a.paid.refund()
			g.mu.Unlock()
			for _, slot := range a.rates {
				slot.release()
			}
		}
		g.log.Error("could not store accepted data; refusing it", "reader", reader, "controller", controller, "error", err)
		refusal := bcp.Errorf(bcp.ControllerUnavailable, "The gateway could not store this for '%s' (%v); nothing was delivered", controller, err)
		g.counted(a, "refused", refusal)
		verdict.Detail = refusal.Error()
		reply.Send(verdict)
		if a.query != nil {
			// The query is closed: its Controller must hear why. This runs
			// on the store's writer, which must not wait on a session.
			g.spawn(func() { g.tellController(a.query, refusal) })
		}
	}
	response, err := json.Marshal(a.result.Response)
	if err != nil { // a normalized response holds JSON values only
		undo(fmt.Errorf("encode the normalized response: %w", err))
		return
	}
	if a.result.Route == bcp.RouteDeliver {
		d := store.Delivery{
			Controller: controller, Reader: reader, SubscriptionID: a.subID, RequestID: requestID,
			Category: a.spec.Category, Response: response, Anomalies: a.result.Anomalies, Bits: a.bits, CreatedAt: now,
		}
		if a.query != nil {
			d.QueryID = a.query.id
		}
		if sub := g.set.Load().Subscription(controller, reader, a.subID); a.query == nil && held(sub) {
			g.storePush(reply, a, sub, d, ev, verdict, undo) // debounce, batch (debounce_batch.go)
			return
		}
		g.cfg.Store.AddDeliveryThen(d, []store.Event{ev}, func(d store.Delivery, err error) {
			if err != nil {
				undo(err)
				return
			}
			g.outbox.enqueue(d)
			g.counted(a, "delivered", nil)
			g.metrics.subscriptionFigure(ev)
			verdict.Success, verdict.Detail = true, a.detail
			reply.Send(verdict)
		})
		return
	}
	item := store.Approval{
		Controller: controller, Reader: reader, SubscriptionID: a.subID, RequestID: requestID,
		Category: a.spec.Category, Directive: a.spec.Directive, Response: response, Anomalies: a.result.Anomalies,
		Bits: a.bits, CreatedAt: now, ExpiresAt: now.Add(g.cfg.ApprovalTTL),
	}
	holdFor(&item, a.link, g.cfg.ApprovalTTL) // required approvals and ttl (approvals.go)
	if a.query != nil {
		item.QueryID = a.query.id
	}
	ev.Kind = "approval_queued"
	ev.Detail = fmt.Sprintf("Cat-%d %s from %s to %s held for operator review (%d anomalies)", a.spec.Category, itemSubject(item), reader, controller, len(item.Anomalies))
	g.cfg.Store.AddApprovalThen(item, []store.Event{ev}, func(item store.Approval, err error) {
		if err != nil {
			undo(err)
			return
		}
		g.mu.Lock()
		g.held[item.ID] = heldItem{reader: a.sess, query: a.query}
		g.mu.Unlock()
		g.counted(a, "held", nil)
		g.metrics.subscriptionFigure(ev)
		g.log.Info("approval item waiting for an operator", "id", item.ID, "from", reader, "to", controller, "what", itemSubject(item),
			"expires", item.ExpiresAt.Format(time.RFC3339), "decide", g.command("approvals"))
		// The verdict comes when an operator decides; until then later
		// answers to this Reader need not wait.
		reply.Skip()
	})
}

// counted records the outcome of an admitted push or answer in the
// metrics; a kept push also counts its bits (a query's were counted when
// it was sent).
func (g *Gateway) counted(a admitted, outcome string, e *bcp.Error) {
	if a.query != nil {
		g.metrics.answer(outcome, e)
		return
	}
	g.metrics.publish(outcome, e)
	if e == nil {
		g.metrics.charged(a.link.Controller.Name, a.link.Reader.Name, a.spec.Category, a.bits)
	}
}

// command is the bcpgw command line that runs sub against this gateway,
// for log lines that tell an operator what to do ("bcpgw approvals
// --state DIR").
func (g *Gateway) command(sub string) string {
	if g.cfg.StateDir == "" {
		return "bcpgw " + sub
	}
	return "bcpgw " + sub + " --state " + g.cfg.StateDir
}

func itemSubject(a store.Approval) string {
	if a.QueryID != "" {
		return "answer to query " + a.QueryID
	}
	return "push on " + a.SubscriptionID
}
