package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
)

// ErrRevoked is a revocation of a runtime subscription that is already
// revoked. Nothing changes.
var ErrRevoked = errors.New("already revoked")

// The statuses of a runtime subscription.
const (
	SubscriptionActive  = "active"
	SubscriptionRevoked = "revoked"
)

// RuntimeSubscription is a subscription a Controller asked for at run
// time (BCPSubscribe) and operators approved: added by the approval of its
// item (Decide) in the same commit, active until revoked. The definitions
// never hold it; the gateway adds the active ones to them.
type RuntimeSubscription struct {
	Seq        int64
	ID         string // the subscription id, the gateway's choice
	Controller string
	Reader     string
	Category   bcp.Category
	Spec       json.RawMessage // as its approval item showed it, in the wire's spelling
	Bits       float64
	RequestID  string // the Controller's request
	ApprovalID string
	Status     string // SubscriptionActive or SubscriptionRevoked
	ApprovedAt time.Time
	// ApprovedBy completed the approval (its item's Grants name every
	// operator who approved it).
	ApprovedBy Decider
	RevokedAt  time.Time
	RevokedBy  Decider
	Reason     string // why it was revoked
}

const runtimeSubscriptionColumns = `seq, id, controller, reader, category, spec, bits, request_id, approval_id, status,
	approved_at, approved_by, approved_uid, approved_pid, revoked_at, revoked_by, revoked_uid, revoked_pid, reason`

