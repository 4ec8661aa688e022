package store

import (
	"context"
	"database/sql"
	"fmt"
)

// Per-subscription figures (bcpgw report): what each subscription
// carried, by outcome, kept in tables of their own (migration 11) by the
// transaction that stores the events they come from, like the exposure
// figures, so that retention does not take them. An event counts when the
// gateway tags it with Event.Subscription; the gateway tags only
// subscriptions of the definitions in force, so that a Reader cannot grow
// the tables with ids of its own.

// SubscriptionFigures is what one subscription carried since the figures
// began (the migration that made them, or the subscription's first push).
type SubscriptionFigures struct {
	Controller string
	Reader     string
	ID         string
	Accepted   int64 // pushes accepted: delivered or held for review
	Held       int64 // of those, held for an operator
	Filtered   int64 // accepted but kept from the Controller by its filter
	Superseded int64 // accepted, then replaced by a newer push (debounce)
	Refused    int64
	Delivered  int64   // deliveries the Controller acknowledged (a batch is one)
	Bits       float64 // charged for the accepted pushes, less the superseded ones
	// RefusedBy counts the refusals by error code.
	RefusedBy map[string]int64
}

// The statements that keep the figures. Each upsert adds to one column.
const (
	sqlFigureUpsert = `INSERT INTO subscription_figures (controller, reader, id, accepted, held, filtered, superseded, refused, delivered, bits)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (controller, reader, id) DO UPDATE SET accepted = accepted + excluded.accepted, held = held + excluded.held,
		filtered = filtered + excluded.filtered, superseded = superseded + excluded.superseded, refused = refused + excluded.refused,
		delivered = delivered + excluded.delivered, bits = bits + excluded.bits`
	sqlRefusalUpsert = `INSERT INTO subscription_refusals (controller, reader, id, code, n) VALUES (?, ?, ?, ?, 1)
		ON CONFLICT (controller, reader, id, code) DO UPDATE SET n = n + 1`
)

// FigureOf says what a tagged event (Event.Subscription set) adds to its
// subscription's figures: the channel it counts for, and its outcome:
// "accepted" (stored for delivery), "held" (for an operator), "filtered",
// "superseded" (replaced by a newer push), "refused" or "delivered"
// (acknowledged by the Controller). ok is false
// for an event that adds nothing. The event's Agent is the Reader for
// what a Reader sent, and the Controller for an acknowledgment.
func FigureOf(e Event) (controller, reader, outcome string, ok bool) {
	if e.Subscription == "" {
		return "", "", "", false
	}
	switch e.Kind {
	case "publish_accepted":
		return e.Peer, e.Agent, "accepted", true
	case "approval_queued":
		return e.Peer, e.Agent, "held", true
	case "push_filtered":
		return e.Peer, e.Agent, "filtered", true
	case "push_superseded":
		return e.Peer, e.Agent, "superseded", true
	case "refused":
		return e.Peer, e.Agent, "refused", true
	case "delivery_acked":
		return e.Agent, e.Peer, "delivered", true
	}
	return "", "", "", false
}

// recordFigures applies one event to its subscription's figures, if it
// is tagged, in the transaction that stores it.
func recordFigures(tx execer, e *Event) error {
	controller, reader, outcome, ok := FigureOf(*e)
	if !ok {
		return nil
	}
	var accepted, held, filtered, superseded, refused, delivered int64
	var bits float64
	switch outcome {
	case "accepted":
		accepted, bits = 1, e.Bits
	case "held":
		accepted, held, bits = 1, 1, e.Bits
	case "filtered":
		filtered = 1
	case "superseded":
		superseded, bits = 1, -e.Bits // it never reached the Controller
	case "refused":
		refused = 1
	case "delivered":
		delivered = 1
	}
	sub := clip(e.Subscription, maxEventName)
	if _, err := tx.Exec(sqlFigureUpsert, controller, reader, sub, accepted, held, filtered, superseded, refused, delivered, bits); err != nil {
		return fmt.Errorf("subscription figures: %w", err)
	}
	if refused == 1 && e.Code != "" {
		if _, err := tx.Exec(sqlRefusalUpsert, controller, reader, sub, e.Code); err != nil {
			return fmt.Errorf("subscription refusals: %w", err)
		}
	}
	return nil
}

// SubscriptionFigures returns the figures of every subscription that
// carried anything, of one Controller's if controller is not empty, in
// the order of controller, reader and id.
func (s *Store) SubscriptionFigures(ctx context.Context, controller string) ([]SubscriptionFigures, error) {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}) // one snapshot for both reads
	if err != nil {
		return nil, fmt.Errorf("read subscription figures: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT controller, reader, id, accepted, held, filtered, superseded, refused, delivered, bits
		FROM subscription_figures WHERE ? = '' OR controller = ? ORDER BY controller, reader, id`, controller, controller)
	if err != nil {
		return nil, fmt.Errorf("read subscription figures: %w", err)
	}
	var out []SubscriptionFigures
	index := map[[3]string]int{}
	for rows.Next() {
		var f SubscriptionFigures
		if err := rows.Scan(&f.Controller, &f.Reader, &f.ID, &f.Accepted, &f.Held, &f.Filtered, &f.Superseded, &f.Refused, &f.Delivered, &f.Bits); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read subscription figures: %w", err)
		}
		f.RefusedBy = map[string]int64{}
		index[[3]string{f.Controller, f.Reader, f.ID}] = len(out)
		out = append(out, f)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("read subscription figures: %w", err)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read subscription figures: %w", err)
	}
	rows, err = tx.QueryContext(ctx, `SELECT controller, reader, id, code, n FROM subscription_refusals
		WHERE ? = '' OR controller = ?`, controller, controller)
	if err != nil {
		return nil, fmt.Errorf("read subscription refusals: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k [3]string
		var code string
		var n int64
		if err := rows.Scan(&k[0], &k[1], &k[2], &code, &n); err != nil {
			return nil, fmt.Errorf("read subscription refusals: %w", err)
		}
		if i, ok := index[k]; ok {
			out[i].RefusedBy[code] = n
		}
	}
	return out, rows.Err()
}
