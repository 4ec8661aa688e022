package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// Subscriptions asked for at run time (BCPSubscribe).
//
// A Controller holding the tool sends bcp_subscribe_request: a Reader it
// has a channel to, a category and a spec. The gateway checks it as a
// declared subscription is checked at load (agents.Set.CheckSubscription:
// channel, category within max_category, spec, bits within both
// budgets), gives it an id of its own choosing (rt-…), and queues it as
// an approval item of kind subscription that shows the spec and its bits
// per push; the Controller hears pending at once, or rejected with a
// code. Nothing exists until operators approve the item (with the usual
// commands and quorum): the approval stores the subscription
// (store.RuntimeSubscription) in the same commit, and the gateway then
// routes with the definitions plus every approved subscription (the
// effective set, withApproved): the Reader is told at once
// (bcp_subscriptions_active), and pushes to it are judged, charged and
// delivered like pushes to a declared one. A rejection or expiry, and
// later a revocation (bcpgw subscriptions revoke, or a reload whose
// definitions it no longer fits), is told to the Controller with
// bcp_subscribe_result.
//
// BCP's asymmetry holds: a Reader never asks (the session refuses the
// message without BCPSubscribe, and the gateway only takes a request for
// a channel on which the sender is the Controller), the Controller only
// asks, and an operator decides.

// MaxPendingSubscribe bounds the subscription requests of one Controller
// that wait for an operator: more are refused with subscribe_limit, so a
// hijacked Controller cannot flood the approval queue.
const MaxPendingSubscribe = 10

// ErrDeclared is a revocation of a subscription that a definition
// declares: remove it from the file and reload instead.
var ErrDeclared = errors.New("declared in a definition")

// subscribeRequest handles a Controller's bcp_subscribe_request. Like the
// other messages it runs on the session's goroutine and never waits: the
// answer is sent in order once the item is durable.
func (g *Gateway) subscribeRequest(s *session.Session, m session.SubscribeRequest) {
	controller, r := s.Name(), m.Request
	reply := s.ReplyLater()
	result := runtime.SubscribeResult{Type: runtime.TypeSubscribeResult, RequestID: r.RequestID, ToAgent: r.To, Category: r.Category}
	refuse := func(e *bcp.Error) {
		g.refused(controller, r.To, e, m.Line(), r.RequestID)
		result.Status, result.Reason = runtime.SubscribeRejected, e.Error()
		reply.Send(result)
	}
	if field := badID(r.RequestID, r.To); field >= 0 {
		result.RequestID, result.ToAgent = "", "" // not echoed: it could be anything
		refuse(bcp.Errorf(bcp.ProtocolError, "%s is not a valid id: %s", []string{"request_id", "to"}[field], runtime.IDRule))
		return
	}
	if r.RequestID == "" || r.To == "" {
		refuse(bcp.Errorf(bcp.ProtocolError, "bcp_subscribe_request needs a request_id and to"))
		return
	}
	set := g.set.Load()
	link, e := channelFor(set, controller, r.To, r.Category)
	switch {
	case e != nil:
		refuse(e)
		return
	case m.SpecErr != nil:
		refuse(bcp.Errorf(bcp.ValidationFailed, "Subscription spec is not valid: %s", problemList(m.SpecErr.Problems)))
		return
	case r.Spec.Context != "":
		refuse(bcp.Errorf(bcp.ValidationFailed, "Subscription spec is not valid: context: a subscription has none (it is a query's)"))
		return
	}
	spec, problems := r.Spec.Spec(r.Category)
	if len(problems) > 0 {
		refuse(bcp.Errorf(bcp.ValidationFailed, "Subscription spec is not valid: %s", problemList(problems)))
		return
	}
	sub := &agents.Subscription{ID: store.NewID("rt-", 10), Controller: controller, Reader: r.To, Spec: spec}
	if e := set.CheckSubscription(sub); e != nil {
		refuse(e)
		return
	}
	g.mu.Lock()
	waiting := g.subReqs[controller]
	switch {
	case waiting[r.RequestID]:
		// The decision is told by request_id: two requests waiting
		// under one id could not be told apart.
		g.mu.Unlock()
		refuse(bcp.Errorf(bcp.ProtocolError, "request_id '%s' is already used by your subscription request waiting for an operator; use a new request_id for each request", r.RequestID))
		return
	case len(waiting) >= MaxPendingSubscribe:
		g.mu.Unlock()
		refuse(bcp.Errorf(bcp.SubscribeLimit, "'%s' already has %d subscription requests waiting for an operator (at most %d): wait for their decisions",
			controller, len(waiting), MaxPendingSubscribe))
		return
	}
	if waiting == nil {
		waiting = map[string]bool{}
		g.subReqs[controller] = waiting
	}
	waiting[r.RequestID] = true
	g.mu.Unlock()
	shown, err := json.Marshal(runtime.QuerySpec{Fields: spec.Fields, Questions: spec.Questions, Directive: spec.Directive, MaxWords: spec.MaxWords})
	if err != nil { // a spec that passed its checks always encodes
		g.requestClosed(controller, r.RequestID)
		refuse(bcp.Errorf(bcp.ProtocolError, "encode the spec: %v", err))
		return
	}
	bits := bcp.Bits(spec)
	item := store.Approval{
		Kind: store.KindSubscription, Controller: controller, Reader: r.To, SubscriptionID: sub.ID, RequestID: r.RequestID,
		Category: r.Category, Directive: spec.Directive, Response: shown, Bits: bits, CreatedAt: g.now(),
	}
	holdFor(&item, link, g.cfg.ApprovalTTL)
	ev := store.Event{Time: item.CreatedAt, Kind: "approval_queued", Agent: controller, Peer: r.To, Category: int(r.Category), Bits: bits,
		Detail: fmt.Sprintf("Subscription request %s from %s: %s to push Cat-%d (%s per push) as %s; held for an operator",
			r.RequestID, controller, r.To, r.Category, bcp.FormatBits(bits), sub.ID),
		Payload: store.ClipPayload(m.Line())}
	g.cfg.Store.AddApprovalThen(item, []store.Event{ev}, func(item store.Approval, err error) {
		if err != nil {
			g.requestClosed(controller, r.RequestID)
			g.log.Error("store a subscription request", "controller", controller, "error", err)
			result.Status, result.Reason = runtime.SubscribeRejected, bcp.Errorf(bcp.ProtocolError, "the request could not be stored; try again later").Error()
			reply.Send(result)
			return
		}
		g.log.Info("subscription request waiting for an operator", "id", item.ID, "controller", controller, "reader", r.To,
			"subscription", sub.ID, "bits", bits, "decide", g.command("approvals"))
		result.Status, result.SubscriptionID, result.ApprovalID, result.BandwidthBits = runtime.SubscribePending, sub.ID, item.ID, bits
		reply.Send(result)
	})
}

