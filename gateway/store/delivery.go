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

// DeliveryState is where a delivery is in the outbox.
type DeliveryState string

// The delivery states. Only pending deliveries are sent.
const (
	DeliveryPending   DeliveryState = "pending"
	DeliveryDelivered DeliveryState = "delivered" // the runtime answered result
	DeliveryDropped   DeliveryState = "dropped"   // revoked, or discarded by an operator
	// DeliveryParked is a delivery that kept failing: set aside, not
	// sent, until an operator retries (back to pending) or discards it
	// (dropped). Retention never prunes it.
	DeliveryParked DeliveryState = "parked"
	// DeliveryHeld is a push of a batched subscription waiting in its
	// open batch; DeliveryBatched one whose batch was closed into a
	// delivery of its own (BatchID), which is what the outbox sends.
	DeliveryHeld    DeliveryState = "held"
	DeliveryBatched DeliveryState = "batched"
	// DeliverySuperseded is a push that a newer one with the same
	// debounce key replaced before it was handed to the Controller: never
	// sent, its charge refunded (see AddPushThen).
	DeliverySuperseded DeliveryState = "superseded"
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
	Attempts       int // sends so far, as far as the store knows (decides redelivered)
	Failures       int // sessions that ended before acknowledging it (decides parking)
	CreatedAt      time.Time
	DoneAt         time.Time
	DoneDetail     string
	// Entity is a debounced push's key value (JSON); empty otherwise.
	Entity string
	// BatchID is, on a push of a batched subscription, the id of the
	// batch delivery it goes (or went) into.
	BatchID string
	// Items are the pushes of a batch delivery, in the order they were
	// accepted; nil for any other delivery. A batch's Response is then
	// the list of their responses, its Bits their sum, its Anomalies
	// theirs with the item's index in Field ("[2].topic").
	Items []BatchItem
}

// BatchItem is one push of a batch delivery, as it was accepted.
type BatchItem struct {
	ID         string          `json:"delivery_id"`
	Response   json.RawMessage `json:"response"`
	Anomalies  []bcp.Anomaly   `json:"anomalies,omitempty"`
	Bits       float64         `json:"bits"`
	AcceptedAt int64           `json:"accepted_at"` // Unix milliseconds
}

// Weight is how many accepted pushes or answers d carries: a batch's
// items, else 1 (the backlog counts pushes).
func (d Delivery) Weight() int { return max(1, len(d.Items)) }

const deliveryColumns = `seq, id, controller, reader, subscription_id, query_id, request_id, approval_id,
	category, response, anomalies, bits, state, attempts, failures, created_at, done_at, done_detail, entity, batch_id, items`

