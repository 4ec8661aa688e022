package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The exposure report (bcpgw report) says, for each session of a
// Controller, how many bits of Reader-originated information were sent to
// it. It used to be replayed from the event log; the log is now pruned
// (Retention), so the store keeps the figures in tables of their own,
// updated by the same transaction that stores the events they come from:
//
//   - session_started opens a session of its agent (Event.Ref is its id);
//   - session_stopped and session_crashed end the session named by Ref;
//   - delivery_sent and delivery_retried add Bits to the agent's session
//     in progress when it was sent (the latest one started at or before
//     the event's time: the outbox may record a send after the session
//     that got it has ended and the next one started), for the channel
//     from Peer at Category (a session that started before the log did
//     is opened then, with no id).
//
// A delivery re-sent after a crash thus counts for each session it was
// sent to: the crashed one may have read it. Reading the report costs one
// row per session and channel, however long the gateway has run.

// SessionExposure is what one session was sent.
type SessionExposure struct {
	Agent     string
	Session   string // the session id; empty for a session that started before the log
	StartedAt time.Time
	EndedAt   time.Time // zero while running (as far as the log says)
	Channels  []ChannelExposure
}

// ChannelExposure is what one session was sent by one Reader at one
// category.
type ChannelExposure struct {
	Reader     string
	Category   int
	Deliveries int
	Bits       float64
}

// exposureKinds are the event kinds that change the exposure figures.
func exposureKind(kind string) bool {
	switch kind {
	case "session_started", "session_stopped", "session_crashed", "delivery_sent", "delivery_retried":
		return true
	}
	return false
}

// execer is a transaction: the writer's (wtx) or a migration's.
type execer interface {
	Exec(query string, args ...any) (sql.Result, error)
}

// recordExposure applies one event to the exposure figures, in the
// transaction that stores it.
func recordExposure(tx execer, e *Event) error {
	switch e.Kind {
	case "session_started":
		_, err := tx.Exec(sqlOpenSession, e.Agent, e.Ref, millis(e.Time))
		return err
	case "session_stopped", "session_crashed":
		if e.Ref == "" {
			return nil
		}
		_, err := tx.Exec(sqlEndSession, millis(e.Time), e.Ref)
		return err
	case "delivery_sent", "delivery_retried":
		res, err := tx.Exec(sqlAddExposure, e.Peer, e.Category, e.Bits, e.Agent, millis(e.Time))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		// No session of this agent is known: it started before the log.
		if _, err := tx.Exec(sqlOpenSession, e.Agent, "", millis(e.Time)); err != nil {
			return err
		}
		_, err = tx.Exec(sqlAddExposure, e.Peer, e.Category, e.Bits, e.Agent, millis(e.Time))
		return err
	}
	return nil
}

// backfillPage is how many events backfillExposure reads at a time (a
// variable for tests).
var backfillPage = 10000

// backfillExposure fills the exposure tables from the events stored
// before they existed (migration 3), in the order they were stored, a
// page at a time.
func backfillExposure(tx *sql.Tx) error {
	page := backfillPage
	var after int64
	for {
		rows, err := tx.Query(`SELECT seq, time, kind, agent, peer, category, bits, ref FROM events
			WHERE kind IN ('session_started', 'session_stopped', 'session_crashed', 'delivery_sent', 'delivery_retried')
			AND seq > ? ORDER BY seq LIMIT ?`, after, page)
		if err != nil {
			return err
		}
		var evs []Event
		for rows.Next() {
			var e Event
			var t int64
			if err := rows.Scan(&e.Seq, &t, &e.Kind, &e.Agent, &e.Peer, &e.Category, &e.Bits, &e.Ref); err != nil {
				rows.Close()
				return err
			}
			e.Time = fromMillis(t)
			evs = append(evs, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range evs {
			if err := recordExposure(tx, &evs[i]); err != nil {
				return fmt.Errorf("exposure from event %d: %w", evs[i].Seq, err)
			}
			after = evs[i].Seq
		}
		if len(evs) < page {
			return nil
		}
	}
}

// Exposure returns what each session of agent (of every agent when
// empty) was sent, sessions in the order they started, channels by Reader
// then category. Sessions that were sent nothing are included.
func (s *Store) Exposure(ctx context.Context, agent string) ([]SessionExposure, error) {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}) // one snapshot for both reads
	if err != nil {
		return nil, fmt.Errorf("read exposure: %w", err)
	}
	defer tx.Rollback()
	where, args := "", []any{}
	if agent != "" {
		where, args = "WHERE agent = ?", []any{agent}
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, agent, ref, started_at, ended_at FROM exposure_sessions `+where+` ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("read exposure: %w", err)
	}
	var out []SessionExposure
	byID := map[int64]int{}
	for rows.Next() {
		var id, started, ended int64
		var se SessionExposure
		if err := rows.Scan(&id, &se.Agent, &se.Session, &started, &ended); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read exposure: %w", err)
		}
		se.StartedAt, se.EndedAt = fromMillis(started), fromMillis(ended)
		byID[id] = len(out)
		out = append(out, se)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read exposure: %w", err)
	}
	if agent != "" {
		where = "WHERE session IN (SELECT id FROM exposure_sessions WHERE agent = ?)"
	}
	rows, err = tx.QueryContext(ctx, `SELECT session, reader, category, deliveries, bits FROM exposure `+where+
		` ORDER BY session, reader, category`, args...)
	if err != nil {
		return nil, fmt.Errorf("read exposure: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var c ChannelExposure
		if err := rows.Scan(&id, &c.Reader, &c.Category, &c.Deliveries, &c.Bits); err != nil {
			return nil, fmt.Errorf("read exposure: %w", err)
		}
		if i, ok := byID[id]; ok {
			out[i].Channels = append(out[i].Channels, c)
		}
	}
	return out, rows.Err()
}