// insertRuntimeSubscription adds the subscription an approved
// KindSubscription item asked for, as its decider approved it (a.DecidedAt,
// a.DecidedBy), with a subscription_approved event.
func insertRuntimeSubscription(tx *wtx, a *Approval) error {
	if _, err := tx.Exec(`INSERT INTO runtime_subscriptions (id, controller, reader, category, spec, bits, request_id, approval_id,
		approved_at, approved_by, approved_uid, approved_pid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
		a.SubscriptionID, a.Controller, a.Reader, int(a.Category), string(a.Response), a.Bits, a.RequestID, a.ID,
		millis(a.DecidedAt), a.DecidedBy.Name, a.DecidedBy.UID, a.DecidedBy.PID); err != nil {
		return fmt.Errorf("add subscription %s: %w", a.SubscriptionID, err)
	}
	return insertEvents(tx, []Event{{
		Time: a.DecidedAt, Kind: "subscription_approved", Agent: a.Controller, Peer: a.Reader, Ref: a.SubscriptionID,
		Category: int(a.Category), Bits: a.Bits,
		Detail: fmt.Sprintf("Subscription %s of %s to %s (Cat-%d, %s per push) approved by %s (item %s, request %s)",
			a.SubscriptionID, a.Controller, a.Reader, a.Category, bcp.FormatBits(a.Bits), grantors(a.Grants), a.ID, a.RequestID),
	}})
}

// RuntimeSubscriptions returns the runtime subscriptions, active ones
// only unless all, oldest first.
func (s *Store) RuntimeSubscriptions(ctx context.Context, all bool) ([]RuntimeSubscription, error) {
	q := `SELECT ` + runtimeSubscriptionColumns + ` FROM runtime_subscriptions WHERE status = 'active' ORDER BY seq`
	if all {
		q = `SELECT ` + runtimeSubscriptionColumns + ` FROM runtime_subscriptions ORDER BY seq`
	}
	return scanRuntimeSubscriptions(s.rdb.QueryContext(ctx, q))
}

// RuntimeSubscription returns one runtime subscription, or ErrNotFound.
func (s *Store) RuntimeSubscription(ctx context.Context, id string) (*RuntimeSubscription, error) {
	subs, err := scanRuntimeSubscriptions(s.rdb.QueryContext(ctx, `SELECT `+runtimeSubscriptionColumns+` FROM runtime_subscriptions WHERE id = ?`, id))
	if err != nil {
		return nil, err
	}
	if len(subs) == 0 {
		return nil, fmt.Errorf("subscription %s: %w", id, ErrNotFound)
	}
	return &subs[0], nil
}

// RevokeSubscription revokes an active runtime subscription, with a
// subscription_revoked event naming by and why, in one durable commit,
// and returns it as revoked. The errors are ErrNotFound and ErrRevoked.
func (s *Store) RevokeSubscription(ctx context.Context, id string, by Decider, reason string, at time.Time) (*RuntimeSubscription, error) {
	var sub *RuntimeSubscription
	err := s.write(ctx, func(tx *wtx) error {
		subs, err := scanRuntimeSubscriptions(tx.Query(`SELECT `+runtimeSubscriptionColumns+` FROM runtime_subscriptions WHERE id = ?`, id))
		if err != nil {
			return err
		}
		if len(subs) == 0 {
			return fmt.Errorf("subscription %s: %w", id, ErrNotFound)
		}
		sub = &subs[0]
		if sub.Status != SubscriptionActive {
			return fmt.Errorf("subscription %s was revoked at %s by %s: %w", id, sub.RevokedAt.UTC().Format(time.RFC3339), sub.RevokedBy, ErrRevoked)
		}
		if _, err := tx.Exec(`UPDATE runtime_subscriptions SET status = 'revoked', revoked_at = ?, revoked_by = ?, revoked_uid = ?,
			revoked_pid = ?, reason = ? WHERE id = ? AND status = 'active'`, millis(at), by.Name, by.UID, by.PID, reason, id); err != nil {
			return fmt.Errorf("revoke subscription %s: %w", id, err)
		}
		sub.Status, sub.RevokedAt, sub.RevokedBy, sub.Reason = SubscriptionRevoked, at, by, reason
		return insertEvents(tx, []Event{{
			Time: at, Kind: "subscription_revoked", Agent: sub.Controller, Peer: sub.Reader, Ref: sub.ID,
			Category: int(sub.Category), Bits: sub.Bits,
			Detail: fmt.Sprintf("Subscription %s of %s to %s revoked by %s: %s", sub.ID, sub.Controller, sub.Reader, by, reason),
		}})
	})
	return sub, err
}

// PendingSubscriptionRequests lists, for each Controller, the request ids
// of its subscription requests that wait for an operator.
func (s *Store) PendingSubscriptionRequests(ctx context.Context) (map[string][]string, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT controller, request_id FROM approvals
		WHERE kind = 'subscription' AND status = 'pending' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read pending subscription requests: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var c, r string
		if err := rows.Scan(&c, &r); err != nil {
			return nil, fmt.Errorf("read pending subscription requests: %w", err)
		}
		out[c] = append(out[c], r)
	}
	return out, rows.Err()
}

func scanRuntimeSubscriptions(rows *sql.Rows, err error) ([]RuntimeSubscription, error) {
	if err != nil {
		return nil, fmt.Errorf("read runtime subscriptions: %w", err)
	}
	defer rows.Close()
	var out []RuntimeSubscription
	for rows.Next() {
		var r RuntimeSubscription
		var category int
		var spec string
		var approved, revoked int64
		if err := rows.Scan(&r.Seq, &r.ID, &r.Controller, &r.Reader, &category, &spec, &r.Bits, &r.RequestID, &r.ApprovalID, &r.Status,
			&approved, &r.ApprovedBy.Name, &r.ApprovedBy.UID, &r.ApprovedBy.PID, &revoked, &r.RevokedBy.Name, &r.RevokedBy.UID,
			&r.RevokedBy.PID, &r.Reason); err != nil {
			return nil, fmt.Errorf("read runtime subscriptions: %w", err)
		}
		r.Category, r.Spec = bcp.Category(category), json.RawMessage(spec)
		r.ApprovedAt, r.RevokedAt = fromMillis(approved), fromMillis(revoked)
		out = append(out, r)
	}
	return out, rows.Err()
}