// requestClosed takes controller's request requestID off those waiting
// for an operator: it is decided, or was never stored.
func (g *Gateway) requestClosed(controller, requestID string) {
	g.mu.Lock()
	delete(g.subReqs[controller], requestID)
	if len(g.subReqs[controller]) == 0 {
		delete(g.subReqs, controller)
	}
	g.mu.Unlock()
}

// approveSubscription is Approve for a subscription request. Under the
// reload lock, so that the definitions cannot change between the check
// and the new effective set: the request is checked again against the
// set in force (a reload may have lowered max_category, or removed the
// channel, since it was queued) and dropped if it no longer fits.
func (g *Gateway) approveSubscription(ctx context.Context, item *store.Approval, sha256 string, by store.Decider, note string) (*store.Approval, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if item.Status == store.ApprovalPending && item.SHA256 == sha256 && g.now().Before(item.ExpiresAt) {
		sub, e := requested(item.SubscriptionID, item.Controller, item.Reader, item.Category, item.Response)
		if e == nil {
			e = g.set.Load().CheckSubscription(sub)
		}
		if e != nil {
			return g.drop(ctx, item, e.Error())
		}
	}
	a, _, err := g.cfg.Store.Decide(ctx, store.Decision{ID: item.ID, Status: store.ApprovalApproved, SHA256: sha256,
		By: by, Note: note, At: g.now()})
	if errors.Is(err, store.ErrExpired) {
		g.closeHeld(a, expiredError(a))
		return a, err
	}
	if err != nil {
		return a, err
	}
	if a.Status != store.ApprovalApproved { // counted towards its quorum
		g.log.Info("subscription request approved, waiting for more", "id", a.ID, "by", by.String(), "approvals", a.Progress())
		return a, nil
	}
	g.log.Info("subscription request approved", "id", a.ID, "subscription", a.SubscriptionID, "by", by.String())
	if err := g.applyApproved(g.ctx, "approval of "+a.ID); err != nil {
		// Stored: the next reload or restart puts it in force.
		g.log.Error("put an approved subscription in force", "subscription", a.SubscriptionID, "error", err)
	}
	g.closeHeld(a, nil)
	return a, nil
}

