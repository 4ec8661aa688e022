package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// The benchmarks write to real files with synchronous=FULL, so they
// measure the disk's fsync more than this package: compare them with each
// other, on the same machine, not across machines.

func reportOpsPerSec(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkAddDeliverySerial is one goroutine waiting for each delivery to
// be durable before the next: no two writes ever share a commit, so this
// is one fsync'd transaction per op, plus the writer's hand-off.
func BenchmarkAddDeliverySerial(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "state.db"))
	ctx := context.Background()
	proto := sampleDelivery(1)
	ev := Event{Kind: "publish_accepted"}
	for b.Loop() {
		d := *proto
		if err := s.AddDelivery(ctx, &d, ev); err != nil {
			b.Fatal(err)
		}
	}
	reportOpsPerSec(b)
}

// BenchmarkAddDeliveryParallel is many goroutines (8 per GOMAXPROCS), each
// waiting for its own delivery to be durable: the writer commits whatever
// queued up during the previous fsync in one transaction, so they share
// fsyncs.
func BenchmarkAddDeliveryParallel(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "state.db"))
	ctx := context.Background()
	proto := sampleDelivery(1)
	ev := Event{Kind: "publish_accepted"}
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d := *proto
			if err := s.AddDelivery(ctx, &d, ev); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportOpsPerSec(b)
}

// BenchmarkAddDeliveryThen is one goroutine accepting deliveries without
// waiting for each (the router's way): the queue fills during each fsync
// and the next commit takes up to maxBatch of them.
func BenchmarkAddDeliveryThen(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "state.db"))
	proto := *sampleDelivery(1)
	events := []Event{{Kind: "publish_accepted"}}
	failed := make(chan error, 1)
	report := func(_ Delivery, err error) { // on the writer goroutine: must not block
		if err != nil {
			select {
			case failed <- err:
			default:
			}
		}
	}
	last := make(chan struct{})
	b.ResetTimer()
	for i := range b.N {
		done := report
		if i == b.N-1 {
			done = func(d Delivery, err error) { report(d, err); close(last) }
		}
		s.AddDeliveryThen(proto, events, done)
	}
	<-last // commits and callbacks are in order: all are durable
	b.StopTimer()
	select {
	case err := <-failed:
		b.Fatal(err)
	default:
	}
	reportOpsPerSec(b)
}

// BenchmarkRawInsertPerTx is the baseline without the store: its own
// connection to a separate file with the same pragmas and schema, one
// INSERT per transaction, serially. AddDeliveryParallel / RawInsertPerTx
// is what group commit buys.
func BenchmarkRawInsertPerTx(b *testing.B) {
	path := filepath.Join(b.TempDir(), "raw.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"+
		"&_pragma=synchronous(FULL)&_pragma=foreign_keys(ON)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	schema, err := migrations.ReadFile("migrations/0001_init.sql")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(string(schema)); err != nil {
		b.Fatal(err)
	}
	var mode string
	var sync int
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		b.Fatalf("journal_mode %q, %v", mode, err)
	}
	if err := db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
		b.Fatalf("synchronous %d, %v", sync, err)
	}
	d := sampleDelivery(1)
	anomalies, err := json.Marshal(d.Anomalies)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO deliveries (id, controller, reader, subscription_id, query_id, request_id,
			approval_id, category, response, anomalies, bits, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
			NewID("dl-", 16), d.Controller, d.Reader, d.SubscriptionID, d.QueryID, d.RequestID, d.ApprovalID,
			int(d.Category), string(d.Response), string(anomalies), d.Bits, millis(d.CreatedAt)); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	reportOpsPerSec(b)
}

// BenchmarkPushCycle is every write of one push, as the gateway makes
// them, flat out: the delivery and publish_accepted (reported when
// durable), then, from another goroutine as the outbox would for a
// runtime that answers at once, the send counted with the delivery
// finished (FinishSent), delivery_sent (with the exposure it counts) and
// delivery_acked. ops/s is pushes per second.
func BenchmarkPushCycle(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "state.db"))
	s.Append(Event{Time: t0, Kind: "session_started", Agent: "main", Ref: "ses-1"})
	proto := *sampleDelivery(1)
	accepted := make(chan Delivery, b.N) // the callback runs on the writer: it must not block
	failed := make(chan error, 1)
	b.ResetTimer()
	go func() {
		for i := range b.N {
			s.AddDeliveryThen(proto, []Event{{Time: t0, Kind: "publish_accepted", Agent: proto.Reader, Peer: proto.Controller}},
				func(d Delivery, err error) {
					if err != nil && i == 0 {
						failed <- err
					}
					accepted <- d
				})
		}
	}()
	for range b.N {
		d := <-accepted
		// The outbox records a quickly acknowledged send with its
		// acknowledgment, in one write.
		s.FinishSent(d.ID, DeliveryDelivered, "", t0,
			Event{Time: t0, Kind: "delivery_sent", Agent: d.Controller, Peer: d.Reader, Category: 2, Bits: d.Bits},
			Event{Time: t0, Kind: "delivery_acked", Agent: d.Controller, Peer: d.Reader})
	}
	barrier(b, s)
	b.StopTimer()
	select {
	case err := <-failed:
		b.Fatal(err)
	default:
	}
	reportOpsPerSec(b)
}

