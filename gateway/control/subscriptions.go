package control

import (
	"context"
	"encoding/json"
	"time"
)

// The methods on subscriptions: those the definitions declare and those
// operators approved at a Controller's request (BCPSubscribe), which an
// operator may revoke.
const (
	MethodSubscriptionsList   = "subscriptions.list"
	MethodSubscriptionsRevoke = "subscriptions.revoke"
)

// SubscriptionsBackend is the part of Backend behind the subscriptions
// methods.
type SubscriptionsBackend interface {
	// Subscriptions lists the declared subscriptions and the approved
	// ones (revoked ones too when p.All).
	Subscriptions(ctx context.Context, p SubscriptionsParams) ([]SubscriptionInfo, error)
	// RevokeSubscription revokes an approved subscription: its Reader is
	// told at once, its pending deliveries are dropped, its Controller is
	// told, and the revocation is audited with by.
	RevokeSubscription(ctx context.Context, by Peer, p RevokeParams) (SubscriptionInfo, error)
}

// SubscriptionsParams are the params of subscriptions.list.
type SubscriptionsParams struct {
	// All adds the revoked approved subscriptions.
	All bool `json:"all,omitempty"`
}

// RevokeParams are the params of subscriptions.revoke: the subscription's
// id and why (required: the Controller and the audit log are told).
type RevokeParams struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// The sources of a subscription.
const (
	SourceDefinition = "definition" // declared in the Controller's definition file
	SourceApproved   = "approved"   // asked for at run time and approved by operators
)

// SubscriptionInfo is one subscription in subscriptions.list.
type SubscriptionInfo struct {
	ID            string  `json:"id"`
	Controller    string  `json:"controller"`
	Reader        string  `json:"reader"`
	Category      int     `json:"category"`
	BandwidthBits float64 `json:"bandwidth_bits"`
	Source        string  `json:"source"` // SourceDefinition or SourceApproved
	// Status is "active", or "revoked" for an approved one revoked.
	Status string `json:"status"`
	// Spec is what the Reader may push, in the wire's spelling (fields |
	// questions | directive, max_words).
	Spec json.RawMessage `json:"spec"`
	// File is the definition that declares it (SourceDefinition).
	File string `json:"file,omitempty"`
	// The rest is set for SourceApproved: the request, its approval item,
	// who approved it and when, and its revocation.
	RequestID  string    `json:"request_id,omitempty"`
	ApprovalID string    `json:"approval_id,omitempty"`
	ApprovedBy string    `json:"approved_by,omitempty"` // every operator who approved it
	ApprovedAt time.Time `json:"approved_at,omitzero"`
	RevokedBy  string    `json:"revoked_by,omitempty"`
	RevokedAt  time.Time `json:"revoked_at,omitzero"`
	Reason     string    `json:"reason,omitempty"` // why it was revoked
}

// Subscriptions lists the subscriptions (revoked approved ones too when
// all).
func (cl *Client) Subscriptions(ctx context.Context, all bool) ([]SubscriptionInfo, error) {
	var out []SubscriptionInfo
	err := cl.Call(ctx, MethodSubscriptionsList, SubscriptionsParams{All: all}, &out)
	return out, err
}

// RevokeSubscription revokes an approved subscription.
func (cl *Client) RevokeSubscription(ctx context.Context, id, reason string) (SubscriptionInfo, error) {
	var s SubscriptionInfo
	err := cl.Call(ctx, MethodSubscriptionsRevoke, RevokeParams{ID: id, Reason: reason}, &s)
	return s, err
}

// subscriptionsCall dispatches the subscriptions methods.
func (cc *conn) subscriptionsCall(req *request) (any, error) {
	ctx, b, peer := cc.ctx, cc.s.cfg.Backend, cc.peer
	if req.Method == MethodSubscriptionsList {
		var p SubscriptionsParams
		if err := decode(req.Params, &p); err != nil {
			return nil, err
		}
		subs, err := b.Subscriptions(ctx, p)
		if subs == nil {
			subs = []SubscriptionInfo{}
		}
		return subs, err
	}
	var p RevokeParams
	if err := decode(req.Params, &p); err != nil {
		return nil, err
	}
	if p.ID == "" || p.Reason == "" {
		return nil, Errorf(CodeInvalidParams, `"id" and "reason" are required`)
	}
	return b.RevokeSubscription(ctx, peer, p)
}
