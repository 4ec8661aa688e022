package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// ErrRevoked is returned when an approval item can no longer be approved
// because its channel or subscription is gone; the item is dropped.
var ErrRevoked = errors.New("channel or subscription revoked")

// ErrNotRunning is returned by decisions made before Run has started.
var ErrNotRunning = errors.New("gateway is not running yet")

// self is the decider of the gateway's own decisions: expiry and
// revocation.
func self() store.Decider { return store.Decider{Name: "bcpgw"} }

// heldItem is who must hear about an approval item's decision: the Reader
// session that sent it and, for an answer, the query it answers. It is
// kept in memory only: after a restart, decisions are recorded and
// delivered, but the sessions that sent the items are gone.
type heldItem struct {
	reader *session.Session
	query  *pendingQuery
}

// Approvals returns the approval items with the given status (all when
// empty), oldest first.
func (g *Gateway) Approvals(ctx context.Context, status store.ApprovalStatus) ([]store.Approval, error) {
	return g.cfg.Store.Approvals(ctx, status)
}

// Approval returns one approval item.
func (g *Gateway) Approval(ctx context.Context, id string) (*store.Approval, error) {
	return g.cfg.Store.Approval(ctx, id)
}

// Approve releases a pending item for delivery. sha256 must be the hash of
// the content the reviewer was shown (store.ContentHash of its Response):
// an approval applies to that content only. by names who decided. The
// decision is recorded with by and note. The
// errors are store.ErrNotFound, store.ErrDecided (an item is decided
// once), store.ErrHashMismatch, store.ErrExpired and ErrRevoked; on the
// last two the item is closed and the Reader told.
//
// An item that needs several approvals (its policy's required) is
// released by the last of them: before that, Approve counts by's
// approval and returns the item still pending (its Grants say how far it
// is) and the Reader waits on; by approving it again gets
// store.ErrAlreadyApproved.
func (g *Gateway) Approve(ctx context.Context, id, sha256 string, by store.Decider, note string) (*store.Approval, error) {
	if err := g.waitRunning(ctx); err != nil {
		return nil, err
	}
	item, err := g.cfg.Store.Approval(ctx, id)
	if err != nil {
		return nil, err
	}
	if item.Kind == store.KindSubscription {
		return g.approveSubscription(ctx, item, sha256, by, note)
	}
	// A revoked item is dropped, but only by the approval of a reviewer
	// who saw it, and while it could still have been approved; otherwise
	// Decide says why not.
	if item.Status == store.ApprovalPending && item.SHA256 == sha256 && g.now().Before(item.ExpiresAt) {
		if why := g.revoked(item.Controller, item.Reader, item.SubscriptionID, item.QueryID != ""); why != "" {
			return g.drop(ctx, item, why)
		}
	}
	// The released delivery is handed to the outbox on the store's
	// writer, in commit order: handed over here, after Decide returns, a
	// push committed after it could be enqueued first and move its
	// courier's cursor past it, and the courier would never read it.
	released := func(d store.Delivery) {
		g.backlog.add(store.Pair{Controller: d.Controller, Reader: d.Reader})
		g.outbox.enqueue(d)
	}
	a, d, err := g.cfg.Store.Decide(ctx, store.Decision{ID: id, Status: store.ApprovalApproved, SHA256: sha256,
		By: by, Note: note, At: g.now(), Released: released})
	if errors.Is(err, store.ErrExpired) {
		g.closeHeld(a, expiredError(a))
		return a, err
	}
	if err != nil {
		return a, err
	}
	if d == nil { // counted towards its quorum; still pending
		g.log.Info("approval item approved, waiting for more", "id", a.ID, "by", by.String(), "approvals", a.Progress())
		return a, nil
	}
	g.log.Info("approval item approved", "id", a.ID, "by", by.String())
	g.closeHeld(a, nil)
	return a, nil
}

// Reject closes a pending item without delivering it; the Reader hears
// approval_rejected with the reason. If sha256 is not empty it must match
// the item's content hash.
func (g *Gateway) Reject(ctx context.Context, id, sha256 string, by store.Decider, reason string) (*store.Approval, error) {
	if err := g.waitRunning(ctx); err != nil {
		return nil, err
	}
	a, _, err := g.cfg.Store.Decide(ctx, store.Decision{ID: id, Status: store.ApprovalRejected, SHA256: sha256,
		By: by, Reason: reason, At: g.now()})
	if err != nil {
		return a, err
	}
	what := "Publish"
	switch {
	case a.Kind == store.KindSubscription:
		what = "Subscription request"
	case a.QueryID != "":
		what = "Answer"
	}
	g.log.Info("approval item rejected", "id", a.ID, "by", by.String(), "reason", reason)
	g.closeHeld(a, bcp.Errorf(bcp.ApprovalRejected, "%s rejected by reviewer: %s", what, reason))
	return a, nil
}

