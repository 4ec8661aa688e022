package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
)

// DeliveryState is where a delivery is in the outbox.
type DeliveryState string

// The delivery states. Only pending deliveries are sent.
const (
	DeliveryPending   DeliveryState = "pending"
	DeliveryDelivered DeliveryState = "delivered" // the runtime answered result
	DeliveryDropped   DeliveryState = "dropped"   // its channel or subscription was revoked
)

// Delivery is validated data on its way to a Controller: a push (with
// SubscriptionID) or an answer (with QueryID and RequestID).
type Delivery struct {
	Seq            int64  // order of acceptance; set by AddDelivery
	ID             string // the idempotency key runtimes see; set by AddDelivery if empty
	Controller     string
	Reader         string
	SubscriptionID string
	QueryID        string
	RequestID      string
	ApprovalID     string // the approval item it came from, if any
	Category       bcp.Category
	Response       json.RawMessage // the normalized response
	Anomalies      []bcp.Anomaly
	Bits           float64
	State          DeliveryState
	Attempts       int // sends so far, as far as the store knows
	CreatedAt      time.Time
	DoneAt         time.Time
	DoneDetail     string
}

const deliveryColumns = `seq, id, controller, reader, subscription_id, query_id, request_id, approval_id,
	category, response, anomalies, bits, state, attempts, created_at, done_at, done_detail`

func insertDelivery(tx *wtx, d *Delivery) error {
	if d.ID == "" {
		d.ID = NewID("dl-", 16)
	}
	d.State = DeliveryPending
	anomalies, err := json.Marshal(nonNilAnomalies(d.Anomalies))
	if err != nil {
		return err
	}
	res, err := tx.Exec(sqlInsertDelivery,
		d.ID, d.Controller, d.Reader, d.SubscriptionID, d.QueryID, d.RequestID, d.ApprovalID,
		int(d.Category), string(d.Response), string(anomalies), d.Bits, millis(d.CreatedAt))
	if err != nil {
		return fmt.Errorf("insert delivery: %w", err)
	}
	d.Seq, err = res.LastInsertId()
	return err
}

// AddDelivery stores d and the events that go with it in one durable
// commit, and returns once it is durable. It sets d.Seq, d.State and, if
// empty, d.ID. On error nothing was stored.
func (s *Store) AddDelivery(ctx context.Context, d *Delivery, events ...Event) error {
	stored := *d
	err := s.write(ctx, addDelivery(&stored, events))
	if err == nil {
		*d = stored
	}
	return err
}

// AddDeliveryThen is AddDelivery without waiting: then receives the stored
// delivery, or the error, once the commit is durable. then runs on the
// store's writer goroutine, so it must not block; in exchange, deliveries
// accepted one after the other are reported in that order.
func (s *Store) AddDeliveryThen(d Delivery, events []Event, then func(Delivery, error)) {
	s.writeThen(addDelivery(&d, events), func(err error) { then(d, err) })
}

func addDelivery(d *Delivery, events []Event) func(*wtx) error {
	if d.ID == "" {
		d.ID = NewID("dl-", 16)
	}
	events = withRef(events, d.ID)
	return func(tx *wtx) error {
		if err := insertDelivery(tx, d); err != nil {
			return err
		}
		return insertEvents(tx, events)
	}
}

// MarkAttempted counts a send of the delivery and records its events. It
// does not wait for the
// commit: a crash can lose the count, and then the next send after a
// restart says redelivered false for a delivery the runtime may have seen
// already. Its delivery_id still lets the runtime drop the duplicate.
func (s *Store) MarkAttempted(id string, events ...Event) {
	events = withRef(events, id)
	s.writeAsync(func(tx *wtx) error {
		if _, err := tx.Exec(sqlMarkAttempted, id); err != nil {
			return err
		}
		return insertEvents(tx, events)
	})
}

// FinishDelivery records that a pending delivery was delivered or
// dropped, with its events. A delivery already finished is left alone.
// It does not wait for the commit: if it is lost, the delivery is sent
// again after a restart and the runtime drops it by its delivery_id.
func (s *Store) FinishDelivery(id string, state DeliveryState, detail string, at time.Time, events ...Event) {
	events = withRef(events, id)
	s.writeAsync(func(tx *wtx) error {
		res, err := tx.Exec(sqlFinishDelivery,
			string(state), millis(at), detail, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		return insertEvents(tx, events)
	})
}

// PendingDeliveries returns every delivery not yet delivered or dropped,
// in the order they were accepted.
func (s *Store) PendingDeliveries(ctx context.Context) ([]Delivery, error) {
	return s.deliveries(ctx, `WHERE state = 'pending' ORDER BY seq`)
}

// Backlog counts the pending approval items and the deliveries not yet
// delivered or dropped, without reading them (both are indexed by state).
func (s *Store) Backlog(ctx context.Context) (approvals, deliveries int, err error) {
	err = s.rdb.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM approvals WHERE status = 'pending'),
		(SELECT count(*) FROM deliveries WHERE state = 'pending')`).Scan(&approvals, &deliveries)
	if err != nil {
		return 0, 0, fmt.Errorf("count backlog: %w", err)
	}
	return approvals, deliveries, nil
}

// Delivery returns one delivery by id, or ErrNotFound.
func (s *Store) Delivery(ctx context.Context, id string) (*Delivery, error) {
	ds, err := s.deliveries(ctx, `WHERE id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return nil, fmt.Errorf("delivery %s: %w", id, ErrNotFound)
	}
	return &ds[0], nil
}

// Deliveries returns every delivery in acceptance order.
func (s *Store) Deliveries(ctx context.Context) ([]Delivery, error) {
	return s.deliveries(ctx, `ORDER BY seq`)
}

func (s *Store) deliveries(ctx context.Context, where string, args ...any) ([]Delivery, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM deliveries `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read deliveries: %w", err)
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var d Delivery
		var response, anomalies, state string
		var category int
		var created, done int64
		if err := rows.Scan(&d.Seq, &d.ID, &d.Controller, &d.Reader, &d.SubscriptionID, &d.QueryID, &d.RequestID,
			&d.ApprovalID, &category, &response, &anomalies, &d.Bits, &state, &d.Attempts, &created, &done, &d.DoneDetail); err != nil {
			return nil, fmt.Errorf("read deliveries: %w", err)
		}
		d.Category, d.Response, d.State = bcp.Category(category), json.RawMessage(response), DeliveryState(state)
		d.CreatedAt, d.DoneAt = fromMillis(created), fromMillis(done)
		if err := json.Unmarshal([]byte(anomalies), &d.Anomalies); err != nil {
			return nil, fmt.Errorf("read delivery %s: anomalies: %w", d.ID, err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func nonNilAnomalies(a []bcp.Anomaly) []bcp.Anomaly {
	if a == nil {
		return []bcp.Anomaly{}
	}
	return a
}
