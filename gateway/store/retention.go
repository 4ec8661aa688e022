package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/bcpgw/bcpgw/internal/clock"
)

// Retention: a gateway that runs for months must not keep everything.
// Prune deletes what is finished and older than a cutoff:
//
//   - deliveries delivered or dropped before it (pending and parked ones
//     are kept, however old: they have yet to be delivered or decided);
//   - approval items decided before it (pending ones are kept);
//   - events stored before it, oldest first, so that what is kept is
//     always every event from some seq on (see EventsPrunedBefore);
//     sequence numbers are never reused (AUTOINCREMENT), so cursors stay
//     valid and new events always get higher ones;
//   - ended sessions of the exposure report that were sent nothing
//     (except the last of each agent). Sessions that were sent something
//     are kept: their figures are what the report is for, and they cost
//     a row per session and channel, not per delivery.
//
// It works in batches of at most pruneBatch rows of each kind, each its
// own commit through the writer, with a pause between them, so that the
// pushes queued meanwhile go on being committed while a large backlog is
// pruned. Freed pages are reused by new rows: under a constant load the
// file stops growing once the oldest rows go as fast as new ones come.

// pruneBatch bounds the rows of each kind one pruning commit deletes.
const pruneBatch = 500

// prunePause is the pause between two pruning commits.
const prunePause = 5 * time.Millisecond

// PruneResult counts what Prune deleted.
type PruneResult struct {
	Deliveries int64
	Approvals  int64
	Events     int64
	Sessions   int64 // ended sessions that were sent nothing
}

// Total is the number of rows deleted.
func (r PruneResult) Total() int64 { return r.Deliveries + r.Approvals + r.Events + r.Sessions }

func (r *PruneResult) add(o PruneResult) {
	r.Deliveries += o.Deliveries
	r.Approvals += o.Approvals
	r.Events += o.Events
	r.Sessions += o.Sessions
}

// Prune deletes what finished before cutoff (see above), in batches, and
// returns what it deleted, also when ctx ends or a batch fails part way.
func (s *Store) Prune(ctx context.Context, before time.Time) (PruneResult, error) {
	var total PruneResult
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		r, err := s.pruneBatch(ctx, before, pruneBatch)
		total.add(r)
		if err != nil {
			return total, err
		}
		if r.Deliveries < pruneBatch && r.Approvals < pruneBatch && r.Events < pruneBatch && r.Sessions < pruneBatch {
			return total, nil
		}
		pause.Reset(prunePause)
		select {
		case <-pause.C:
		case <-ctx.Done():
			return total, ctx.Err()
		}
	}
}

// The pruning statements; each deletes at most n (the last parameter)
// rows older than a cutoff in milliseconds.
const (
	sqlPruneDeliveries = `DELETE FROM deliveries WHERE seq IN (SELECT seq FROM deliveries
		WHERE state <> 'pending' AND state <> 'parked' AND state <> 'held' AND done_at < ? ORDER BY done_at LIMIT ?)`
	sqlPruneApprovals = `DELETE FROM approvals WHERE seq IN (SELECT seq FROM approvals
		WHERE status <> 'pending' AND decided_at < ? ORDER BY decided_at LIMIT ?)`
	// The oldest n events, up to the first one that is to be kept: only a
	// prefix of the log is ever deleted. Parameters n, cutoff, n.
	sqlPruneEvents = `DELETE FROM events WHERE seq < coalesce(
		(SELECT min(seq) FROM (SELECT seq, time FROM events ORDER BY seq LIMIT ?) WHERE time >= ?),
		(SELECT max(seq) + 1 FROM (SELECT seq FROM events ORDER BY seq LIMIT ?)))`
	sqlPruneSessions = `DELETE FROM exposure_sessions WHERE id IN (SELECT id FROM exposure_sessions s
		WHERE ended_at > 0 AND ended_at < ?
		AND NOT EXISTS (SELECT 1 FROM exposure e WHERE e.session = s.id)
		AND id < (SELECT max(id) FROM exposure_sessions l WHERE l.agent = s.agent)
		LIMIT ?)`
)

