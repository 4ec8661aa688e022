package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
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
	// Subscription, when set, is the subscription (of Peer to Agent, or
	// of Agent to Peer for a delivery's acknowledgment) the event counts
	// for in its figures (SubscriptionFigures). It is not stored with the
	// event.
	Subscription string
}

// MaxPayload bounds Event.Payload.
const MaxPayload = 1024

// ClipPayload returns a copy of at most MaxPayload bytes of b: what an
// event keeps of an offending input. It copies because the caller's
// buffer (a runtime's line) may be reused before the event is written.
func ClipPayload(b []byte) []byte {
	return append([]byte(nil), b[:min(len(b), MaxPayload)]...)
}

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
		if err := recordFigures(tx, &e); err != nil {
			return err
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

// AppendThen is Append with an outcome: then receives nil once the
// events are durable, or the error, on the store's writer goroutine, so
// it must not block. For records that an answer waits on, such as a push
// a subscription's filter kept from delivery.
func (s *Store) AppendThen(events []Event, then func(error)) {
	events = withRef(events, "")
	s.writeThen(func(tx *wtx) error { return insertEvents(tx, events) }, then)
}

// AppendSync stores events and waits until they are durable.
func (s *Store) AppendSync(ctx context.Context, events ...Event) error {
	return s.write(ctx, func(tx *wtx) error { return insertEvents(tx, events) })
}

// Events returns up to limit events with Seq > since, oldest first. With
// kinds, only events of those kinds; a kind ending in "*" matches every
// kind with that prefix ("approval_*"). It is QueryEvents without an
// agent.
func (s *Store) Events(ctx context.Context, since int64, limit int, kinds ...string) ([]Event, error) {
	return s.QueryEvents(ctx, EventQuery{Since: since, Limit: limit, Kinds: kinds})
}

// EventQuery selects events for QueryEvents: those with Seq > Since,
// oldest first, at most Limit of them.
type EventQuery struct {
	Since int64
	Limit int
	// Kinds, when set, keeps only the events of these kinds. A kind
	// ending in "*" matches every kind with that prefix ("approval_*";
	// "*" alone matches all). Only a trailing "*" is special: "%", "_"
	// and a "*" anywhere else are plain characters.
	Kinds []string
	// Agent, when set, keeps only the events whose Agent is this one.
	Agent string
}

// Bounds of how QueryEvents reads a page (see eventsSQL).
const (
	// maxListedKinds bounds the kinds a prefix is expanded to; past it,
	// the prefix is read as a range of the kind index instead.
	maxListedKinds = 64
)

// QueryEvents returns the events q selects. Its cost follows what it
// returns, not the size of the log: every filter is read through an
// index (events_by_kind, events_by_agent, or the seq itself), and a page
// of a kind filter reads at most Limit entries of each kind it covers.
//
// A prefix ("approval_*") is first expanded to the kinds stored under it,
// one index seek per kind (there are a few dozen kinds in all), and each
// kind is then read from Since in seq order with its own limit: a range
// of (kind, seq) entries cannot be read in seq order as a whole, and
// sorting it would cost every matching event after Since. Both steps run
// in one read transaction, so a kind first stored between them cannot be
// skipped by the cursor.
func (s *Store) QueryEvents(ctx context.Context, q EventQuery) ([]Event, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer tx.Rollback() // read only: it ends the read transaction
	f, err := expandKinds(ctx, tx, q.Kinds)
	if err != nil {
		return nil, err
	}
	if f.none() {
		return nil, nil
	}
	query, args := eventsSQL(q, f)
	rows, err := tx.QueryContext(ctx, query, args...)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

// kindFilter is what EventQuery.Kinds comes to once the prefixes are
// expanded: exact kinds, and the prefixes that covered too many kinds to
// list, as ranges of the kind index.
type kindFilter struct {
	all    bool     // no filter: no kinds asked for, or "*"
	kinds  []string // exact kinds, without duplicates
	ranges []kindRange
}

// kindRange is the kinds k with lo <= k < hi (bytewise, as SQLite's
// BINARY collation compares text); without hi, every k >= lo.
type kindRange struct {
	lo, hi  string
	bounded bool // hi is set
}

// none reports whether the filter can match nothing (its prefixes cover
// no stored kind).
func (f kindFilter) none() bool { return !f.all && len(f.kinds) == 0 && len(f.ranges) == 0 }

// The statements of expandKinds: the first stored kind in [lo, hi), and
// the next one after a kind found. ORDER BY kind LIMIT 1 on the kind
// index is one seek (no sort: the plan test checks it).
const (
	sqlFirstKind = `SELECT kind FROM events WHERE kind >= ? AND kind < ? ORDER BY kind LIMIT 1`
	sqlNextKind  = `SELECT kind FROM events WHERE kind > ? AND kind < ? ORDER BY kind LIMIT 1`
)

// expandKinds turns patterns into a kindFilter, listing the kinds stored
// under each prefix with one index seek per kind.
func expandKinds(ctx context.Context, tx *sql.Tx, patterns []string) (kindFilter, error) {
	var f kindFilter
	if len(patterns) == 0 {
		f.all = true
		return f, nil
	}
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			f.kinds = append(f.kinds, k)
		}
	}
	for _, p := range patterns {
		prefix, ok := strings.CutSuffix(p, "*")
		if !ok {
			add(p)
			continue
		}
		if prefix == "" {
			return kindFilter{all: true}, nil
		}
		r := prefixRange(prefix)
		if !r.bounded || len(f.kinds) >= maxListedKinds {
			f.ranges = append(f.ranges, r)
			continue
		}
		var listed []string
		q, after := sqlFirstKind, r.lo
		for len(f.kinds)+len(listed) < maxListedKinds {
			var k string
			err := tx.QueryRowContext(ctx, q, after, r.hi).Scan(&k)
			if errors.Is(err, sql.ErrNoRows) {
				break
			}
			if err != nil {
				return kindFilter{}, fmt.Errorf("read event kinds: %w", err)
			}
			listed = append(listed, k)
			q, after = sqlNextKind, k
		}
		if len(f.kinds)+len(listed) >= maxListedKinds {
			// Possibly more than were listed: read the prefix as a range.
			f.ranges = append(f.ranges, r)
			continue
		}
		for _, k := range listed {
			add(k)
		}
	}
	return f, nil
}