func insertDelivery(tx *wtx, d *Delivery) error {
	if d.ID == "" {
		d.ID = NewID("dl-", 16)
	}
	if d.State != DeliveryHeld { // a push held in its open batch, else pending
		d.State = DeliveryPending
	}
	anomalies, err := json.Marshal(nonNilAnomalies(d.Anomalies))
	if err != nil {
		return err
	}
	response := string(d.Response)
	if d.Items != nil { // a batch keeps its items, which Response lists
		b, err := json.Marshal(d.Items)
		if err != nil {
			return err
		}
		response, anomalies = string(b), []byte("[]")
	}
	res, err := tx.Exec(sqlInsertDelivery,
		d.ID, d.Controller, d.Reader, d.SubscriptionID, d.QueryID, d.RequestID, d.ApprovalID,
		int(d.Category), response, string(anomalies), d.Bits, millis(d.CreatedAt), string(d.State), d.Entity, d.BatchID, len(d.Items))
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

// RecordFailure counts a session of the delivery's Controller that ended
// before acknowledging it, with its events. It does not wait for the
// commit: a lost count only delays parking.
func (s *Store) RecordFailure(id string, events ...Event) {
	events = withRef(events, id)
	s.writeAsync(func(tx *wtx) error {
		if _, err := tx.Exec(sqlRecordFailure, id); err != nil {
			return err
		}
		return insertEvents(tx, events)
	})
}

// FinishDelivery records that a pending delivery was delivered, dropped
// or parked, with its events. A delivery already finished is left alone.
// It does not wait for the commit: if it is lost, the delivery is sent
// again after a restart and the runtime drops it by its delivery_id.
func (s *Store) FinishDelivery(id string, state DeliveryState, detail string, at time.Time, events ...Event) {
	s.finish(sqlFinishDelivery, id, state, detail, at, events)
}

// FinishSent is FinishDelivery for a delivery whose last send was not yet
// counted (MarkAttempted): it counts it in the same statement. The
// outbox uses it when the runtime answers quickly, which saves a write on
// nearly every push; events holds the send's event and the finish's.
func (s *Store) FinishSent(id string, state DeliveryState, detail string, at time.Time, events ...Event) {
	s.finish(sqlFinishSent, id, state, detail, at, events)
}

func (s *Store) finish(query, id string, state DeliveryState, detail string, at time.Time, events []Event) {
	events = withRef(events, id)
	s.writeAsync(func(tx *wtx) error {
		res, err := tx.Exec(query, string(state), millis(at), detail, id)
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

// PendingFor returns at most limit pending deliveries to controller with
// seq greater than after, in the order they were accepted: the outbox
// reads its backlog a page at a time (deliveries_pending_by_controller).
func (s *Store) PendingFor(ctx context.Context, controller string, after int64, limit int) ([]Delivery, error) {
	return s.deliveries(ctx, `WHERE controller = ? AND state = 'pending' AND seq > ? ORDER BY seq LIMIT ?`, controller, after, limit)
}

// Pair is one channel's direction of delivery: from Reader to Controller.
type Pair struct{ Controller, Reader string }

// PendingByPair counts the pending deliveries of each (Controller,
// Reader) pair that has any.
func (s *Store) PendingByPair(ctx context.Context) (map[Pair]int, error) {
	// A batch counts its pushes; a push held in an open batch counts too.
	rows, err := s.rdb.QueryContext(ctx, `SELECT controller, reader, sum(max(items, 1)) FROM deliveries
		WHERE state IN ('pending', 'held') GROUP BY controller, reader`)
	if err != nil {
		return nil, fmt.Errorf("count pending deliveries: %w", err)
	}
	defer rows.Close()
	out := map[Pair]int{}
	for rows.Next() {
		var p Pair
		var n int
		if err := rows.Scan(&p.Controller, &p.Reader, &n); err != nil {
			return nil, fmt.Errorf("count pending deliveries: %w", err)
		}
		out[p] = n
	}
	return out, rows.Err()
}

// Backlog counts the pending approval items and the deliveries not yet
// delivered or dropped, without reading them (both are indexed by state).
func (s *Store) Backlog(ctx context.Context) (approvals, deliveries int, err error) {
	b, err := s.BacklogCounts(ctx)
	return b.Approvals, b.Deliveries, err
}

// BacklogCounts is what waits: approval items for a decision, deliveries
// for their Controller, parked deliveries for an operator.
type BacklogCounts struct {
	Approvals, Deliveries, Parked int
}

// BacklogCounts counts the backlog without reading it (each count is an
// index range).
func (s *Store) BacklogCounts(ctx context.Context) (BacklogCounts, error) {
	var b BacklogCounts
	err := s.rdb.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM approvals WHERE status = 'pending'),
		(SELECT count(*) FROM deliveries WHERE state = 'pending'),
		(SELECT count(*) FROM deliveries WHERE state = 'parked')`).Scan(&b.Approvals, &b.Deliveries, &b.Parked)
	if err != nil {
		return BacklogCounts{}, fmt.Errorf("count backlog: %w", err)
	}
	return b, nil
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
	return scanDeliveries(s.rdb.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM deliveries `+where, args...))
}

// scanDeliveries reads the rows of a query of deliveryColumns.
func scanDeliveries(rows *sql.Rows, err error) ([]Delivery, error) {
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
		var items int
		if err := rows.Scan(&d.Seq, &d.ID, &d.Controller, &d.Reader, &d.SubscriptionID, &d.QueryID, &d.RequestID,
			&d.ApprovalID, &category, &response, &anomalies, &d.Bits, &state, &d.Attempts, &d.Failures, &created, &done, &d.DoneDetail,
			&d.Entity, &d.BatchID, &items); err != nil {
			return nil, fmt.Errorf("read deliveries: %w", err)
		}
		d.Category, d.Response, d.State = bcp.Category(category), json.RawMessage(response), DeliveryState(state)
		d.CreatedAt, d.DoneAt = fromMillis(created), fromMillis(done)
		if err := json.Unmarshal([]byte(anomalies), &d.Anomalies); err != nil {
			return nil, fmt.Errorf("read delivery %s: anomalies: %w", d.ID, err)
		}
		if items > 0 {
			if err := d.readItems(); err != nil {
				return nil, err
			}
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

// ErrNotParked is returned by RetryDelivery and DiscardDelivery for a
// delivery that is not parked: only parked ones are the operator's; the
// others belong to the outbox.
var ErrNotParked = errors.New("delivery is not parked")

// RetryDelivery puts a parked delivery back in the outbox: pending again,
// its failure count cleared, with its events, and returns it once that is
// durable.
func (s *Store) RetryDelivery(ctx context.Context, id string, events ...Event) (*Delivery, error) {
	return s.unpark(ctx, id, `UPDATE deliveries SET state = 'pending', failures = 0, done_at = 0, done_detail = ''
		WHERE id = ? AND state = 'parked'`, nil, events)
}

// DiscardDelivery gives up a parked delivery for good (dropped, with
// detail as the reason), with its events, and returns it once that is
// durable.
func (s *Store) DiscardDelivery(ctx context.Context, id, detail string, at time.Time, events ...Event) (*Delivery, error) {
	return s.unpark(ctx, id, `UPDATE deliveries SET state = 'dropped', done_at = ?, done_detail = ?
		WHERE id = ? AND state = 'parked'`, []any{millis(at), detail}, events)
}

// unpark runs update (whose last parameter is the id) on a parked
// delivery and reads it back in the same transaction. Events without an
// agent get the delivery's channel, category and bits.
func (s *Store) unpark(ctx context.Context, id, update string, args []any, events []Event) (*Delivery, error) {
	events = withRef(events, id)
	var out *Delivery
	err := s.write(ctx, func(tx *wtx) error {
		res, err := tx.Exec(update, append(args, id)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var state string
			err := tx.QueryRow(`SELECT state FROM deliveries WHERE id = ?`, id).Scan(&state)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("delivery %s: %w", id, ErrNotFound)
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("delivery %s is %s: %w", id, state, ErrNotParked)
		}
		ds, err := scanDeliveries(tx.Query(`SELECT `+deliveryColumns+` FROM deliveries WHERE id = ?`, id))
		if err != nil {
			return err
		}
		if len(ds) != 1 {
			return fmt.Errorf("delivery %s: %w", id, ErrNotFound)
		}
		out = &ds[0]
		// The events are about the delivery: they name its channel.
		for i := range events {
			if events[i].Agent == "" {
				events[i].Agent, events[i].Peer = out.Controller, out.Reader
				events[i].Category, events[i].Bits = int(out.Category), out.Bits
			}
		}
		return insertEvents(tx, events)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeliveryFilter selects deliveries for ListDeliveries. The zero value
// lists every delivery, oldest first, a page at a time.
type DeliveryFilter struct {
	State      DeliveryState // empty: any state
	Controller string        // empty: any Controller
	After      int64         // only seq > After (the previous page's last)
	Limit      int           // at most this many; default and cap MaxDeliveriesPage
}

// MaxDeliveriesPage caps one page of ListDeliveries.
const MaxDeliveriesPage = 500

// ListDeliveries returns one page of the deliveries f selects, in the
// order they were accepted.
func (s *Store) ListDeliveries(ctx context.Context, f DeliveryFilter) ([]Delivery, error) {
	if f.Limit <= 0 || f.Limit > MaxDeliveriesPage {
		f.Limit = MaxDeliveriesPage
	}
	where, args := `WHERE seq > ?`, []any{f.After}
	if f.State != "" {
		where += ` AND state = ?`
		args = append(args, string(f.State))
	}
	if f.Controller != "" {
		where += ` AND controller = ?`
		args = append(args, f.Controller)
	}
	return s.deliveries(ctx, where+` ORDER BY seq LIMIT ?`, append(args, f.Limit)...)
}
