package store

import (
	"os"
	"time"
)

// walState is what the writer goroutine remembers of its checkpoints.
type walState struct {
	failures int       // checkpoints in a row that readers kept from finishing
	retryAt  time.Time // no new attempt before this, after a failure
}

// walBusyTimeoutMS is how long (ms) the writer's checkpoint waits for
// readers to leave the WAL, and for a background checkpoint to finish,
// before it gives up until later. The writer commits nothing meanwhile,
// so it is short; the store's reads take about a millisecond.
const walBusyTimeoutMS = 50

// busyTimeoutMS is the busy timeout of every connection (see open).
const busyTimeoutMS = 10000

// WALStats are figures on the write-ahead log since Open.
type WALStats struct {
	HighWater   int64 // the largest size of the WAL file seen after a commit, in bytes
	Checkpoints int64 // times the writer checkpointed and truncated it
	Busy        int64 // times readers kept such a checkpoint from finishing (it was retried later)
	Commits     int64 // transactions committed by the writer: each is one fsync of the WAL
}

// WALStats returns figures on the write-ahead log since Open.
func (s *Store) WALStats() WALStats {
	return WALStats{
		HighWater:   s.walStats.highWater.Load(),
		Checkpoints: s.walStats.checkpoints.Load(),
		Busy:        s.walStats.busy.Load(),
		Commits:     s.walStats.commits.Load(),
	}
}

// boundWAL runs on the writer goroutine between two batches: once the WAL
// file has passed the limit, it checkpoints it and truncates it (see
// DefaultWALCheckpointSize). No commit is in progress and none can start
// meanwhile, so the checkpoint can finish; readers are not blocked (new
// ones read the database file while it runs) but the checkpoint waits,
// briefly, for those still reading from the WAL. If they do not finish in
// time, it is tried again after a pause that doubles up to a second,
// so that a long reader cannot stall the writer commit after commit.
func (s *Store) boundWAL() {
	fi, err := os.Stat(s.path + "-wal")
	if err != nil {
		return
	}
	size := fi.Size()
	if size > s.walStats.highWater.Load() {
		s.walStats.highWater.Store(size) // only this goroutine stores it
	}
	if size < s.walLimit {
		return
	}
	now := time.Now()
	if now.Before(s.wal.retryAt) {
		return
	}
	if s.checkpointWAL() {
		s.wal.failures = 0
		s.walStats.checkpoints.Add(1)
		return
	}
	s.walStats.busy.Add(1)
	s.wal.failures++
	s.wal.retryAt = now.Add(min(10*time.Millisecond<<min(s.wal.failures, 7), time.Second))
}

// checkpointWAL copies the whole WAL into the database file and truncates
// it, on the writer's connection. It reports whether it finished.
func (s *Store) checkpointWAL() bool {
	s.ckptMu.Lock() // a background checkpoint in progress does part of the work
	defer s.ckptMu.Unlock()
	if _, err := s.wdb.Exec(`PRAGMA busy_timeout = ` + itoa(walBusyTimeoutMS)); err != nil {
		return false
	}
	defer func() {
		// The writer's ordinary commits need their full busy timeout
		// back: a failed restore is tried again rather than left at the
		// checkpoint's short one.
		for i := 0; i < 3; i++ {
			if _, err := s.wdb.Exec(`PRAGMA busy_timeout = ` + itoa(busyTimeoutMS)); err == nil {
				return
			}
		}
	}()
	var busy, logFrames, checkpointed int
	if err := s.wdb.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logFrames, &checkpointed); err != nil {
		return false
	}
	return busy == 0
}