// subscriptionDecided tells the Controller the decision on its request
// (refusal nil means approved): its session now, if it has one.
func (g *Gateway) subscriptionDecided(a *store.Approval, refusal *bcp.Error) {
	g.requestClosed(a.Controller, a.RequestID)
	res := runtime.SubscribeResult{Type: runtime.TypeSubscribeResult, RequestID: a.RequestID, Status: runtime.SubscribeApproved,
		SubscriptionID: a.SubscriptionID, ApprovalID: a.ID, ToAgent: a.Reader, Category: a.Category, BandwidthBits: a.Bits}
	if refusal != nil {
		res.Status, res.Reason = runtime.SubscribeRejected, refusal.Error()
	}
	g.tellSubscriber(a.Controller, res)
}

// tellSubscriber sends res to the Controller's running session. Without
// one it is recorded only (the events say what happened); the Controller
// learns of an approved subscription from its deliveries.
func (g *Gateway) tellSubscriber(controller string, res runtime.SubscribeResult) {
	g.mu.Lock()
	s := g.live[controller]
	g.mu.Unlock()
	if s == nil || s.Ended() || s.Send(g.ctx, res) != nil {
		g.log.Info("the Controller has no session; the decision on its subscription is recorded only",
			"controller", controller, "subscription", res.SubscriptionID, "status", res.Status)
	}
}

// requested rebuilds the subscription an item or a stored row describes
// from the spec it showed.
func requested(id, controller, reader string, cat bcp.Category, shown json.RawMessage) (*agents.Subscription, *bcp.Error) {
	qs, problems := runtime.DecodeQuerySpec(shown)
	var spec bcp.Spec
	if len(problems) == 0 {
		spec, problems = qs.Spec(cat)
	}
	if len(problems) > 0 {
		return nil, bcp.Errorf(bcp.ValidationFailed, "Subscription spec is not valid: %s", problemList(problems))
	}
	return &agents.Subscription{ID: id, Controller: controller, Reader: reader, Spec: spec}, nil
}

// withApproved returns defs plus the approved subscriptions that fit
// them: the set the gateway routes with. Those that no longer fit (a
// reload removed their channel, lowered its max_category or budget, or
// declared the same id) are revoked by the gateway and evented; tell
// tells their Controllers, and must be called once the returned set
// routes (g.set), so that no Controller hears of a revocation while a
// delivery on it can still go out. why names the occasion, for the
// revocations.
func (g *Gateway) withApproved(ctx context.Context, defs *agents.Set, why string) (set *agents.Set, tell func(), err error) {
	rows, err := g.cfg.Store.RuntimeSubscriptions(ctx, false)
	if err != nil {
		return nil, nil, fmt.Errorf("read approved subscriptions: %w", err)
	}
	subs := make([]*agents.Subscription, 0, len(rows))
	var bad []agents.RefusedSubscription
	for _, r := range rows {
		sub, e := requested(r.ID, r.Controller, r.Reader, r.Category, r.Spec)
		if e != nil {
			bad = append(bad, agents.RefusedSubscription{Sub: &agents.Subscription{ID: r.ID, Controller: r.Controller, Reader: r.Reader}, Err: e})
			continue
		}
		subs = append(subs, sub)
	}
	set, refused := defs.WithSubscriptions(subs)
	var told []func()
	for _, x := range append(bad, refused...) {
		reason := fmt.Sprintf("no longer fits the definitions (%s): %s", why, x.Err.Error())
		sub, err := g.cfg.Store.RevokeSubscription(ctx, x.Sub.ID, self(), reason, g.now())
		if err != nil {
			return nil, nil, fmt.Errorf("revoke subscription %s: %w", x.Sub.ID, err)
		}
		g.log.Warn("approved subscription revoked: it no longer fits the definitions", "subscription", sub.ID, "controller", sub.Controller,
			"reader", sub.Reader, "reason", x.Err.Error())
		e := x.Err
		told = append(told, func() { g.tellRevoked(sub, e) })
	}
	return set, func() {
		for _, t := range told {
			t()
		}
	}, nil
}

