package store

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// burst queues n deliveries with an event each without waiting, the
// router's way, and returns once all are durable.
func burst(t testing.TB, s *Store, n int) {
	t.Helper()
	proto := *sampleDelivery(1)
	var failed atomic.Int64
	last := make(chan struct{})
	for i := range n {
		d := proto
		d.CreatedAt = t0.Add(time.Duration(i) * time.Millisecond)
		s.AddDeliveryThen(d, []Event{{Time: d.CreatedAt, Kind: "publish_accepted", Agent: d.Reader, Peer: d.Controller, Detail: "accepted"}},
			func(_ Delivery, err error) {
				if err != nil {
					failed.Add(1)
				}
				if i == n-1 {
					close(last)
				}
			})
	}
	<-last // commits are reported in order
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d of %d deliveries failed", f, n)
	}
}

func walSize(t testing.TB, s *Store) int64 {
	t.Helper()
	fi, err := os.Stat(s.Path() + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func countRows(t testing.TB, s *Store, table string) int {
	t.Helper()
	var n int
	if err := s.rdb.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A burst that writes many times the limit into the WAL leaves a WAL file
// under the limit plus one batch at every commit, and under the limit
// after it; nothing is lost.
func TestWALStaysBoundedDuringABurst(t *testing.T) {
	const limit = 512 << 10
	const n = 6000 // several MiB of WAL without the bound
	s, err := OpenWith(filepath.Join(t.TempDir(), "state.db"), Options{WALCheckpointSize: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	burst(t, s, n)
	st := s.WALStats()
	t.Logf("WAL: high-water %d bytes (limit %d), %d checkpoints, %d busy", st.HighWater, limit, st.Checkpoints, st.Busy)
	if st.Checkpoints < 2 {
		t.Errorf("%d checkpoints during a burst of %d deliveries, want several", st.Checkpoints, n)
	}
	// One batch of maxBatch deliveries adds under a MiB.
	if st.HighWater > limit+(1<<20) {
		t.Errorf("WAL high-water %d bytes, want at most the limit %d plus one batch", st.HighWater, limit)
	}
	if got := walSize(t, s); got > limit+(1<<20) {
		t.Errorf("WAL file after the burst: %d bytes, want at most %d", got, limit+(1<<20))
	}
	if got := countRows(t, s, "deliveries"); got != n {
		t.Errorf("%d deliveries stored, want %d", got, n)
	}
	if got := countRows(t, s, "events"); got != n {
		t.Errorf("%d events stored, want %d", got, n)
	}
	// After a restart, everything is there.
	s2 := reopen(t, s)
	if got := countRows(t, s2, "deliveries"); got != n {
		t.Errorf("after reopening: %d deliveries, want %d", got, n)
	}
}

// Readers go on reading while the writer checkpoints: none fails or
// waits for it. (Whether the WAL stays bounded then depends on how long
// each read takes; the next test pins it on purpose.)
func TestWALCheckpointsDoNotBlockReaders(t *testing.T) {
	const limit = 256 << 10
	s, err := OpenWith(filepath.Join(t.TempDir(), "state.db"), Options{WALCheckpointSize: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, stop := context.WithCancel(context.Background())
	var reads atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := s.Events(ctx, 0, 100); err != nil && ctx.Err() == nil {
					t.Errorf("Events during the burst: %v", err)
					return
				}
				if _, _, err := s.Backlog(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("Backlog during the burst: %v", err)
					return
				}
				reads.Add(1)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	burst(t, s, 3000)
	before := reads.Load()
	// A few more reads once the burst is over, so that a reader stuck
	// behind a checkpoint would show.
	testproc.CheckFor(10*time.Second, time.Millisecond, func() bool { return reads.Load() >= before+4 })
	stop()
	wg.Wait()
	st := s.WALStats()
	t.Logf("WAL: high-water %d bytes (limit %d), %d checkpoints, %d busy; %d reads", st.HighWater, limit, st.Checkpoints, st.Busy, reads.Load())
	if st.Checkpoints == 0 {
		t.Error("no checkpoint during the burst")
	}
	if reads.Load() < before+4 {
		t.Errorf("readers stopped reading: %d reads during the burst, %d after", before, reads.Load()-before)
	}
	if got := countRows(t, s, "deliveries"); got != 3000 {
		t.Errorf("%d deliveries stored, want 3000", got)
	}
}

// A reader that keeps a read transaction open pins the WAL: the writer's
// checkpoint gives up after a short wait (commits go on), and once the
// reader is done the WAL is truncated again.
func TestWALCheckpointWaitsOutALongReader(t *testing.T) {
	const limit = 1 << 20
	s, err := OpenWith(filepath.Join(t.TempDir(), "state.db"), Options{WALCheckpointSize: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	burst(t, s, 100)
	ctx := context.Background()
	tx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(`SELECT count(*) FROM deliveries`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	burst(t, s, 5000)
	st := s.WALStats()
	if st.Busy == 0 {
		t.Errorf("WAL stats with a reader holding a snapshot: %+v, want a checkpoint that could not finish", st)
	}
	if got := walSize(t, s); got <= limit {
		t.Errorf("WAL file %d bytes while a reader pins it, want more than %d (the test does not hold the WAL)", got, limit)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// The next commits after the writer's pause (at most a second)
	// truncate it.
	testproc.CheckFor(10*time.Second, 20*time.Millisecond, func() bool {
		if s.WALStats().Checkpoints != st.Checkpoints {
			return true
		}
		burst(t, s, 10)
		return false
	})
	if got := walSize(t, s); got > limit {
		t.Errorf("WAL file %d bytes after the reader ended, want at most %d", got, limit)
	}
	if got := countRows(t, s, "deliveries"); got < 5100 {
		t.Errorf("%d deliveries stored, want at least 5100", got)
	}
}
