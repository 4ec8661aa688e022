package store

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Event is one audit record (PROTOCOL.md section 7): a message accepted
// or refused, bits charged, a delivery sent or dropped, a decision, a
// session starting or ending. Seq orders them and is the cursor operators
// read with.
type Event struct {
	Seq      int64
	Time     time.Time
	Kind     string // e.g. publish_accepted, refused, delivery_sent, session_started
	Agent    string // the agent the event is about (the sender, for messages)
	Peer     string // the other end of the channel, if any
	Code     string // the error code of a refusal (bcp.Code), else empty
	Detail   string
	Category int     // the category of the data involved, if any
	Bits     float64 // bits charged or delivered, if any
	Ref      string  // the delivery, approval or query the event is about
	// Payload is the offending input of a refusal, truncated, kept for
	// forensics.
	Payload []byte
}

// MaxPayload bounds Event.Payload.
const MaxPayload = 1024

// Bounds of an event's text fields. Ids and names are short by the
// protocol's rules; the bounds keep a hostile runtime's text from growing
// the audit trail without limit even where those rules were not applied.
const (
	maxEventDetail = 4096
	maxEventName   = 256
)

// clip cuts s to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

func insertEvents(tx *wtx, events []Event) error {
	tx.events = tx.events || len(events) > 0
	for _, e := range events {
		e.Kind, e.Agent, e.Peer, e.Code, e.Ref = clip(e.Kind, maxEventName), clip(e.Agent, maxEventName), clip(e.Peer, maxEventName), clip(e.Code, maxEventName), clip(e.Ref, maxEventName)
		e.Detail = clip(e.Detail, maxEventDetail)
		payload := e.Payload
		if len(payload) > MaxPayload {
			payload = payload[:MaxPayload]
		}
		if _, err := tx.Exec(sqlInsertEvent, millis(e.Time), e.Kind, e.Agent, e.Peer, e.Code, e.Detail,
			e.Category, e.Bits, e.Ref, payload); err != nil {
			return fmt.Errorf("insert event: %w", err)
		}
		if exposureKind(e.Kind) {
			if err := recordExposure(tx, &e); err != nil {
				return fmt.Errorf("exposure: %w", err)
			}
		}
	}
	return nil
}

// withRef returns a copy of events with ref filled in on those that have
// none. Writes run on the writer goroutine, maybe after their caller has
// returned, so they get their own copy, payloads (truncated) included:
// the caller may reuse its slice and buffers at once.
func withRef(events []Event, ref string) []Event {
	out := make([]Event, len(events))
	for i, e := range events {
		if e.Ref == "" {
			e.Ref = ref
		}
		e.Payload = bytes.Clone(e.Payload[:min(len(e.Payload), MaxPayload)])
		out[i] = e
	}
	return out
}

// Append queues events for the next group commit without waiting. Use it
// for events that accompany nothing else; events that go with a delivery
// or a decision are written in the same transaction as it.
func (s *Store) Append(events ...Event) {
	events = withRef(events, "")
	s.writeAsync(func(tx *wtx) error { return insertEvents(tx, events) })
}

// AppendSync stores events and waits until they are durable.
func (s *Store) AppendSync(ctx context.Context, events ...Event) error {
	return s.write(ctx, func(tx *wtx) error { return insertEvents(tx, events) })
}

// Events returns up to limit events with Seq > since, oldest first. With
// kinds, only events of those kinds; a kind ending in "*" matches every
// kind with that prefix ("approval_*").
func (s *Store) Events(ctx context.Context, since int64, limit int, kinds ...string) ([]Event, error) {
	q := `SELECT seq, time, kind, agent, peer, code, detail, category, bits, ref, payload FROM events WHERE seq > ?`
	args := []any{since}
	if len(kinds) > 0 {
		var or []string
		for _, k := range kinds {
			if prefix, ok := strings.CutSuffix(k, "*"); ok {
				or = append(or, `substr(kind, 1, ?) = ?`)
				args = append(args, len(prefix), prefix)
				continue
			}
			or = append(or, `kind = ?`)
			args = append(args, k)
		}
		q += ` AND (` + strings.Join(or, " OR ") + `)`
	}
	q += ` ORDER BY seq LIMIT ?`
	args = append(args, limit)
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var t int64
		if err := rows.Scan(&e.Seq, &t, &e.Kind, &e.Agent, &e.Peer, &e.Code, &e.Detail, &e.Category, &e.Bits, &e.Ref, &e.Payload); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		e.Time = fromMillis(t)
		out = append(out, e)
	}
	return out, rows.Err()
}

// LastEventSeq is the sequence number of the newest event (0 if none): a
// cursor from which to follow only what happens next.
func (s *Store) LastEventSeq(ctx context.Context) (int64, error) {
	var seq sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, `SELECT max(seq) FROM events`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("read events: %w", err)
	}
	return seq.Int64, nil
}

// EventsChanged returns a channel that is closed when a commit that stored
// events has completed. To follow events without missing any: take the
// channel, read events after the cursor, and wait on the channel only when
// there were none.
func (s *Store) EventsChanged() <-chan struct{} {
	s.changedMu.Lock()
	defer s.changedMu.Unlock()
	return s.changed
}

// eventsCommitted wakes everyone waiting in EventsChanged.
func (s *Store) eventsCommitted() {
	s.changedMu.Lock()
	defer s.changedMu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}
