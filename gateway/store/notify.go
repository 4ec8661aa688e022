package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// NotifyCursor is where one notification target (bcpgw run --notify) has
// got to in the event log.
type NotifyCursor struct {
	Target string
	// Seq is the last event the target is done with: sent, not wanted by
	// it, or given up. The next to consider is the first after it.
	Seq int64
	// DisabledAt is when the target's endpoint answered 410 Gone (zero
	// if it did not); DisabledReason says what it answered, and
	// URLSHA256 is the hash of the URL that answered, so that a new URL
	// enables the target again.
	DisabledAt     time.Time
	DisabledReason string
	URLSHA256      string
}

// Disabled reports whether the target's endpoint asked not to be sent
// anything more.
func (c NotifyCursor) Disabled() bool { return !c.DisabledAt.IsZero() }

const (
	sqlNotifyCursor = `SELECT name, cursor, disabled_at, disabled_reason, url_sha256 FROM notify_targets WHERE name = ?`
	// A target seen for the first time starts after the newest event
	// (the last seq given, even if retention deleted it): a new target is
	// told what happens from now on, not the whole log.
	sqlNotifyCreate = `INSERT OR IGNORE INTO notify_targets (name, cursor, updated_at)
		VALUES (?, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), ?)`
	sqlNotifyAdvance = `UPDATE notify_targets SET cursor = max(cursor, ?), updated_at = ? WHERE name = ?`
	sqlNotifyDisable = `UPDATE notify_targets SET disabled_at = ?, disabled_reason = ?, url_sha256 = ?, updated_at = ? WHERE name = ?`
	sqlNotifyEnable  = `UPDATE notify_targets SET disabled_at = 0, disabled_reason = '', url_sha256 = '', updated_at = ? WHERE name = ?`
)

func scanNotifyCursor(row interface{ Scan(...any) error }) (NotifyCursor, error) {
	var c NotifyCursor
	var at int64
	err := row.Scan(&c.Target, &c.Seq, &at, &c.DisabledReason, &c.URLSHA256)
	c.DisabledAt = fromMillis(at)
	return c, err
}

// NotifyCursor returns target's cursor, and false if it has none yet.
func (s *Store) NotifyCursor(ctx context.Context, target string) (NotifyCursor, bool, error) {
	c, err := scanNotifyCursor(s.rdb.QueryRowContext(ctx, sqlNotifyCursor, target))
	if errors.Is(err, sql.ErrNoRows) {
		return NotifyCursor{Target: target}, false, nil
	}
	if err != nil {
		return NotifyCursor{}, false, fmt.Errorf("read notify cursor of %s: %w", target, err)
	}
	return c, true, nil
}

// OpenNotifyCursor returns target's cursor, creating it after the newest
// event if the target has none (in one commit, so that no event can slip
// between reading the newest seq and storing it).
func (s *Store) OpenNotifyCursor(ctx context.Context, target string, now time.Time) (NotifyCursor, error) {
	var c NotifyCursor
	err := s.write(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(sqlNotifyCreate, target, millis(now)); err != nil {
			return fmt.Errorf("create notify cursor of %s: %w", target, err)
		}
		var err error
		c, err = scanNotifyCursor(tx.QueryRow(sqlNotifyCursor, target))
		if err != nil {
			return fmt.Errorf("read notify cursor of %s: %w", target, err)
		}
		return nil
	})
	return c, err
}

// AdvanceNotifyCursor moves target's cursor forward to seq (never back)
// and stores events with it, in one commit, without waiting for it. A
// crash may lose the last such commits: the target is then sent those
// events again, which at-least-once delivery allows, and nothing is
// skipped.
func (s *Store) AdvanceNotifyCursor(target string, seq int64, now time.Time, events ...Event) {
	events = withRef(events, "")
	s.writeAsync(func(tx *wtx) error {
		if _, err := tx.Exec(sqlNotifyAdvance, seq, millis(now), target); err != nil {
			return fmt.Errorf("advance notify cursor of %s: %w", target, err)
		}
		return insertEvents(tx, events)
	})
}

// DisableNotifyTarget records that target's endpoint (whose URL has hash
// urlSHA256) answered 410 Gone, with events, and waits until it is
// durable.
func (s *Store) DisableNotifyTarget(ctx context.Context, target, urlSHA256, reason string, now time.Time, events ...Event) error {
	events = withRef(events, "")
	return s.write(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(sqlNotifyDisable, millis(now), reason, urlSHA256, millis(now), target); err != nil {
			return fmt.Errorf("disable notify target %s: %w", target, err)
		}
		return insertEvents(tx, events)
	})
}

// EnableNotifyTarget clears what DisableNotifyTarget recorded, with
// events, and waits until it is durable.
func (s *Store) EnableNotifyTarget(ctx context.Context, target string, now time.Time, events ...Event) error {
	events = withRef(events, "")
	return s.write(ctx, func(tx *wtx) error {
		if _, err := tx.Exec(sqlNotifyEnable, millis(now), target); err != nil {
			return fmt.Errorf("enable notify target %s: %w", target, err)
		}
		return insertEvents(tx, events)
	})
}

// NotifyInstance is the state file's random id (made by its migration):
// with an event's seq it makes a notification's idempotency key.
func (s *Store) NotifyInstance(ctx context.Context) (string, error) {
	var id string
	if err := s.rdb.QueryRowContext(ctx, `SELECT id FROM notify_instance LIMIT 1`).Scan(&id); err != nil {
		return "", fmt.Errorf("read the state file's id: %w", err)
	}
	return id, nil
}