// prefixRange is the range of the strings that start with prefix: from
// prefix itself to prefix with its last byte that is not 0xff increased
// by one ("approval_" to "approval`"), bytes after it dropped. Only a
// prefix of 0xff bytes has no upper bound.
func prefixRange(prefix string) kindRange {
	hi := []byte(prefix)
	for len(hi) > 0 && hi[len(hi)-1] == 0xff {
		hi = hi[:len(hi)-1]
	}
	if len(hi) == 0 {
		return kindRange{lo: prefix}
	}
	hi[len(hi)-1]++
	return kindRange{lo: prefix, hi: string(hi), bounded: true}
}

const eventColumns = `seq, time, kind, agent, peer, code, detail, category, bits, ref, payload`

// eventsSQL is the statement that reads q's page once its kinds are
// expanded to f:
//
//   - no kinds: the seq range, or with an agent its range of
//     events_by_agent (agent, seq); read in seq order, stopped at Limit;
//   - one kind: its range of events_by_kind (kind, seq), the same way;
//   - several kinds: each kind's first Limit seqs after Since (an index
//     range each), merged and cut to Limit, then those rows: at most
//     Limit entries read per kind, however many events follow Since;
//   - a prefix with more kinds than maxListedKinds: its range of
//     events_by_kind, sorted (every match after Since is read: the
//     fallback for a filter no real log has).
func eventsSQL(q EventQuery, f kindFilter) (string, []any) {
	agent := func(args []any) (string, []any) {
		if q.Agent == "" {
			return "", args
		}
		return ` AND agent = ?`, append(args, q.Agent)
	}
	switch {
	case f.all || (len(f.kinds) == 1 && len(f.ranges) == 0):
		var args []any
		where := `seq > ?`
		args = append(args, q.Since)
		if !f.all {
			where = `kind = ? AND ` + where
			args = append([]any{f.kinds[0]}, args...)
		}
		cond, args := agent(args)
		return `SELECT ` + eventColumns + ` FROM events WHERE ` + where + cond + ` ORDER BY seq LIMIT ?`, append(args, q.Limit)
	case len(f.ranges) == 0:
		var arms []string
		var args []any
		for _, k := range f.kinds {
			var cond string
			args = append(args, k)
			cond, args = agent(args)
			arms = append(arms, `SELECT seq FROM (SELECT seq FROM events WHERE kind = ?`+cond+` AND seq > ? ORDER BY seq LIMIT ?)`)
			args = append(args, q.Since, q.Limit)
		}
		return `SELECT ` + eventColumns + ` FROM events WHERE seq IN (` + strings.Join(arms, ` UNION ALL `) +
			` ORDER BY 1 LIMIT ?) ORDER BY seq`, append(args, q.Limit)
	}
	var or []string
	var args []any
	for _, k := range f.kinds {
		or = append(or, `kind = ?`)
		args = append(args, k)
	}
	for _, r := range f.ranges {
		if r.bounded {
			or = append(or, `(kind >= ? AND kind < ?)`)
			args = append(args, r.lo, r.hi)
		} else {
			or = append(or, `kind >= ?`)
			args = append(args, r.lo)
		}
	}
	args = append(args, q.Since)
	cond, args := agent(args)
	return `SELECT ` + eventColumns + ` FROM events WHERE (` + strings.Join(or, ` OR `) + `) AND seq > ?` + cond +
		` ORDER BY seq LIMIT ?`, append(args, q.Limit)
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
