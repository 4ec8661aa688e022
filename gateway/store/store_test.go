package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// t0 has sub-millisecond digits on purpose: the store keeps milliseconds.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)

// ms is what a time looks like after a round trip through the store.
func ms(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Millisecond)
}

func openT(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newStore(t testing.TB) *Store {
	t.Helper()
	return openT(t, filepath.Join(t.TempDir(), "state.db"))
}

// reopen closes s, which waits for every queued write, and opens its file
// again: what the new store sees is what a restart would see.
func reopen(t testing.TB, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openT(t, s.Path())
}

// rawDB opens path with plain database/sql, bypassing the store.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func userVersion(t testing.TB, path string) int {
	t.Helper()
	db := rawDB(t, path)
	defer db.Close()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// barrier waits until every write queued before it has been committed:
// the writer commits in queue order.
func barrier(t testing.TB, s *Store) {
	t.Helper()
	if err := s.AppendSync(context.Background()); err != nil {
		t.Fatalf("barrier: %v", err)
	}
}

// holdWriter keeps the writer goroutine busy until release is called, so
// that everything submitted meanwhile is committed in one batch, after
// whatever the writer was doing.
func holdWriter(t testing.TB, s *Store) (release func()) {
	t.Helper()
	started, hold := make(chan struct{}), make(chan struct{})
	s.writeAsync(func(*wtx) error {
		close(started)
		<-hold
		return nil
	})
	<-started
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release) // runs before the store's Close cleanup
	return release
}

func allEvents(t testing.TB, s *Store) []Event {
	t.Helper()
	evs, err := s.Events(context.Background(), 0, 1<<30)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	return evs
}

func eventsFor(t testing.TB, s *Store, ref string) []Event {
	t.Helper()
	var out []Event
	for _, e := range allEvents(t, s) {
		if e.Ref == ref {
			out = append(out, e)
		}
	}
	return out
}

func kinds(evs []Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

func mustDeliveries(t testing.TB, s *Store) []Delivery {
	t.Helper()
	ds, err := s.Deliveries(context.Background())
	if err != nil {
		t.Fatalf("Deliveries: %v", err)
	}
	return ds
}

func mustDelivery(t testing.TB, s *Store, id string) *Delivery {
	t.Helper()
	d, err := s.Delivery(context.Background(), id)
	if err != nil {
		t.Fatalf("Delivery(%s): %v", id, err)
	}
	return d
}

func mustApproval(t testing.TB, s *Store, id string) *Approval {
	t.Helper()
	a, err := s.Approval(context.Background(), id)
	if err != nil {
		t.Fatalf("Approval(%s): %v", id, err)
	}
	return a
}

func sampleDelivery(i int) *Delivery {
	return &Delivery{
		Controller:     "main",
		Reader:         fmt.Sprintf("reader-%d", i),
		SubscriptionID: "research-findings",
		Category:       bcp.Cat2,
		Response:       json.RawMessage(fmt.Sprintf(`{"n":%d,"topic":"héllo \"quoted\" ✓"}`, i)),
		Anomalies:      []bcp.Anomaly{{Code: bcp.AnomalyURL, Field: "topic", Match: "https://x.example"}},
		Bits:           671.5,
		CreatedAt:      t0.Add(time.Duration(i) * time.Millisecond),
	}
}

// wantDelivery is d as the store gives it back.
func wantDelivery(d Delivery) Delivery {
	d.CreatedAt, d.DoneAt = ms(d.CreatedAt), ms(d.DoneAt)
	if d.Anomalies == nil {
		d.Anomalies = []bcp.Anomaly{}
	}
	return d
}

func checkID(t testing.TB, id, prefix string, n int) {
	t.Helper()
	const alphabet = "abcdefghijkmnpqrstuvwxyz23456789"
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != n {
		t.Errorf("id %q: want prefix %q and %d more characters", id, prefix, n)
	}
	for _, c := range rest {
		if !strings.ContainsRune(alphabet, c) {
			t.Errorf("id %q: %q is not in the alphabet", id, c)
		}
	}
}

func TestOpenCreatesFileWithMode0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openT(t, path)
	if err := s.AddDelivery(context.Background(), sampleDelivery(1)); err != nil {
		t.Fatal(err)
	}
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	// The WAL and shared-memory files hold the same data; SQLite gives
	// them the database file's mode.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if p != path && errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), got)
		}
	}
}

func TestOpenReopenAppliesMigrationsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openT(t, path)
	d := sampleDelivery(1)
	if err := s.AddDelivery(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		// A migration run twice would fail on CREATE TABLE.
		s = reopen(t, s)
		if got := len(mustDeliveries(t, s)); got != 1 {
			t.Fatalf("reopen %d: %d deliveries, want 1", i, got)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, path); v != len(names) {
		t.Errorf("user_version = %d, want %d (the number of migrations)", v, len(names))
	}
	var tables int
	if err := rawDB(t, path).QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('deliveries', 'approvals', 'events')`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 3 {
		t.Errorf("%d tables, want 3", tables)
	}
}

func TestOpenRefuses(t *testing.T) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string)
		want    []string // substrings of the error
	}{
		{"newer schema", func(t *testing.T, path string) {
			s := openT(t, path)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := rawDB(t, path).Exec("PRAGMA user_version = 99"); err != nil {
				t.Fatal(err)
			}
		}, []string{"schema version 99 is newer", fmt.Sprintf("(%d)", len(names)), "newer bcpgw"}},
		{"not a database", func(t *testing.T, path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("not sqlite "), 1000), 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"not a database"}},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, []string{"open state"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.db")
			tt.prepare(t, path)
			s, err := Open(path)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	t.Run("newer schema left alone", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "state.db")
		tests[0].prepare(t, path)
		if _, err := Open(path); err == nil {
			t.Fatal("Open succeeded")
		}
		if v := userVersion(t, path); v != 99 {
			t.Errorf("user_version = %d after a refused Open, want 99", v)
		}
	})
}

// The path is put in a file: URI; characters that mean something in a
// URI must still name the file they spell.
func TestOpenPathWithURICharacters(t *testing.T) {
	for _, dir := range []string{"a#b", "c?d", "50%", "x%23y", "sp ace", "semi;colon&amp=1"} {
		t.Run(dir, func(t *testing.T) {
			parent := t.TempDir()
			if err := os.Mkdir(filepath.Join(parent, dir), 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(parent, dir, "state.db")
			s := openT(t, path)
			if err := s.AddDelivery(context.Background(), sampleDelivery(1)); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			head, err := os.ReadFile(path)
			if err != nil || !bytes.HasPrefix(head, []byte("SQLite format 3\x00")) {
				t.Fatalf("%q is not a database: %v", path, err)
			}
			// A plain file name given to the driver is cut at '?', so name
			// the file with a URI that escapes it independently of Open.
			uri := (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
			var n int
			if err := rawDB(t, uri).QueryRow("SELECT count(*) FROM deliveries").Scan(&n); err != nil {
				t.Fatalf("the file at %q: %v", path, err)
			}
			if n != 1 {
				t.Errorf("the file at %q has %d deliveries, want 1", path, n)
			}
			entries, err := os.ReadDir(parent)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("stray files next to %q: %q", dir, names)
			}
		})
	}
}

func TestAddDeliveryRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	zone := time.FixedZone("CET", 3600)
	in := []*Delivery{
		{ // a push, created in another zone
			Controller: "main", Reader: "researcher", SubscriptionID: "research-findings", Category: bcp.Cat2,
			Response: json.RawMessage(`{"relevance":4,"topic":"Quantum ✓","finding":"a \"quoted\" line\nand more"}`),
			Anomalies: []bcp.Anomaly{
				{Code: bcp.AnomalyURL, Field: "finding", Match: "https://evil.example"},
				{Code: bcp.AnomalyInstruction, Field: "topic", Match: "ignore previous"},
			},
			Bits: 671.25, CreatedAt: t0.In(zone),
		},
		{ // an answer from an approval, with its own id, no anomalies, no time
			ID: "dl-explicit", Controller: "main", Reader: "analyst", QueryID: "q-1", RequestID: "req-7",
			ApprovalID: "ap-abc", Category: bcp.Cat3, Response: json.RawMessage(`{"summary":""}`),
		},
		{ // Cat-1, empty anomalies, ignored caller state
			Controller: "boss", Reader: "sensor", SubscriptionID: "alerts", Category: bcp.Cat1,
			Response: json.RawMessage(`{"priority":"high"}`), Anomalies: []bcp.Anomaly{}, Bits: 3,
			CreatedAt: t0.Add(999 * time.Microsecond), State: DeliveryDelivered, Attempts: 5,
		},
	}
	var want []Delivery
	for i, d := range in {
		explicit := d.ID
		if err := s.AddDelivery(ctx, d); err != nil {
			t.Fatalf("AddDelivery %d: %v", i, err)
		}
		if d.State != DeliveryPending {
			t.Errorf("delivery %d: State = %q, want pending", i, d.State)
		}
		if explicit != "" {
			if d.ID != explicit {
				t.Errorf("delivery %d: ID = %q, want %q", i, d.ID, explicit)
			}
		} else {
			checkID(t, d.ID, "dl-", 16)
		}
		if i > 0 && d.Seq <= want[i-1].Seq {
			t.Errorf("delivery %d: Seq %d not after %d", i, d.Seq, want[i-1].Seq)
		}
		w := *d
		w.Attempts = 0 // the store starts counting at zero
		want = append(want, wantDelivery(w))
	}

	check := func(s *Store) {
		t.Helper()
		got, err := s.PendingDeliveries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("PendingDeliveries:\n got %+v\nwant %+v", got, want)
		}
		if all := mustDeliveries(t, s); !reflect.DeepEqual(all, want) {
			t.Errorf("Deliveries:\n got %+v\nwant %+v", all, want)
		}
		for _, w := range want {
			if got := mustDelivery(t, s, w.ID); !reflect.DeepEqual(*got, w) {
				t.Errorf("Delivery(%s):\n got %+v\nwant %+v", w.ID, *got, w)
			}
		}
		if _, err := s.Delivery(ctx, "dl-nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delivery(unknown): %v, want ErrNotFound", err)
		}
	}
	check(s)
	check(reopen(t, s))
}

func TestAddDeliveryEvents(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d := sampleDelivery(1)
	err := s.AddDelivery(ctx, d,
		Event{Time: t0, Kind: "publish_accepted", Agent: "reader-1", Peer: "main", Category: 2, Bits: 671.5},
		Event{Time: t0, Kind: "other", Ref: "explicit-ref"},
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(eventsFor(t, s, d.ID)); !reflect.DeepEqual(got, []string{"publish_accepted"}) {
		t.Errorf("events for the delivery: %q", got)
	}
	if got := kinds(eventsFor(t, s, "explicit-ref")); !reflect.DeepEqual(got, []string{"other"}) {
		t.Errorf("an explicit ref must be kept: %q", got)
	}
}

func TestFinishDelivery(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		state  DeliveryState
		detail string
	}{
		{"delivered", DeliveryDelivered, "result ok"},
		{"dropped", DeliveryDropped, "subscription revoked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			d1, d2 := sampleDelivery(1), sampleDelivery(2)
			for _, d := range []*Delivery{d1, d2} {
				if err := s.AddDelivery(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
			at := t0.Add(1500 * time.Microsecond)
			s.FinishDelivery(d1.ID, tt.state, tt.detail, at, Event{Time: at, Kind: "delivery_" + tt.name})
			s = reopen(t, s)

			want := wantDelivery(*d1)
			want.State, want.DoneAt, want.DoneDetail = tt.state, ms(at), tt.detail
			if got := mustDelivery(t, s, d1.ID); !reflect.DeepEqual(*got, want) {
				t.Errorf("finished delivery:\n got %+v\nwant %+v", *got, want)
			}
			pending, err := s.PendingDeliveries(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(pending) != 1 || pending[0].ID != d2.ID {
				t.Errorf("pending after finishing %s: %+v, want only %s", d1.ID, pending, d2.ID)
			}
			evs := eventsFor(t, s, d1.ID)
			if got := kinds(evs); !reflect.DeepEqual(got, []string{"delivery_" + tt.name}) {
				t.Fatalf("events: %q", got)
			}
			if !evs[0].Time.Equal(ms(at)) {
				t.Errorf("event time %v, want %v", evs[0].Time, ms(at))
			}

			// Finishing it again, either way, changes nothing and writes no
			// event.
			for _, st := range []DeliveryState{DeliveryDelivered, DeliveryDropped} {
				s.FinishDelivery(d1.ID, st, "again", at.Add(time.Hour), Event{Time: at, Kind: "again"})
			}
			s.FinishDelivery("dl-unknown", DeliveryDelivered, "x", at, Event{Kind: "unknown"})
			s = reopen(t, s)
			if got := mustDelivery(t, s, d1.ID); !reflect.DeepEqual(*got, want) {
				t.Errorf("after a second finish:\n got %+v\nwant %+v", *got, want)
			}
			if got := kinds(allEvents(t, s)); !reflect.DeepEqual(got, []string{"delivery_" + tt.name}) {
				t.Errorf("events after a second finish: %q", got)
			}
		})
	}
}

func TestMarkAttempted(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	d1, d2 := sampleDelivery(1), sampleDelivery(2)
	for _, d := range []*Delivery{d1, d2} {
		if err := s.AddDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		s.MarkAttempted(d1.ID)
	}
	s.MarkAttempted("dl-unknown")
	s = reopen(t, s)
	for id, want := range map[string]int{d1.ID: 3, d2.ID: 0} {
		got := mustDelivery(t, s, id)
		if got.Attempts != want {
			t.Errorf("%s: Attempts = %d, want %d", id, got.Attempts, want)
		}
		if got.State != DeliveryPending {
			t.Errorf("%s: State = %q, want pending", id, got.State)
		}
	}
	if n := len(mustDeliveries(t, s)); n != 2 {
		t.Errorf("%d deliveries, want 2", n)
	}
}

func TestConcurrentAddDeliveryIsDurable(t *testing.T) {
	const n = 200
	ctx := context.Background()
	s := newStore(t)
	var wg sync.WaitGroup
	errs := make([]error, n)
	ds := make([]*Delivery, n)
	for i := range n {
		ds[i] = sampleDelivery(i)
		wg.Go(func() {
			errs[i] = s.AddDelivery(ctx, ds[i], Event{Time: t0, Kind: "publish_accepted"})
		})
	}
	wg.Wait()
	seqs := map[int64]bool{}
	ids := map[string]int64{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("AddDelivery %d: %v", i, err)
		}
		seqs[ds[i].Seq] = true
		ids[ds[i].ID] = ds[i].Seq
	}
	if len(seqs) != n || len(ids) != n {
		t.Fatalf("%d distinct Seq and %d distinct IDs returned, want %d", len(seqs), len(ids), n)
	}

	s = reopen(t, s)
	got := mustDeliveries(t, s)
	if len(got) != n {
		t.Fatalf("%d deliveries after reopen, want %d", len(got), n)
	}
	for i, d := range got {
		if i > 0 && d.Seq <= got[i-1].Seq {
			t.Errorf("Deliveries not in Seq order at %d", i)
		}
		if seq, ok := ids[d.ID]; !ok || seq != d.Seq {
			t.Errorf("stored %s with Seq %d; AddDelivery returned Seq %d (known %v)", d.ID, d.Seq, seq, ok)
		}
	}
	if evs := allEvents(t, s); len(evs) != n {
		t.Errorf("%d events, want %d", len(evs), n)
	}
}

// A write that fails in a group commit is undone alone, events and all;
// the others in the batch commit.
func TestFailingWriteDoesNotUndoItsBatch(t *testing.T) {
	ctx := context.Background()

	t.Run("one batch", func(t *testing.T) {
		s := newStore(t)
		release := holdWriter(t, s)
		// Everything below is queued behind the held writer, so it is
		// committed in one transaction.
		good := func(id string) func(*wtx) error {
			return func(tx *wtx) error {
				d := sampleDelivery(0)
				d.ID = id
				if err := insertDelivery(tx, d); err != nil {
					return err
				}
				return insertEvents(tx, []Event{{Kind: "good", Ref: id}})
			}
		}
		bad := func(tx *wtx) error {
			// Writes something, then fails: the something must go too.
			if err := insertEvents(tx, []Event{{Kind: "bad"}}); err != nil {
				return err
			}
			d := sampleDelivery(0)
			d.ID = "dl-a" // taken by the first write of the batch
			return insertDelivery(tx, d)
		}
		fns := []func(*wtx) error{good("dl-a"), bad, good("dl-b"), bad, good("dl-c")}
		dones := make([]chan error, len(fns))
		for i, fn := range fns {
			dones[i] = make(chan error, 1)
			done := dones[i]
			if err := s.submit(op{fn: fn, done: func(err error) { done <- err }}); err != nil {
				t.Fatal(err)
			}
		}
		release()
		for i, done := range dones {
			err := <-done
			if i%2 == 1 {
				if err == nil || !strings.Contains(err.Error(), "UNIQUE") {
					t.Errorf("write %d: %v, want a UNIQUE constraint failure", i, err)
				}
			} else if err != nil {
				t.Errorf("write %d: %v", i, err)
			}
		}
		s = reopen(t, s)
		var ids []string
		for _, d := range mustDeliveries(t, s) {
			ids = append(ids, d.ID)
		}
		if want := []string{"dl-a", "dl-b", "dl-c"}; !reflect.DeepEqual(ids, want) {
			t.Errorf("deliveries %q, want %q", ids, want)
		}
		if got, want := kinds(allEvents(t, s)), []string{"good", "good", "good"}; !reflect.DeepEqual(got, want) {
			t.Errorf("events %q, want %q", got, want)
		}
	})

	t.Run("concurrent AddDelivery", func(t *testing.T) {
		s := newStore(t)
		taken := sampleDelivery(0)
		taken.ID = "dl-taken"
		if err := s.AddDelivery(ctx, taken); err != nil {
			t.Fatal(err)
		}
		const n = 40
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				d := sampleDelivery(i)
				if i%4 == 0 {
					d.ID = "dl-taken"
				}
				<-start
				errs[i] = s.AddDelivery(ctx, d, Event{Kind: fmt.Sprintf("ev-%d", i)})
				if errs[i] != nil && d.ID != "dl-taken" {
					t.Errorf("a failed AddDelivery changed its argument: %+v", d)
				}
			})
		}
		close(start)
		wg.Wait()
		wantKinds := map[string]bool{}
		for i, err := range errs {
			if i%4 == 0 {
				if err == nil || !strings.Contains(err.Error(), "UNIQUE") {
					t.Errorf("AddDelivery %d with a taken ID: %v, want a UNIQUE constraint failure", i, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("AddDelivery %d: %v", i, err)
			}
			wantKinds[fmt.Sprintf("ev-%d", i)] = true
		}
		s = reopen(t, s)
		if got := len(mustDeliveries(t, s)); got != 1+n-n/4 {
			t.Errorf("%d deliveries, want %d", got, 1+n-n/4)
		}
		gotKinds := map[string]bool{}
		for _, e := range allEvents(t, s) {
			gotKinds[e.Kind] = true
		}
		if !reflect.DeepEqual(gotKinds, wantKinds) {
			t.Errorf("events %v, want %v", gotKinds, wantKinds)
		}
	})
}

func TestAddDeliveryThen(t *testing.T) {
	const n = 50
	s := newStore(t)
	type outcome struct {
		d   Delivery
		err error
	}
	outcomes := make(chan outcome, n) // then must not block
	events := []Event{{Kind: "publish_accepted"}}
	for i := range n {
		d := *sampleDelivery(i)
		if i == 30 {
			d.ID = "dl-dup"
		}
		if i == 31 {
			d.ID = "dl-dup" // fails, alone
		}
		s.AddDeliveryThen(d, events, func(d Delivery, err error) { outcomes <- outcome{d, err} })
	}
	if events[0].Ref != "" {
		t.Errorf("AddDeliveryThen changed the caller's events: %+v", events)
	}
	var prev int64
	for i := range n {
		o := <-outcomes
		if o.d.Reader != fmt.Sprintf("reader-%d", i) {
			t.Fatalf("outcome %d is for %s: not reported in order", i, o.d.Reader)
		}
		if i == 31 {
			if o.err == nil || !strings.Contains(o.err.Error(), "UNIQUE") {
				t.Errorf("duplicate ID: %v, want a UNIQUE constraint failure", o.err)
			}
			continue
		}
		if o.err != nil {
			t.Fatalf("delivery %d: %v", i, o.err)
		}
		if o.d.Seq <= prev || o.d.State != DeliveryPending || o.d.ID == "" {
			t.Errorf("delivery %d reported as %+v", i, o.d)
		}
		prev = o.d.Seq
		// Reported once durable: it is there to read already.
		if got := mustDelivery(t, s, o.d.ID); got.Seq != o.d.Seq {
			t.Errorf("stored %+v, reported %+v", got, o.d)
		}
		if evs := eventsFor(t, s, o.d.ID); len(evs) != 1 {
			t.Errorf("%d events for %s, want 1", len(evs), o.d.ID)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var closedErr error
	s.AddDeliveryThen(*sampleDelivery(0), nil, func(_ Delivery, err error) { closedErr = err })
	if !errors.Is(closedErr, ErrClosed) { // then ran at once, on this goroutine
		t.Errorf("after Close: %v, want ErrClosed", closedErr)
	}
	s = openT(t, s.Path())
	if got := len(mustDeliveries(t, s)); got != n-1 {
		t.Errorf("%d deliveries, want %d", got, n-1)
	}
}

func TestAddApprovalThen(t *testing.T) {
	s := newStore(t)
	reported := make(chan Approval, 3)
	for i := range 3 {
		a := *sampleApproval(t0)
		a.Reader = fmt.Sprintf("reader-%d", i)
		s.AddApprovalThen(a, []Event{{Kind: "publish_review"}}, func(a Approval, err error) {
			if err != nil {
				t.Errorf("AddApprovalThen: %v", err)
			}
			reported <- a
		})
	}
	for i := range 3 {
		a := <-reported
		if a.Reader != fmt.Sprintf("reader-%d", i) || a.Status != ApprovalPending || a.SHA256 != ContentHash(a.Response) || a.Seq == 0 {
			t.Errorf("reported %+v", a)
		}
		checkID(t, a.ID, "ap-", 8)
		if got := mustApproval(t, s, a.ID); got.Seq != a.Seq {
			t.Errorf("stored %+v, reported %+v", got, a)
		}
		if evs := eventsFor(t, s, a.ID); len(evs) != 1 {
			t.Errorf("%d events for %s, want 1", len(evs), a.ID)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var closedErr error
	s.AddApprovalThen(*sampleApproval(t0), nil, func(_ Approval, err error) { closedErr = err })
	if !errors.Is(closedErr, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", closedErr)
	}
}

func sampleApproval(now time.Time) *Approval {
	return &Approval{
		Controller: "main", Reader: "researcher", SubscriptionID: "digest", QueryID: "q-9", RequestID: "r-9",
		Category: bcp.Cat3, Directive: "Summarize the day",
		Response:  json.RawMessage(`{"summary":"Quiet day. See https://x.example ✓"}`),
		Anomalies: []bcp.Anomaly{{Code: bcp.AnomalyURL, Field: "summary", Match: "https://x.example"}},
		Bits:      1100, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
	}
}

func mustAddApproval(t testing.TB, s *Store, a *Approval, events ...Event) *Approval {
	t.Helper()
	if err := s.AddApproval(context.Background(), a, events...); err != nil {
		t.Fatalf("AddApproval: %v", err)
	}
	return a
}

func TestAddApproval(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := sampleApproval(t0)
	a.Status, a.SHA256 = ApprovalApproved, "caller's hash is ignored"
	mustAddApproval(t, s, a, Event{Time: t0, Kind: "publish_review", Agent: "researcher"})
	checkID(t, a.ID, "ap-", 8)
	if a.Status != ApprovalPending || a.SHA256 != ContentHash(a.Response) || a.Seq == 0 {
		t.Errorf("after AddApproval: Status %q, SHA256 %q, Seq %d", a.Status, a.SHA256, a.Seq)
	}
	b := sampleApproval(t0)
	b.ID, b.Anomalies, b.Response = "ap-explicit", nil, json.RawMessage(`{}`)
	mustAddApproval(t, s, b)
	if b.ID != "ap-explicit" || b.Seq <= a.Seq {
		t.Errorf("second approval: ID %q Seq %d", b.ID, b.Seq)
	}
	dup := sampleApproval(t0)
	dup.ID = "ap-explicit"
	if err := s.AddApproval(ctx, dup, Event{Kind: "dup"}); err == nil {
		t.Error("AddApproval with a taken ID succeeded")
	} else if dup.Seq != 0 || dup.Status != "" {
		t.Errorf("a failed AddApproval changed its argument: %+v", dup)
	}

	s = reopen(t, s)
	want := *a
	want.CreatedAt, want.ExpiresAt = ms(a.CreatedAt), ms(a.ExpiresAt)
	if got := mustApproval(t, s, a.ID); !reflect.DeepEqual(*got, want) {
		t.Errorf("Approval:\n got %+v\nwant %+v", *got, want)
	}
	if got := mustApproval(t, s, b.ID); got.Anomalies == nil || len(got.Anomalies) != 0 {
		t.Errorf("nil anomalies came back as %#v, want empty", got.Anomalies)
	}
	if _, err := s.Approval(ctx, "ap-nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Approval(unknown): %v, want ErrNotFound", err)
	}
	if got := kinds(allEvents(t, s)); !reflect.DeepEqual(got, []string{"publish_review"}) {
		t.Errorf("events %q", got)
	}
	if got := eventsFor(t, s, a.ID); len(got) != 1 {
		t.Errorf("the event's ref is not the approval's id: %+v", allEvents(t, s))
	}
}

// Decide hands the delivery an approval releases to Released on the
// writer, in commit order with the callbacks of the writes after it: a
// push committed after the approval is handed over after it, even when
// both are in one group commit. (Handed over by Decide's caller once it
// returned, a push's callback could come first, and a queue that trusts
// the order of seqs took the approval's for one it had read already.)
func TestDecideReleasesInCommitOrder(t *testing.T) {
	ctx := testproc.Context(t)
	s := newStore(t)
	a := mustAddApproval(t, s, sampleApproval(t0))
	// The writer is held, so that the decision and the push queue up
	// behind it and commit together, in that order.
	inside, release := make(chan struct{}), make(chan struct{})
	go s.write(ctx, func(*wtx) error { close(inside); <-release; return nil })
	<-inside
	var mu sync.Mutex
	var handed []string
	hand := func(what string, d Delivery) {
		mu.Lock()
		handed = append(handed, fmt.Sprintf("%s %d", what, d.Seq))
		mu.Unlock()
	}
	decided := make(chan *Delivery, 1)
	go func() {
		_, dl, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "alice"},
			At: t0.Add(time.Minute), Released: func(d Delivery) { hand("approved", d) }})
		if err != nil {
			t.Error(err)
		}
		decided <- dl
	}()
	testproc.Eventually(t, "the decision queued", func() bool { return len(s.ops) == 1 })
	pushed := make(chan Delivery, 1)
	s.AddDeliveryThen(*sampleDelivery(1), nil, func(d Delivery, err error) {
		if err != nil {
			t.Error(err)
		}
		hand("pushed", d)
		pushed <- d
	})
	close(release)
	dl, p := <-decided, <-pushed
	if dl == nil {
		t.Fatal("no delivery released")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{fmt.Sprintf("approved %d", dl.Seq), fmt.Sprintf("pushed %d", p.Seq)}; dl.Seq >= p.Seq || !reflect.DeepEqual(handed, want) {
		t.Errorf("handed over %q, want %q", handed, want)
	}
}

func TestDecideApprove(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustAddApproval(t, s, sampleApproval(t0))
	other := mustAddApproval(t, s, sampleApproval(t0))
	at := t0.Add(time.Minute + 7*time.Microsecond)
	got, dl, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "alice"}, Note: "fine", At: at})
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	if got.Status != ApprovalApproved || got.DecidedBy.Name != "alice" || got.Note != "fine" || !got.DecidedAt.Equal(at) {
		t.Errorf("returned approval: %+v", got)
	}
	if dl == nil {
		t.Fatal("no delivery returned")
	}
	checkID(t, dl.ID, "dl-", 16)
	wantDl := Delivery{
		Seq: dl.Seq, ID: dl.ID, Controller: a.Controller, Reader: a.Reader, SubscriptionID: a.SubscriptionID,
		QueryID: a.QueryID, RequestID: a.RequestID, ApprovalID: a.ID, Category: a.Category, Response: a.Response,
		Anomalies: a.Anomalies, Bits: a.Bits, State: DeliveryPending, CreatedAt: at,
	}
	if !reflect.DeepEqual(*dl, wantDl) {
		t.Errorf("returned delivery:\n got %+v\nwant %+v", *dl, wantDl)
	}

	// Durable: it survives a restart.
	s = reopen(t, s)
	stored := mustApproval(t, s, a.ID)
	if stored.Status != ApprovalApproved || stored.DecidedBy.Name != "alice" || stored.Note != "fine" ||
		!stored.DecidedAt.Equal(ms(at)) || stored.Reason != "" {
		t.Errorf("stored approval: %+v", stored)
	}
	if got := mustDelivery(t, s, dl.ID); !reflect.DeepEqual(*got, wantDelivery(wantDl)) {
		t.Errorf("stored delivery:\n got %+v\nwant %+v", *got, wantDelivery(wantDl))
	}
	evs := eventsFor(t, s, a.ID)
	if len(evs) != 1 || evs[0].Kind != "approval_approved" || evs[0].Agent != a.Reader || evs[0].Peer != a.Controller ||
		evs[0].Category != int(bcp.Cat3) || evs[0].Bits != a.Bits || !strings.Contains(evs[0].Detail, "alice") {
		t.Errorf("events: %+v", evs)
	}
	if o := mustApproval(t, s, other.ID); o.Status != ApprovalPending {
		t.Errorf("the other item is %q, want pending", o.Status)
	}

	// Every second decision is refused, whatever it says.
	for _, d := range []Decision{
		{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "bob"}, At: at},
		{ID: a.ID, Status: ApprovalApproved, SHA256: "wrong", By: Decider{Name: "bob"}, At: at},
		{ID: a.ID, Status: ApprovalRejected, By: Decider{Name: "bob"}, Reason: "no", At: at},
		{ID: a.ID, Status: ApprovalExpired, By: Decider{Name: "gateway"}, At: at.Add(2 * time.Hour)},
		{ID: a.ID, Status: ApprovalDropped, By: Decider{Name: "gateway"}, At: at},
	} {
		got, dl, err := s.Decide(ctx, d)
		if !errors.Is(err, ErrDecided) {
			t.Errorf("second decision %+v: %v, want ErrDecided", d, err)
		}
		if dl != nil {
			t.Errorf("second decision %+v returned a delivery", d)
		}
		if got == nil || got.Status != ApprovalApproved {
			t.Errorf("second decision %+v returned %+v, want the approved item", d, got)
		}
	}
	s = reopen(t, s)
	if n := len(mustDeliveries(t, s)); n != 1 {
		t.Errorf("%d deliveries, want 1", n)
	}
	if got := mustApproval(t, s, a.ID); !reflect.DeepEqual(got, stored) {
		t.Errorf("refused decisions changed the item:\n got %+v\nwant %+v", got, stored)
	}
	if n := len(eventsFor(t, s, a.ID)); n != 1 {
		t.Errorf("%d events, want 1", n)
	}
}

func TestDecideOutcomes(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		decision   func(a *Approval) Decision
		wantErr    error
		wantStatus ApprovalStatus
		wantReason string
		wantEvent  string // "" for none
	}{
		{"approve with a wrong hash", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalApproved, SHA256: ContentHash([]byte(`{"summary":"other"}`)), By: Decider{Name: "alice"}, At: t0}
		}, ErrHashMismatch, ApprovalPending, "", ""},
		{"approve with no hash", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalApproved, By: Decider{Name: "alice"}, At: t0}
		}, ErrHashMismatch, ApprovalPending, "", ""},
		{"approve with an upper-case hash", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalApproved, SHA256: strings.ToUpper(a.SHA256), By: Decider{Name: "alice"}, At: t0}
		}, ErrHashMismatch, ApprovalPending, "", ""},
		{"reject with a wrong hash", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalRejected, SHA256: "00", By: Decider{Name: "alice"}, At: t0}
		}, ErrHashMismatch, ApprovalPending, "", ""},
		{"approve a millisecond before expiry", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "alice"}, At: a.ExpiresAt.Add(-time.Millisecond)}
		}, nil, ApprovalApproved, "", "approval_approved"},
		{"approve at expiry", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "alice"}, At: a.ExpiresAt}
		}, ErrExpired, ApprovalExpired, "expired before it was approved", "approval_expired"},
		{"approve after expiry", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "alice"}, At: a.ExpiresAt.Add(time.Hour)}
		}, ErrExpired, ApprovalExpired, "expired before it was approved", "approval_expired"},
		{"reject with a reason", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalRejected, By: Decider{Name: "alice"}, Reason: "leaks a URL", Note: "n", At: t0}
		}, nil, ApprovalRejected, "leaks a URL", "approval_rejected"},
		{"reject with the right hash", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalRejected, SHA256: a.SHA256, By: Decider{Name: "alice"}, At: t0}
		}, nil, ApprovalRejected, "", "approval_rejected"},
		{"reject after expiry", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalRejected, By: Decider{Name: "alice"}, Reason: "late", At: a.ExpiresAt.Add(time.Hour)}
		}, nil, ApprovalRejected, "late", "approval_rejected"},
		{"expire", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalExpired, By: Decider{Name: "gateway"}, Reason: "timed out", At: a.ExpiresAt}
		}, nil, ApprovalExpired, "timed out", "approval_expired"},
		{"drop", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalDropped, By: Decider{Name: "gateway"}, Reason: "subscription revoked", At: t0}
		}, nil, ApprovalDropped, "subscription revoked", "approval_dropped"},
		{"unknown id", func(a *Approval) Decision {
			return Decision{ID: "ap-nope", Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "alice"}, At: t0}
		}, ErrNotFound, ApprovalPending, "", ""},
		{"pending is not a decision", func(a *Approval) Decision {
			return Decision{ID: a.ID, Status: ApprovalPending, By: Decider{Name: "alice"}, At: t0}
		}, errNotADecision, ApprovalPending, "", ""},
		{"empty status is not a decision", func(a *Approval) Decision {
			return Decision{ID: a.ID, By: Decider{Name: "alice"}, At: t0}
		}, errNotADecision, ApprovalPending, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			a := mustAddApproval(t, s, sampleApproval(t0))
			d := tt.decision(a)
			got, dl, err := s.Decide(ctx, d)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("Decide: %v, want %v", err, tt.wantErr)
			}
			if (tt.wantStatus == ApprovalApproved) != (dl != nil) {
				t.Errorf("returned delivery %+v for status %q", dl, tt.wantStatus)
			}
			if errors.Is(err, ErrExpired) && (got == nil || got.Status != ApprovalExpired) {
				t.Errorf("ErrExpired returned %+v, want the expired item", got)
			}
			s = reopen(t, s)
			stored := mustApproval(t, s, a.ID)
			if stored.Status != tt.wantStatus || stored.Reason != tt.wantReason {
				t.Errorf("stored status %q reason %q, want %q %q", stored.Status, stored.Reason, tt.wantStatus, tt.wantReason)
			}
			if tt.wantStatus == ApprovalPending {
				if !stored.DecidedAt.IsZero() || stored.DecidedBy.Name != "" {
					t.Errorf("a pending item has a decision: %+v", stored)
				}
			} else if !stored.DecidedAt.Equal(ms(d.At)) || stored.DecidedBy != d.By || stored.Note != d.Note {
				t.Errorf("stored decision %+v, want %+v", stored, d)
			}
			ds := mustDeliveries(t, s)
			if want := map[bool]int{true: 1, false: 0}[tt.wantStatus == ApprovalApproved]; len(ds) != want {
				t.Errorf("%d deliveries, want %d", len(ds), want)
			}
			var wantKinds []string
			if tt.wantEvent != "" {
				wantKinds = []string{tt.wantEvent}
			}
			if got := kinds(allEvents(t, s)); !slices.Equal(got, wantKinds) {
				t.Errorf("events %q, want %q", got, wantKinds)
			}
		})
	}
}

func TestDecideConcurrently(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	const items, deciders = 6, 8
	for range items {
		a := mustAddApproval(t, s, sampleApproval(t0))
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, deciders)
		dls := make([]*Delivery, deciders)
		for i := range deciders {
			wg.Go(func() {
				d := Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: fmt.Sprintf("op-%d", i)}, At: t0}
				if i%2 == 1 {
					d.Status, d.SHA256, d.Reason = ApprovalRejected, "", "no"
				}
				<-start
				_, dls[i], errs[i] = s.Decide(ctx, d)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Errorf("%s: deciders %d and %d both succeeded", a.ID, winner, i)
				}
				winner = i
			case !errors.Is(err, ErrDecided):
				t.Errorf("%s: decider %d: %v, want ErrDecided", a.ID, i, err)
			}
			if err != nil && dls[i] != nil {
				t.Errorf("%s: decider %d failed but returned a delivery", a.ID, i)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: nobody succeeded", a.ID)
		}
		approved := winner%2 == 0
		stored := mustApproval(t, s, a.ID)
		if stored.DecidedBy.Name != fmt.Sprintf("op-%d", winner) || (stored.Status == ApprovalApproved) != approved {
			t.Errorf("%s: stored %q by %q; the winner was op-%d", a.ID, stored.Status, stored.DecidedBy, winner)
		}
		n := 0
		for _, d := range mustDeliveries(t, s) {
			if d.ApprovalID == a.ID {
				n++
			}
		}
		if want := map[bool]int{true: 1, false: 0}[approved]; n != want {
			t.Errorf("%s: %d deliveries, want %d", a.ID, n, want)
		}
		if evs := eventsFor(t, s, a.ID); len(evs) != 1 {
			t.Errorf("%s: %d events, want 1", a.ID, len(evs))
		}
	}
}

func TestDueForExpiryAndApprovals(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := t0
	mk := func(expires time.Time) *Approval {
		a := sampleApproval(now.Add(-time.Hour))
		a.ExpiresAt = expires
		return mustAddApproval(t, s, a)
	}
	past := mk(now.Add(-time.Minute))
	exact := mk(now)
	future := mk(now.Add(time.Millisecond))
	approved := mk(now.Add(time.Hour))
	rejected := mk(now.Add(-time.Hour)) // past due, but decided
	dropped := mk(now.Add(time.Hour))
	decide := func(a *Approval, st ApprovalStatus) {
		t.Helper()
		if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: st, SHA256: a.SHA256, By: Decider{Name: "alice"}, At: now.Add(-2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	decide(approved, ApprovalApproved)
	decide(rejected, ApprovalRejected)
	decide(dropped, ApprovalDropped)

	ids := func(as []Approval, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range as {
			out = append(out, a.ID)
		}
		return out
	}
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"due at now", ids(s.DueForExpiry(ctx, now)), []string{past.ID, exact.ID}},
		{"due a microsecond later", ids(s.DueForExpiry(ctx, now.Add(time.Microsecond))), []string{past.ID, exact.ID}},
		{"due a millisecond later", ids(s.DueForExpiry(ctx, now.Add(time.Millisecond))), []string{past.ID, exact.ID, future.ID}},
		{"due long ago", ids(s.DueForExpiry(ctx, now.Add(-24*time.Hour))), nil},
		{"all", ids(s.Approvals(ctx, "")), []string{past.ID, exact.ID, future.ID, approved.ID, rejected.ID, dropped.ID}},
		{"pending", ids(s.Approvals(ctx, ApprovalPending)), []string{past.ID, exact.ID, future.ID}},
		{"approved", ids(s.Approvals(ctx, ApprovalApproved)), []string{approved.ID}},
		{"rejected", ids(s.Approvals(ctx, ApprovalRejected)), []string{rejected.ID}},
		{"dropped", ids(s.Approvals(ctx, ApprovalDropped)), []string{dropped.ID}},
		{"expired", ids(s.Approvals(ctx, ApprovalExpired)), nil},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}

	// DueForExpiry and Decide agree on when an item expires: what is due
	// can no longer be approved, what is not due still can.
	due, err := s.DueForExpiry(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(due[1], *mustApproval(t, s, exact.ID)) {
		t.Errorf("DueForExpiry returned\n%+v\nApproval returned\n%+v", due[1], *mustApproval(t, s, exact.ID))
	}
	if _, _, err := s.Decide(ctx, Decision{ID: exact.ID, Status: ApprovalApproved, SHA256: exact.SHA256, By: Decider{Name: "alice"}, At: now}); !errors.Is(err, ErrExpired) {
		t.Errorf("approving an item due for expiry: %v, want ErrExpired", err)
	}
	if _, _, err := s.Decide(ctx, Decision{ID: future.ID, Status: ApprovalApproved, SHA256: future.SHA256, By: Decider{Name: "alice"}, At: now}); err != nil {
		t.Errorf("approving an item not yet due: %v", err)
	}
	if got := ids(s.Approvals(ctx, ApprovalExpired)); !reflect.DeepEqual(got, []string{exact.ID}) {
		t.Errorf("expired: %q", got)
	}
}

func TestEvents(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	long := bytes.Repeat([]byte("0123456789"), 300)
	in := []Event{
		{Time: t0, Kind: "refused", Agent: "researcher", Peer: "main", Code: "validation_failed", Detail: "topic: missing",
			Category: 2, Bits: 0, Ref: "q-1", Payload: long},
		{Time: t0.Add(time.Second), Kind: "exact", Payload: long[:MaxPayload]},
		{Time: t0.In(time.FixedZone("X", -7200)), Kind: "small", Payload: []byte{0, 1, 2, 0xff}, Bits: 12.75},
		{Kind: "bare"},
	}
	if err := s.AppendSync(ctx, in[0], in[1]); err != nil {
		t.Fatal(err)
	}
	s.Append(in[2])
	s.Append(in[3])
	s = reopen(t, s) // Append is committed by Close

	got := allEvents(t, s)
	if len(got) != len(in) {
		t.Fatalf("%d events, want %d", len(got), len(in))
	}
	for i, e := range got {
		want := in[i]
		want.Seq, want.Time = e.Seq, ms(want.Time)
		if len(want.Payload) > MaxPayload {
			want.Payload = want.Payload[:MaxPayload]
		}
		if i > 0 && e.Seq <= got[i-1].Seq {
			t.Errorf("event %d: Seq %d after %d", i, e.Seq, got[i-1].Seq)
		}
		if !reflect.DeepEqual(e, want) {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, e, want)
		}
	}
	if len(got[0].Payload) != MaxPayload {
		t.Errorf("payload of %d bytes kept as %d, want %d", len(long), len(got[0].Payload), MaxPayload)
	}
	if len(in[0].Payload) != len(long) {
		t.Error("Append truncated the caller's payload")
	}
	if rest, err := s.Events(ctx, got[len(got)-1].Seq, 10); err != nil || len(rest) != 0 {
		t.Errorf("events after the last: %v, %v", rest, err)
	}
	if err := s.AppendSync(ctx); err != nil {
		t.Errorf("AppendSync of nothing: %v", err)
	}
}

func TestEventsPaging(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	const n = 25
	for i := range n {
		ev := Event{Time: t0, Kind: fmt.Sprintf("e%02d", i)}
		if i%3 == 0 {
			s.Append(ev)
		} else if err := s.AppendSync(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	barrier(t, s)
	for _, limit := range []int{1, 7, 25, 100} {
		var seen []string
		var since int64
		pages := 0
		for {
			page, err := s.Events(ctx, since, limit)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(page))
			}
			if len(page) == 0 {
				break
			}
			pages++
			for _, e := range page {
				if e.Seq <= since {
					t.Fatalf("limit %d: Seq %d after cursor %d", limit, e.Seq, since)
				}
				since = e.Seq
				seen = append(seen, e.Kind)
			}
		}
		if len(seen) != n {
			t.Fatalf("limit %d: %d events, want %d", limit, len(seen), n)
		}
		for i, k := range seen {
			if k != fmt.Sprintf("e%02d", i) {
				t.Errorf("limit %d: event %d is %s", limit, i, k)
			}
		}
		if want := (n + limit - 1) / limit; pages != want {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, want)
		}
	}
}

// A reader tailing the events with its cursor while writers append sees
// every event exactly once: a Seq is never committed after a higher one.
func TestEventsTailWhileWriting(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	const writers, each = 8, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ev := Event{Kind: fmt.Sprintf("w%d-%d", w, i)}
				if i%2 == 0 {
					s.Append(ev)
				} else if err := s.AppendSync(ctx, ev); err != nil {
					t.Error(err)
				}
			}
		})
	}
	written := make(chan struct{})
	go func() {
		wg.Wait()
		barrier(t, s)
		close(written)
	}()
	seen := map[string]bool{}
	var since int64
	for done := false; ; {
		select {
		case <-written:
			done = true
		default:
		}
		page, err := s.Events(ctx, since, 16)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if e.Seq <= since {
				t.Fatalf("Seq %d after cursor %d", e.Seq, since)
			}
			if seen[e.Kind] {
				t.Fatalf("%s seen twice", e.Kind)
			}
			seen[e.Kind], since = true, e.Seq
		}
		if done && len(page) == 0 {
			break
		}
	}
	if len(seen) != writers*each {
		t.Errorf("saw %d events, want %d", len(seen), writers*each)
	}
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustAddApproval(t, s, sampleApproval(t0))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	d := sampleDelivery(1)
	if err := s.AddDelivery(ctx, d); !errors.Is(err, ErrClosed) {
		t.Errorf("AddDelivery after Close: %v, want ErrClosed", err)
	}
	if d.ID != "" || d.Seq != 0 || d.State != "" {
		t.Errorf("a refused AddDelivery changed its argument: %+v", d)
	}
	if err := s.AddApproval(ctx, sampleApproval(t0)); !errors.Is(err, ErrClosed) {
		t.Errorf("AddApproval after Close: %v, want ErrClosed", err)
	}
	if err := s.AppendSync(ctx, Event{Kind: "late"}); !errors.Is(err, ErrClosed) {
		t.Errorf("AppendSync after Close: %v, want ErrClosed", err)
	}
	if _, dl, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, At: t0}); !errors.Is(err, ErrClosed) || dl != nil {
		t.Errorf("Decide after Close: %v, %v, want ErrClosed", dl, err)
	}
	// Writes nobody waits for are dropped, without a panic.
	s.Append(Event{Kind: "late"})
	s.MarkAttempted("dl-x")
	s.FinishDelivery("dl-x", DeliveryDelivered, "", t0, Event{Kind: "late"})

	s = openT(t, s.Path())
	if n := len(allEvents(t, s)); n != 0 {
		t.Errorf("%d events written after Close", n)
	}
	if got := mustApproval(t, s, a.ID); got.Status != ApprovalPending {
		t.Errorf("Decide after Close changed the item to %q", got.Status)
	}
}

// Close while writers are busy: each write either returns nil and is
// stored, or returns ErrClosed and is not.
func TestCloseWhileWriting(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	const writers, each = 16, 50
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted = map[string]bool{}
		count    atomic.Int32
		warm     = make(chan struct{})
		warmOnce sync.Once
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				s.Append(Event{Kind: "async"})
				d := sampleDelivery(w*each + i)
				err := s.AddDelivery(ctx, d)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("AddDelivery: %v", err)
					return
				}
				mu.Lock()
				accepted[d.ID] = true
				mu.Unlock()
				if count.Add(1) == 20 {
					warmOnce.Do(func() { close(warm) })
				}
			}
		})
	}
	<-warm
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s = openT(t, s.Path())
	stored := map[string]bool{}
	for _, d := range mustDeliveries(t, s) {
		stored[d.ID] = true
	}
	if !reflect.DeepEqual(stored, accepted) {
		t.Errorf("%d deliveries stored, %d accepted", len(stored), len(accepted))
	}
}

// A caller that stops waiting (its context ends) must not race with the
// writer, and an error means nothing was stored.
func TestWriteWithEndedContext(t *testing.T) {
	t.Run("cancelled before the write runs", func(t *testing.T) {
		s := newStore(t)
		a := mustAddApproval(t, s, sampleApproval(t0))
		release := holdWriter(t, s)
		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			a   *Approval
			dl  *Delivery
			err error
		}
		decided := make(chan result, 1)
		added := make(chan error, 1)
		d := sampleDelivery(1)
		go func() {
			got, dl, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "alice"}, At: t0})
			decided <- result{got, dl, err}
		}()
		go func() { added <- s.AddDelivery(ctx, d) }()
		cancel()
		release()
		r := <-decided
		if err := <-added; err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("AddDelivery: %v, want nil or context.Canceled", err)
			}
			if d.ID != "" {
				t.Errorf("a failed AddDelivery changed its argument: %+v", d)
			}
		}
		s = reopen(t, s)
		stored := mustApproval(t, s, a.ID)
		ds := mustDeliveries(t, s)
		n := 0
		for _, x := range ds {
			if x.ApprovalID == "" {
				n++
			}
		}
		if (d.ID == "") != (n == 0) {
			t.Errorf("AddDelivery's answer and the store disagree: %d stored, ID %q", n, d.ID)
		}
		if r.err != nil {
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("Decide: %v, want nil or context.Canceled", r.err)
			}
			if r.dl != nil || stored.Status != ApprovalPending || len(ds) != n {
				t.Errorf("Decide failed, yet the item is %q and there are %d deliveries", stored.Status, len(ds))
			}
		} else if stored.Status != ApprovalApproved || r.dl == nil || len(ds) != n+1 {
			t.Errorf("Decide succeeded, yet the item is %q and there are %d deliveries", stored.Status, len(ds))
		}
	})
	t.Run("cancelled while the write runs", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(context.Background())
		started, hold := make(chan struct{}), make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- s.write(ctx, func(tx *wtx) error {
				close(started)
				<-hold
				return insertEvents(tx, []Event{{Kind: "ran"}})
			})
		}()
		<-started
		cancel()
		close(hold)
		// The write had started, so it is committed, and the caller hears
		// so rather than the context's error.
		if err := <-errc; err != nil {
			t.Errorf("write: %v, want nil", err)
		}
		if got := kinds(allEvents(t, s)); !reflect.DeepEqual(got, []string{"ran"}) {
			t.Errorf("events %q", got)
		}
	})
	t.Run("cancelled already", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for range 20 {
			if err := s.AddDelivery(ctx, sampleDelivery(1)); !errors.Is(err, context.Canceled) {
				t.Fatalf("AddDelivery: %v, want context.Canceled", err)
			}
		}
		if err := s.AppendSync(ctx, Event{Kind: "x"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("AppendSync: %v, want context.Canceled", err)
		}
		s = reopen(t, s)
		if n := len(mustDeliveries(t, s)); n != 0 {
			t.Errorf("%d deliveries stored by failed calls", n)
		}
		if n := len(allEvents(t, s)); n != 0 {
			t.Errorf("%d events stored by a failed call", n)
		}
	})
}

// Writes nobody waits for run later, on the writer goroutine: they must not
// read or change the caller's memory then.
func TestAsyncWritesOwnTheirEvents(t *testing.T) {
	s := newStore(t)
	d := sampleDelivery(1)
	if err := s.AddDelivery(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	release := holdWriter(t, s)
	buf := []byte("offending input")
	appended := []Event{{Kind: "refused", Payload: buf}}
	finished := []Event{{Kind: "delivery_sent"}}
	s.Append(appended...)
	s.FinishDelivery(d.ID, DeliveryDelivered, "ok", t0, finished...)
	copy(buf, "XXXXXXXXXXXXXXX") // the caller reuses its buffer
	appended[0].Kind = "changed"
	release()
	barrier(t, s)
	if finished[0].Ref != "" {
		t.Errorf("FinishDelivery changed the caller's event: Ref %q", finished[0].Ref)
	}
	evs := allEvents(t, s)
	if got := kinds(evs); !reflect.DeepEqual(got, []string{"refused", "delivery_sent"}) {
		t.Fatalf("events %q", got)
	}
	if string(evs[0].Payload) != "offending input" {
		t.Errorf("payload %q, want the one passed to Append", evs[0].Payload)
	}
	if evs[1].Ref != d.ID {
		t.Errorf("FinishDelivery's event has ref %q, want %q", evs[1].Ref, d.ID)
	}
}

func TestNewID(t *testing.T) {
	for _, tt := range []struct {
		prefix string
		n      int
	}{{"dl-", 16}, {"ap-", 8}, {"", 1}, {"x", 0}, {"long-prefix_", 64}} {
		seen := map[string]bool{}
		for range 200 {
			id := NewID(tt.prefix, tt.n)
			checkID(t, id, tt.prefix, tt.n)
			seen[id] = true
		}
		if tt.n >= 8 && len(seen) != 200 {
			t.Errorf("NewID(%q, %d): %d distinct ids of 200", tt.prefix, tt.n, len(seen))
		}
	}
	// Every character of the alphabet turns up.
	all := map[rune]bool{}
	for _, c := range NewID("", 4096) {
		all[c] = true
	}
	if len(all) != 32 {
		t.Errorf("%d distinct characters in 4096, want 32", len(all))
	}
}

func TestContentHash(t *testing.T) {
	for in, want := range map[string]string{
		"":    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
	} {
		if got := ContentHash([]byte(in)); got != want {
			t.Errorf("ContentHash(%q) = %s, want %s", in, got, want)
		}
	}
}