// BenchmarkPruneBatch is one pruning commit at full size: pruneBatch
// finished deliveries and pruneBatch events deleted (what it adds to the
// commit it shares with pushes).
func BenchmarkPruneBatch(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "state.db"))
	ctx := context.Background()
	fill := func() {
		err := s.write(ctx, func(tx *wtx) error {
			for range pruneBatch {
				d := sampleDelivery(1)
				d.ID, d.CreatedAt = NewID("dl-", 16), t0
				if err := insertDelivery(tx, d); err != nil {
					return err
				}
				if _, err := tx.Exec(`UPDATE deliveries SET state = 'delivered', done_at = ? WHERE seq = last_insert_rowid()`, millis(t0)); err != nil {
					return err
				}
				if err := insertEvents(tx, []Event{{Time: t0, Kind: "delivery_acked", Agent: "main", Peer: "r", Detail: "main acknowledged delivery dl-xxxxxxxxxxxxxxxx"}}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		fill()
		b.StartTimer()
		r, err := s.pruneBatch(ctx, t0.Add(time.Hour), pruneBatch)
		if err != nil || r.Deliveries != pruneBatch || r.Events != pruneBatch {
			b.Fatalf("pruneBatch = %+v, %v", r, err)
		}
	}
}

// BenchmarkPushCycleAt100PerSecond is BenchmarkPushCycle at a steady 100
// pushes a second, the rate of a busy but not flooded gateway, waiting
// for each push's commit as a Reader does. It reports the commits (each
// one fsync) per push: the bookkeeping of one push (delivery_sent,
// delivery_acked) should ride on the next push's commit, for one fsync a
// push, not two.
func BenchmarkPushCycleAt100PerSecond(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "state.db"))
	s.Append(Event{Time: t0, Kind: "session_started", Agent: "main", Ref: "ses-1"})
	barrier(b, s)
	proto := *sampleDelivery(1)
	const pushes = 200
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	before := s.WALStats().Commits
	for range b.N {
		for range pushes {
			<-tick.C
			d := proto
			if err := s.AddDelivery(context.Background(), &d, Event{Time: t0, Kind: "publish_accepted", Agent: d.Reader, Peer: d.Controller}); err != nil {
				b.Fatal(err)
			}
			// The outbox's bookkeeping, as soon as the push is durable.
			s.FinishSent(d.ID, DeliveryDelivered, "", t0,
				Event{Time: t0, Kind: "delivery_sent", Agent: d.Controller, Peer: d.Reader, Category: 2, Bits: d.Bits},
				Event{Time: t0, Kind: "delivery_acked", Agent: d.Controller, Peer: d.Reader})
		}
	}
	barrier(b, s)
	b.StopTimer()
	b.ReportMetric(float64(s.WALStats().Commits-before)/float64(b.N*pushes), "commits/push")
}

// BenchmarkReportVsLogSize reads the exposure report (Exposure, what
// bcpgw report shows) of the same 100 sessions, each sent deliveries on 3
// channels, from a state file whose event log holds 30,000 events, then
// 3,000,000, and reports the time of one read in each and their ratio.
// The report comes from per-session totals, not from the log, so the
// ratio should be about 1 (it was linear in the log before).
func BenchmarkReportVsLogSize(b *testing.B) {
	var small, large time.Duration
	for range b.N {
		small = reportTime(b, 30_000)
		large = reportTime(b, 3_000_000)
	}
	b.ReportMetric(float64(small.Microseconds()), "µs-at-30k")
	b.ReportMetric(float64(large.Microseconds()), "µs-at-3M")
	b.ReportMetric(float64(large)/float64(small), "ratio")
	b.ReportMetric(0, "ns/op")
}

// reportTime builds a log of about events events around 100 Controller
// sessions and returns the mean time of one Exposure read.
func reportTime(b *testing.B, events int) time.Duration {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	s := openT(b, filepath.Join(b.TempDir(), "state.db"))
	ctx := context.Background()
	var evs []Event
	for i := range 100 {
		ref := fmt.Sprintf("ses-%d", i)
		evs = append(evs, Event{Time: t0, Kind: "session_started", Agent: "main", Ref: ref})
		for _, r := range []string{"researcher", "watcher", "mail"} {
			for range 10 {
				evs = append(evs, Event{Time: t0, Kind: "delivery_sent", Agent: "main", Peer: r, Category: 2, Bits: 12})
			}
		}
		evs = append(evs, Event{Time: t0, Kind: "session_stopped", Agent: "main", Ref: ref})
	}
	if err := s.AppendSync(ctx, evs...); err != nil {
		b.Fatal(err)
	}
	// The rest of the log: what a busy gateway stores besides (these
	// kinds do not change the report).
	err := s.write(ctx, func(tx *wtx) error {
		_, err := tx.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
			INSERT INTO events (time, kind, agent, peer, detail, category, bits, ref)
			SELECT ?, CASE i % 3 WHEN 0 THEN 'publish_accepted' WHEN 1 THEN 'delivery_sent' ELSE 'delivery_acked' END,
				'main', 'researcher', 'filler', 2, 12, 'dl-' || i FROM n`, events-len(evs), millis(t0))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	// One read first: both files' pages are then in the page cache, as
	// they are in a gateway that runs.
	if _, err := s.Exposure(ctx, ""); err != nil {
		b.Fatal(err)
	}
	const reads = 50
	start := time.Now()
	for range reads {
		got, err := s.Exposure(ctx, "")
		if err != nil || len(got) != 100 {
			b.Fatalf("Exposure: %d sessions, %v; want 100", len(got), err)
		}
	}
	return time.Since(start) / reads
}
