package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// Subscriptions implements control.Backend: the subscriptions the
// definitions declare, in definition order, then the approved ones
// (revoked ones too with p.All), oldest first.
func (o *Operator) Subscriptions(ctx context.Context, p control.SubscriptionsParams) ([]control.SubscriptionInfo, error) {
	out := []control.SubscriptionInfo{}
	for _, l := range o.g.defs.Load().Links {
		for _, s := range l.ControllerSide.Subscriptions {
			out = append(out, control.SubscriptionInfo{
				ID: s.ID, Controller: s.Controller, Reader: s.Reader, Category: int(s.Spec.Category), BandwidthBits: s.Bits,
				Source: control.SourceDefinition, Status: store.SubscriptionActive, Spec: specJSON(s), File: l.Controller.File,
			})
		}
	}
	rows, err := o.g.cfg.Store.RuntimeSubscriptions(ctx, p.All)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		info, err := o.approvedView(ctx, &rows[i])
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// RevokeSubscription implements control.Backend.
func (o *Operator) RevokeSubscription(ctx context.Context, by control.Peer, p control.RevokeParams) (control.SubscriptionInfo, error) {
	sub, err := o.g.RevokeSubscription(ctx, p.ID, decider(by), p.Reason)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return control.SubscriptionInfo{}, control.Errorf(control.CodeNotFound, "no approved subscription %q (see bcpgw subscriptions)", p.ID)
	case errors.Is(err, ErrDeclared):
		return control.SubscriptionInfo{}, control.Errorf(control.CodeInvalidParams, "%v; nothing was changed", err)
	case errors.Is(err, store.ErrRevoked):
		return control.SubscriptionInfo{}, control.Errorf(control.CodeAlreadyDecided, "%v; nothing was changed", err)
	case errors.Is(err, ErrNotRunning):
		return control.SubscriptionInfo{}, control.Errorf(control.CodeNotRunning, "the gateway is still starting; try again in a moment")
	case err != nil:
		return control.SubscriptionInfo{}, err
	}
	return o.approvedView(ctx, sub)
}

// approvedView is an approved subscription as the control API shows it,
// with every operator who approved it (its item's grants).
func (o *Operator) approvedView(ctx context.Context, r *store.RuntimeSubscription) (control.SubscriptionInfo, error) {
	v := control.SubscriptionInfo{
		ID: r.ID, Controller: r.Controller, Reader: r.Reader, Category: int(r.Category), BandwidthBits: r.Bits,
		Source: control.SourceApproved, Status: r.Status, Spec: r.Spec, RequestID: r.RequestID, ApprovalID: r.ApprovalID,
		ApprovedBy: r.ApprovedBy.String(), ApprovedAt: r.ApprovedAt, Reason: r.Reason,
	}
	if a, err := o.g.cfg.Store.Approval(ctx, r.ApprovalID); err == nil && len(a.Grants) > 0 {
		names := make([]string, len(a.Grants))
		for i, g := range a.Grants {
			names[i] = g.By.String()
		}
		v.ApprovedBy = strings.Join(names, ", ")
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return v, err
	}
	if r.Status == store.SubscriptionRevoked {
		v.RevokedBy, v.RevokedAt = r.RevokedBy.String(), r.RevokedAt
	}
	return v, nil
}

// specJSON is a declared subscription's spec in the wire's spelling.
func specJSON(s *agents.Subscription) json.RawMessage {
	b, err := json.Marshal(runtime.QuerySpec{Fields: s.Spec.Fields, Questions: s.Spec.Questions, Directive: s.Spec.Directive, MaxWords: s.Spec.MaxWords})
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}
