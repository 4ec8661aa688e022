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

// A subscription's debounce and batching, as the store keeps them
// (migration 9). Both change what one commit does, so that a crash at any
// moment leaves either the old state or the new, never half of each:
//
//   - debounce: a push with a key value (Delivery.Entity) replaces the
//     newest push with the same key, of the same subscription, that is
//     not yet delivered and was accepted within the window: pending (and
//     not yet handed to the Controller's runtime, which PushPolicy.Claim
//     asks) or held in an open batch. The replaced one becomes
//     superseded, in the transaction that stores the newer one;
//   - batching: a push of a batched subscription is stored held, in the
//     subscription's open batch, which the transaction finds (or opens:
//     the store, not memory, says which batch is open, so that a push and
//     the batch's closing are ordered by the writer alone). The batch is
//     closed (CloseBatchThen) when its window has passed, or by the push
//     that fills it, in that push's transaction: one delivery of its own,
//     with the batch's id, whose response lists the held pushes, which
//     become batched.

// PushPolicy is how AddPushThen stores a push.
type PushPolicy struct {
	// Entity is the push's debounce key value; empty without debounce.
	// Since is the oldest acceptance time a push it replaces may have.
	Entity string
	Since  time.Time
	// Claim is asked, inside the transaction, before the pending delivery
	// id (of sequence number seq) is superseded: false if it may no
	// longer be (it was handed to the runtime). It may be asked again if
	// the transaction is run again; it must not block.
	Claim func(id string, seq int64) bool
	// Batch says the push goes into its subscription's open batch (one
	// is opened if there is none). The batch is closed in the same
	// transaction once it holds BatchMax pushes or BatchMaxBytes of
	// responses (in bytes, not characters). If BatchMaxLine is set, a
	// push that would take the open batch's delivery line (its
	// BatchLineWeight) past it closes that batch first, without the
	// push, which opens the next one: a batch never becomes a line its
	// Controller's runtime cannot read.
	Batch         bool
	BatchMax      int
	BatchMaxBytes int
	BatchMaxLine  int
	// Supersede is the event recorded about a superseded push, filled in
	// with its id (Ref) and bits.
	Supersede Event
	// Close is the event recorded when the push closes its batch.
	Close Event
}

// PushOutcome is what AddPushThen did.
type PushOutcome struct {
	Delivery   Delivery  // the push as stored: pending, or held in its batch (BatchID)
	Superseded *Delivery // the push it replaced, now superseded
	Opened     bool      // the push opened its batch: the window starts
	Closed     *Delivery // the batch delivery it closed, pending
	// ClosedBefore is the open batch the push closed without joining it,
	// since it would have made the batch too long a line (BatchMaxLine).
	ClosedBefore *Delivery
}

// BatchLineWeight bounds what one push adds, in bytes, to the line that
// delivers its batch: its response is there twice (the batch's list and
// its item) and once more in the prompt, where JSON-escaping a stored
// value (whose only escapable bytes are '"' and a backslash) at most doubles
// it; its anomalies likewise (the batch's, the item's, the prompt's); and
// some framing (the item's id and bits, the prompt's "Push i of n").
// Sizes are bytes: a stored response keeps non-ASCII text as UTF-8.
const batchLineWeight = `4 * (length(CAST(response AS BLOB)) + length(CAST(anomalies AS BLOB))) + 256`

// The statements of the push policy, prepared at Open (writeStatements):
// they run for every debounced or batched push.
const (
	sqlBatchLine = `SELECT coalesce(sum(` + batchLineWeight + `), 0) FROM deliveries
		WHERE batch_id = ? AND batch_id <> '' AND state = 'held'`
	sqlBatchSize = `SELECT count(*), coalesce(sum(length(CAST(response AS BLOB))), 0) FROM deliveries
		WHERE batch_id = ? AND batch_id <> '' AND state = 'held'`
	sqlOpenBatch = `SELECT batch_id FROM deliveries WHERE controller = ? AND reader = ? AND subscription_id = ?
		AND state = 'held' ORDER BY seq LIMIT 1`
	sqlReplaceable = `SELECT ` + deliveryColumns + ` FROM deliveries
		WHERE controller = ? AND reader = ? AND subscription_id = ? AND entity = ? AND entity <> ''
		AND state IN ('pending', 'held') AND created_at >= ? ORDER BY seq DESC LIMIT 1`
	sqlSupersede = `UPDATE deliveries SET state = 'superseded', done_at = ?, done_detail = ? WHERE id = ?`
	sqlBatchHeld = `SELECT ` + deliveryColumns + ` FROM deliveries
		WHERE batch_id = ? AND batch_id <> '' AND state = 'held' ORDER BY seq`
	sqlBatchClose = `UPDATE deliveries SET state = 'batched', done_at = ?, done_detail = ?
		WHERE batch_id = ? AND batch_id <> '' AND state = 'held'`
)