// waitRunning refuses decisions until Run has loaded the deliveries left
// from before: a decision delivers through the outbox, which Run starts.
func (g *Gateway) waitRunning(ctx context.Context) error {
	select {
	case <-g.running:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	default:
		return ErrNotRunning
	}
}

// drop closes an item whose channel or subscription is gone.
func (g *Gateway) drop(ctx context.Context, item *store.Approval, why string) (*store.Approval, error) {
	a, _, err := g.cfg.Store.Decide(ctx, store.Decision{ID: item.ID, Status: store.ApprovalDropped, By: self(), Reason: why, At: g.now()})
	if err != nil {
		return a, err
	}
	g.event(store.Event{Kind: "dropped_revoked", Agent: a.Reader, Peer: a.Controller, Detail: why, Ref: a.ID, Category: int(a.Category), Bits: a.Bits})
	code := bcp.SubscriptionNotFound
	if a.QueryID != "" {
		code = bcp.NoChannel
	}
	g.closeHeld(a, bcp.Errorf(code, "Approval item %s dropped: %s", a.ID, why))
	return a, fmt.Errorf("approval %s: %w: %s", a.ID, ErrRevoked, why)
}

// expireLoop rejects items not decided within their expiry, every
// ExpiryCheck, until ctx ends.
func (g *Gateway) expireLoop(ctx context.Context) {
	for g.sleep(ctx, g.cfg.ExpiryCheck) {
		g.expireDue(ctx)
	}
}

// expireDue closes every pending item whose expiry has passed.
func (g *Gateway) expireDue(ctx context.Context) {
	due, err := g.cfg.Store.DueForExpiry(ctx, g.now())
	if err != nil {
		g.log.Error("look for expired approval items", "error", err)
		return
	}
	for _, item := range due {
		reason := fmt.Sprintf("no decision within %s", itemTTL(&item))
		if item.Required > 1 {
			reason += fmt.Sprintf(" (%s)", item.Progress())
		}
		a, _, err := g.cfg.Store.Decide(ctx, store.Decision{ID: item.ID, Status: store.ApprovalExpired, By: self(),
			Reason: reason, At: g.now()})
		if err != nil {
			continue // decided meanwhile
		}
		g.log.Warn("approval item expired", "id", a.ID)
		g.closeHeld(a, expiredError(a))
	}
}

// itemTTL is how long an item was given: its policy's ttl, or the
// gateway's --approval-ttl, as fixed when it was queued.
func itemTTL(a *store.Approval) time.Duration { return a.ExpiresAt.Sub(a.CreatedAt) }

func expiredError(a *store.Approval) *bcp.Error {
	return bcp.Errorf(bcp.ApprovalExpired, "Approval item %s expired after %s without a decision", a.ID, itemTTL(a))
}

// holdFor applies the approval policy of the item's subscription, or of
// its channel for an answer, to an item about to be queued: how many
// approvals release it and when it expires (a ttl that overrides
// --approval-ttl). Both are fixed now, with the item: a reload that
// changes the policy applies to items queued after it.
func holdFor(item *store.Approval, link *agents.Link, defaultTTL time.Duration) {
	p := link.Approvals(item.SubscriptionID)
	item.Required = max(p.Required, 1)
	item.ExpiresAt = item.CreatedAt.Add(cmp.Or(p.TTL, defaultTTL))
}

// closeHeld tells the Reader session that sent a decided item the verdict
// (refusal nil means approved), and, for a refused answer, the Controller
// that asked.
func (g *Gateway) closeHeld(a *store.Approval, refusal *bcp.Error) {
	g.metrics.decided(a, g.now())
	if a.Kind == store.KindSubscription { // the Controller asked, not a Reader
		g.subscriptionDecided(a, refusal)
		return
	}
	g.mu.Lock()
	h, ok := g.held[a.ID]
	delete(g.held, a.ID)
	g.mu.Unlock()
	if !ok {
		g.log.Info("the session that sent this item has ended; its verdict is recorded only", "id", a.ID)
		return
	}
	verdict := runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: a.SubscriptionID, QueryID: a.QueryID, Success: refusal == nil}
	if refusal == nil {
		verdict.Detail = successDetail(a.Controller, a.QueryID, a.Category, a.Bits)
	} else {
		verdict.Detail = refusal.Error()
		if h.query != nil {
			g.tellController(h.query, refusal)
		}
	}
	if err := h.reader.Send(g.ctx, verdict); err != nil {
		g.log.Info("the session that sent this item has ended; its verdict is recorded only", "id", a.ID)
	}
}

// successDetail is what a Reader hears when its push or answer is
// accepted for delivery: "Published to controller main (Cat-2, 671.0
// bits)".
func successDetail(controller, queryID string, cat bcp.Category, bits float64) string {
	if queryID != "" {
		return fmt.Sprintf("Answered query %s from controller %s (Cat-%d, %s)", queryID, controller, cat, bcp.FormatBits(bits))
	}
	return fmt.Sprintf("Published to controller %s (Cat-%d, %s)", controller, cat, bcp.FormatBits(bits))
}