// pruneBatch deletes at most n rows of each kind in one commit.
func (s *Store) pruneBatch(ctx context.Context, before time.Time, n int) (PruneResult, error) {
	var r PruneResult
	cut := millis(before)
	err := s.write(ctx, func(tx *wtx) error {
		r = PruneResult{}
		var err error
		if r.Deliveries, err = affected(tx.Exec(sqlPruneDeliveries, cut, n)); err != nil {
			return fmt.Errorf("prune deliveries: %w", err)
		}
		if r.Approvals, err = affected(tx.Exec(sqlPruneApprovals, cut, n)); err != nil {
			return fmt.Errorf("prune approvals: %w", err)
		}
		if r.Events, err = affected(tx.Exec(sqlPruneEvents, n, cut, n)); err != nil {
			return fmt.Errorf("prune events: %w", err)
		}
		if r.Sessions, err = affected(tx.Exec(sqlPruneSessions, cut, n)); err != nil {
			return fmt.Errorf("prune sessions: %w", err)
		}
		return nil
	})
	return r, err
}

func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// EventsPrunedBefore returns the seq before which every event was pruned:
// the oldest event kept (or the next seq, if none is kept), or 0 if none
// was ever pruned. A cursor below it has missed events.
func (s *Store) EventsPrunedBefore(ctx context.Context) (int64, error) {
	var oldest int64
	err := s.rdb.QueryRowContext(ctx, `SELECT coalesce((SELECT min(seq) FROM events),
		(SELECT seq + 1 FROM sqlite_sequence WHERE name = 'events'), 1)`).Scan(&oldest)
	if err != nil {
		return 0, fmt.Errorf("read events: %w", err)
	}
	if oldest <= 1 {
		return 0, nil
	}
	return oldest, nil
}

// prunedEvent records a round of pruning in the log it pruned: deleting
// audit records is itself audited.
func prunedEvent(now, before time.Time, r PruneResult) Event {
	return Event{Time: now, Kind: "retention_pruned", Detail: fmt.Sprintf(
		"pruned what finished before %s: %d deliveries, %d approval items, %d events, %d report sessions that were sent nothing",
		before.UTC().Format(time.RFC3339), r.Deliveries, r.Approvals, r.Events, r.Sessions)}
}

// DefaultRetain is how long bcpgw run keeps finished records by default
// (--retain).
const DefaultRetain = 30 * 24 * time.Hour

// DefaultPruneInterval is how often Retention prunes by default.
const DefaultPruneInterval = time.Minute

// Retention prunes a store on a schedule: at once, then every Interval,
// everything that finished more than Keep ago. A round that deleted
// anything is recorded as a retention_pruned event.
type Retention struct {
	Keep     time.Duration // how long to keep finished records; must be > 0
	Interval time.Duration // how often to prune; default DefaultPruneInterval, at most Keep
	// Clock is the time source; default the system clock. Tests give a
	// fake.
	Clock clock.Clock
	// Pruned, if set, is called after each round with what it deleted
	// and the cutoff it used (for the log).
	Pruned func(r PruneResult, before time.Time, err error)
}

// Run prunes s until ctx ends.
func (r Retention) Run(ctx context.Context, s *Store) {
	if r.Keep <= 0 {
		return
	}
	if r.Interval <= 0 {
		r.Interval = DefaultPruneInterval
	}
	r.Interval = min(r.Interval, r.Keep)
	if r.Clock == nil {
		r.Clock = clock.System{}
	}
	for {
		before := r.Clock.Now().Add(-r.Keep)
		res, err := s.Prune(ctx, before)
		if ctx.Err() != nil {
			return
		}
		if res.Total() > 0 {
			s.Append(prunedEvent(r.Clock.Now(), before, res))
		}
		if r.Pruned != nil {
			r.Pruned(res, before, err)
		}
		next := r.Clock.NewTimer(r.Interval)
		select {
		case <-next.C():
		case <-ctx.Done():
			next.Stop()
			return
		}
	}
}
