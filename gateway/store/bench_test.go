package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
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