// BatchLineWeight is batchLineWeight for a push not yet stored.
func BatchLineWeight(d Delivery) int {
	anomalies, _ := json.Marshal(nonNilAnomalies(d.Anomalies))
	return 4*(len(d.Response)+len(anomalies)) + 256
}

// AddPushThen stores an accepted push under p, with its events, in one
// durable commit, and then reports what it did (see PushPolicy), on the
// store's writer goroutine: then must not block. On error nothing was
// stored.
func (s *Store) AddPushThen(d Delivery, p PushPolicy, events []Event, then func(PushOutcome, error)) {
	if d.ID == "" {
		d.ID = NewID("dl-", 16)
	}
	events = withRef(events, d.ID)
	var out PushOutcome
	s.writeThen(func(tx *wtx) error {
		out = PushOutcome{} // the write may run twice (see commit)
		stored := d
		stored.Entity = p.Entity
		if p.Batch {
			id, err := openBatch(tx, stored)
			if err != nil {
				return err
			}
			if id != "" && p.BatchMaxLine > 0 {
				var line int
				if err := tx.QueryRow(sqlBatchLine, id).Scan(&line); err != nil {
					return fmt.Errorf("measure batch %s: %w", id, err)
				}
				if line+BatchLineWeight(stored) > p.BatchMaxLine {
					ev := p.Close
					ev.Detail = "the next push would make it too long a delivery"
					if out.ClosedBefore, err = closeBatch(tx, id, d.CreatedAt, ev); err != nil {
						return err
					}
					id = ""
				}
			}
			if id == "" {
				id, out.Opened = NewID("dl-", 16), true
			}
			stored.State, stored.BatchID = DeliveryHeld, id
		}
		if p.Entity != "" {
			old, err := replaceable(tx, stored, p)
			if err != nil {
				return err
			}
			if old != nil {
				if err := supersede(tx, old, stored, p.Supersede); err != nil {
					return err
				}
				out.Superseded = old
			}
		}
		if err := insertDelivery(tx, &stored); err != nil {
			return err
		}
		if err := insertEvents(tx, events); err != nil {
			return err
		}
		out.Delivery = stored
		if !p.Batch {
			return nil
		}
		var n, size int
		if err := tx.QueryRow(sqlBatchSize, stored.BatchID).Scan(&n, &size); err != nil {
			return fmt.Errorf("count batch %s: %w", stored.BatchID, err)
		}
		if n < p.BatchMax && size < p.BatchMaxBytes {
			return nil
		}
		closed, err := closeBatch(tx, stored.BatchID, d.CreatedAt, p.Close)
		out.Closed = closed
		return err
	}, func(err error) { then(out, err) })
}

// openBatch returns the id of the open batch of d's subscription, or ""
// if none is open.
func openBatch(tx *wtx, d Delivery) (string, error) {
	var id string
	err := tx.QueryRow(sqlOpenBatch, d.Controller, d.Reader, d.SubscriptionID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find the open batch: %w", err)
	}
	return id, nil
}

// replaceable returns the push d replaces under p, if any: see the
// package's note on debounce.
func replaceable(tx *wtx, d Delivery, p PushPolicy) (*Delivery, error) {
	ds, err := scanDeliveries(tx.Query(sqlReplaceable,
		d.Controller, d.Reader, d.SubscriptionID, p.Entity, millis(p.Since)))
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	old := ds[0]
	// One sent before (its session ended before acknowledging it, or an
	// earlier run of the gateway did) may have been acted on: it stays,
	// as one on its way to the runtime now does.
	if old.State == DeliveryPending && (old.Attempts > 0 || p.Claim == nil || !p.Claim(old.ID, old.Seq)) {
		return nil, nil
	}
	return &old, nil
}

// supersede marks old replaced by d, with ev about it.
func supersede(tx *wtx, old *Delivery, d Delivery, ev Event) error {
	why := "superseded by " + d.ID
	if _, err := tx.Exec(sqlSupersede,
		millis(d.CreatedAt), why, old.ID); err != nil {
		return fmt.Errorf("supersede delivery %s: %w", old.ID, err)
	}
	prev := old.State
	old.State, old.DoneAt, old.DoneDetail = DeliverySuperseded, d.CreatedAt, why
	ev.Ref, ev.Bits, ev.Subscription = old.ID, old.Bits, old.SubscriptionID // counted in its figures
	if ev.Detail == "" {
		ev.Detail = fmt.Sprintf("delivery %s (%s) superseded by %s before it was delivered", old.ID, prev, d.ID)
	}
	return insertEvents(tx, []Event{ev})
}