// applyApproved puts the definitions plus the approved subscriptions in
// force: routing first (a revoked subscription takes no more pushes),
// then the supervisor, which tells each running Reader whose
// subscriptions changed. g.reloadMu must be held.
func (g *Gateway) applyApproved(ctx context.Context, why string) error {
	set, tell, err := g.withApproved(ctx, g.defs.Load(), why)
	if err != nil {
		return err
	}
	g.set.Store(set)
	tell()
	ch, err := g.sv.Reload(g.ctx, set)
	if err != nil {
		return fmt.Errorf("announce subscriptions: %w", err)
	}
	if len(ch.Announced) > 0 {
		g.log.Info("subscriptions announced", "readers", strings.Join(ch.Announced, ", "), "after", why)
	}
	return nil
}

// tellRevoked tells a revoked subscription's Controller, with e's code.
func (g *Gateway) tellRevoked(sub *store.RuntimeSubscription, e *bcp.Error) {
	g.tellSubscriber(sub.Controller, runtime.SubscribeResult{Type: runtime.TypeSubscribeResult, RequestID: sub.RequestID,
		Status: runtime.SubscribeRevoked, SubscriptionID: sub.ID, ApprovalID: sub.ApprovalID, ToAgent: sub.Reader,
		Category: sub.Category, BandwidthBits: sub.Bits, Reason: e.Error()})
}

// RevokeSubscription revokes an approved subscription, by an operator's
// decision: stored and evented with by and reason, then routing refuses
// pushes to it, its Reader is told at once, its pending deliveries are
// dropped when their turn comes (dropped_revoked, as after a reload), and
// its Controller is told. The errors are store.ErrNotFound, ErrDeclared
// (remove it from its definition instead) and store.ErrRevoked.
func (g *Gateway) RevokeSubscription(ctx context.Context, id string, by store.Decider, reason string) (*store.RuntimeSubscription, error) {
	if err := g.waitRunning(ctx); err != nil {
		return nil, err
	}
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	sub, err := g.cfg.Store.RevokeSubscription(ctx, id, by, reason, g.now())
	if errors.Is(err, store.ErrNotFound) {
		if d := declared(g.defs.Load(), id); d != nil {
			return nil, fmt.Errorf("subscription %s of %s to %s is %w (%s): remove it there and reload", id, d.Controller, d.Reader, ErrDeclared,
				g.defs.Load().Agent(d.Controller).File)
		}
	}
	if err != nil {
		return sub, err
	}
	g.log.Info("approved subscription revoked", "subscription", id, "by", by.String(), "reason", reason)
	if err := g.applyApproved(g.ctx, "revocation of "+id); err != nil {
		g.log.Error("put a revocation in force", "subscription", id, "error", err)
	}
	g.tellRevoked(sub, bcp.Errorf(bcp.ApprovalRejected, "Subscription %s revoked by %s: %s", id, by.Name, reason))
	return sub, nil
}

// declared returns a subscription with this id that set declares, or nil.
func declared(set *agents.Set, id string) *agents.Subscription {
	for _, l := range set.Links {
		for _, s := range l.ControllerSide.Subscriptions {
			if s.ID == id {
				return s
			}
		}
	}
	return nil
}

// startApproved builds the set Run starts with: the definitions plus the
// approved subscriptions (revoking those the definitions, changed while
// the gateway was stopped, no longer allow), and notes the requests
// still waiting for an operator.
func (g *Gateway) startApproved(ctx context.Context) error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	set, tell, err := g.withApproved(ctx, g.defs.Load(), "start")
	if err != nil {
		return err
	}
	pending, err := g.cfg.Store.PendingSubscriptionRequests(ctx)
	if err != nil {
		return err
	}
	waiting := map[string]map[string]bool{}
	for c, ids := range pending {
		waiting[c] = map[string]bool{}
		for _, id := range ids {
			waiting[c][id] = true
		}
	}
	g.mu.Lock()
	g.subReqs = waiting
	g.mu.Unlock()
	g.set.Store(set)
	tell()
	g.sv.StartWith(set)
	return nil
}
