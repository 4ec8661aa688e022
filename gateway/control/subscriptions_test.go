package control

import (
	"context"
	"encoding/json"
	"testing"
)

func (f *fakeBackend) Subscriptions(ctx context.Context, p SubscriptionsParams) ([]SubscriptionInfo, error) {
	if err := f.enter(ctx, "Subscriptions", Peer{}, p); err != nil {
		return nil, err
	}
	out := []SubscriptionInfo{{ID: "alerts", Controller: "main", Reader: "r", Category: 1, Source: SourceDefinition, Status: "active",
		Spec: json.RawMessage(`{"fields":[]}`)}}
	if p.All {
		out = append(out, SubscriptionInfo{ID: "rt-x", Controller: "main", Reader: "r", Source: SourceApproved, Status: "revoked"})
	}
	return out, nil
}

func (f *fakeBackend) RevokeSubscription(ctx context.Context, by Peer, p RevokeParams) (SubscriptionInfo, error) {
	if err := f.enter(ctx, "RevokeSubscription", by, p); err != nil {
		return SubscriptionInfo{}, err
	}
	return SubscriptionInfo{ID: p.ID, Source: SourceApproved, Status: "revoked", Reason: p.Reason}, nil
}

// The subscriptions methods reach the backend with their params and, for
// a revocation, the peer who decided; a revocation needs an id and a
// reason.
func TestSubscriptionsListAndRevoke(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)
	subs, err := cl.Subscriptions(ctx, false)
	if err != nil || len(subs) != 1 || subs[0].Source != SourceDefinition {
		t.Fatalf("list: %+v, %v", subs, err)
	}
	if subs, err = cl.Subscriptions(ctx, true); err != nil || len(subs) != 2 {
		t.Fatalf("list --all: %+v, %v", subs, err)
	}
	s, err := cl.RevokeSubscription(ctx, "rt-x", "no longer needed")
	if err != nil || s.Status != "revoked" || s.Reason != "no longer needed" {
		t.Fatalf("revoke: %+v, %v", s, err)
	}
	if calls := fb.callsOf("RevokeSubscription"); len(calls) != 1 || calls[0].Peer.PID == 0 {
		t.Errorf("revoke calls %+v, want one naming the peer", calls)
	}
	if _, err := cl.RevokeSubscription(ctx, "rt-x", ""); CodeOf(err) != CodeInvalidParams {
		t.Errorf("revoke without a reason: %v, want invalid_params", err)
	}
	if _, err := cl.RevokeSubscription(ctx, "", "x"); CodeOf(err) != CodeInvalidParams {
		t.Errorf("revoke without an id: %v, want invalid_params", err)
	}
}