// CloseBatchThen closes the open batch id at at, with ev (filled in with
// the batch's id, pushes and bits): its held pushes become one pending
// delivery. then receives that delivery, or nil if the batch held nothing
// (it was closed already, or every push in it was refused), once the
// commit is durable, on the store's writer goroutine.
func (s *Store) CloseBatchThen(id string, at time.Time, ev Event, then func(*Delivery, error)) {
	var out *Delivery
	s.writeThen(func(tx *wtx) error {
		var err error
		out, err = closeBatch(tx, id, at, ev)
		return err
	}, func(err error) { then(out, err) })
}

// closeBatch turns the held pushes of batch id into one pending delivery
// with that id, accepted at at, and records ev about it.
func closeBatch(tx *wtx, id string, at time.Time, ev Event) (*Delivery, error) {
	held, err := scanDeliveries(tx.Query(sqlBatchHeld, id))
	if err != nil || len(held) == 0 {
		return nil, err
	}
	first := held[0]
	b := Delivery{
		ID: id, Controller: first.Controller, Reader: first.Reader, SubscriptionID: first.SubscriptionID,
		Category: first.Category, CreatedAt: at, Items: make([]BatchItem, 0, len(held)),
	}
	for _, h := range held {
		b.Items = append(b.Items, BatchItem{ID: h.ID, Response: h.Response, Anomalies: h.Anomalies, Bits: h.Bits, AcceptedAt: millis(h.CreatedAt)})
		b.Bits += h.Bits
	}
	if err := insertDelivery(tx, &b); err != nil {
		return nil, fmt.Errorf("close batch %s: %w", id, err)
	}
	if _, err := tx.Exec(sqlBatchClose,
		millis(at), "in batch "+id, id); err != nil {
		return nil, fmt.Errorf("close batch %s: %w", id, err)
	}
	if err := b.fromItems(); err != nil {
		return nil, err
	}
	ev.Ref, ev.Bits, ev.Category = id, b.Bits, int(b.Category)
	if ev.Agent == "" {
		ev.Agent, ev.Peer = b.Reader, b.Controller
	}
	if ev.Detail == "" {
		ev.Detail = fmt.Sprintf("batch %s of %d pushes on %s closed", id, len(b.Items), b.SubscriptionID)
	} else {
		ev.Detail = fmt.Sprintf("batch %s of %d pushes on %s closed: %s", id, len(b.Items), b.SubscriptionID, ev.Detail)
	}
	if err := insertEvents(tx, []Event{ev}); err != nil {
		return nil, err
	}
	return &b, nil
}

// readItems decodes a batch delivery's stored items (its response
// column) into Items, and sets Response and Anomalies from them.
func (d *Delivery) readItems() error {
	if err := json.Unmarshal(d.Response, &d.Items); err != nil {
		return fmt.Errorf("read batch %s: items: %w", d.ID, err)
	}
	return d.fromItems()
}

// fromItems sets a batch delivery's Response and Anomalies from its
// Items.
func (d *Delivery) fromItems() error {
	items := d.Items
	responses := make([]json.RawMessage, len(items))
	var anomalies []bcp.Anomaly
	for i, it := range items {
		responses[i] = it.Response
		for _, a := range it.Anomalies {
			a.Field = fmt.Sprintf("[%d].%s", i, a.Field)
			anomalies = append(anomalies, a)
		}
	}
	b, err := json.Marshal(responses)
	if err != nil {
		return fmt.Errorf("read batch %s: %w", d.ID, err)
	}
	d.Items, d.Response, d.Anomalies = items, b, anomalies
	return nil
}

// OpenBatch is a batch still open in the store: its pushes are held.
type OpenBatch struct {
	ID                                 string
	Controller, Reader, SubscriptionID string
	// Opened is when its first push was accepted (superseded ones
	// included): its window runs from there, across restarts.
	Opened time.Time
	Items  int
}

// OpenBatches returns the batches still open, oldest first: a restarted
// gateway closes each when its window, counted from Opened, has passed.
func (s *Store) OpenBatches(ctx context.Context) ([]OpenBatch, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT h.batch_id, min(h.controller), min(h.reader), min(h.subscription_id), count(*),
		(SELECT min(created_at) FROM deliveries f WHERE f.batch_id = h.batch_id AND f.batch_id <> '')
		FROM deliveries h WHERE h.state = 'held' AND h.batch_id <> '' GROUP BY h.batch_id ORDER BY min(h.seq)`)
	if err != nil {
		return nil, fmt.Errorf("read open batches: %w", err)
	}
	defer rows.Close()
	var out []OpenBatch
	for rows.Next() {
		var b OpenBatch
		var opened sql.NullInt64
		if err := rows.Scan(&b.ID, &b.Controller, &b.Reader, &b.SubscriptionID, &b.Items, &opened); err != nil {
			return nil, fmt.Errorf("read open batches: %w", err)
		}
		b.Opened = fromMillis(opened.Int64)
		out = append(out, b)
	}
	return out, rows.Err()
}
