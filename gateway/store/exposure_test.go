package store

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// exposureLog is a gateway's life in events: two sessions of main (the
// first crashes with a delivery unacknowledged, which is re-sent to the
// second), a Reader's session, and deliveries to "late", whose session
// started before the log did.
func exposureLog() []Event {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	return []Event{
		{Time: at(0), Kind: "session_started", Agent: "main", Ref: "ses-1"},
		{Time: at(1), Kind: "session_started", Agent: "researcher", Ref: "ses-r"},
		{Time: at(2), Kind: "publish_accepted", Agent: "researcher", Peer: "main", Category: 2, Bits: 10},
		{Time: at(3), Kind: "delivery_sent", Agent: "main", Peer: "researcher", Category: 2, Bits: 10, Ref: "dl-1"},
		{Time: at(4), Kind: "delivery_sent", Agent: "main", Peer: "researcher", Category: 2, Bits: 10, Ref: "dl-2"},
		{Time: at(5), Kind: "delivery_sent", Agent: "main", Peer: "watcher", Category: 1, Bits: 1.5, Ref: "dl-3"},
		{Time: at(6), Kind: "delivery_sent", Agent: "main", Peer: "researcher", Category: 2, Bits: 10, Ref: "dl-4"},
		{Time: at(7), Kind: "session_crashed", Agent: "main", Ref: "ses-1"},
		{Time: at(8), Kind: "session_started", Agent: "main", Ref: "ses-2"},
		{Time: at(9), Kind: "delivery_retried", Agent: "main", Peer: "researcher", Category: 2, Bits: 10, Ref: "dl-4"},
		{Time: at(10), Kind: "delivery_sent", Agent: "late", Peer: "researcher", Category: 3, Bits: 4, Ref: "dl-5"},
		{Time: at(11), Kind: "session_stopped", Agent: "main", Ref: "ses-2"},
		{Time: at(12), Kind: "session_stopped", Agent: "main", Ref: "ses-unknown"},
	}
}

func wantExposureLog() []SessionExposure {
	at := func(m int) time.Time { return ms(t0.Add(time.Duration(m) * time.Minute)) }
	return []SessionExposure{
		{Agent: "main", Session: "ses-1", StartedAt: at(0), EndedAt: at(7), Channels: []ChannelExposure{
			{Reader: "researcher", Category: 2, Deliveries: 3, Bits: 30},
			{Reader: "watcher", Category: 1, Deliveries: 1, Bits: 1.5},
		}},
		{Agent: "researcher", Session: "ses-r", StartedAt: at(1)},
		{Agent: "main", Session: "ses-2", StartedAt: at(8), EndedAt: at(11), Channels: []ChannelExposure{
			{Reader: "researcher", Category: 2, Deliveries: 1, Bits: 10},
		}},
		{Agent: "late", StartedAt: at(10), Channels: []ChannelExposure{
			{Reader: "researcher", Category: 3, Deliveries: 1, Bits: 4},
		}},
	}
}

func mustExposure(t *testing.T, s *Store, agent string) []SessionExposure {
	t.Helper()
	got, err := s.Exposure(context.Background(), agent)
	if err != nil {
		t.Fatalf("Exposure(%q): %v", agent, err)
	}
	return got
}

func TestExposureFollowsTheEvents(t *testing.T) {
	s := newStore(t)
	s.Append(exposureLog()...)
	barrier(t, s)
	want := wantExposureLog()
	if got := mustExposure(t, s, ""); !reflect.DeepEqual(got, want) {
		t.Errorf("Exposure = %+v\nwant %+v", got, want)
	}
	if got := mustExposure(t, s, "main"); !reflect.DeepEqual(got, []SessionExposure{want[0], want[2]}) {
		t.Errorf("Exposure(main) = %+v", got)
	}
	if got := mustExposure(t, s, "nobody"); len(got) != 0 {
		t.Errorf("Exposure(nobody) = %+v", got)
	}
	// The figures outlive the events.
	if _, err := s.Prune(context.Background(), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := len(allEvents(t, s)); n != 0 {
		t.Fatalf("%d events left after pruning them all", n)
	}
	if got := mustExposure(t, s, ""); !reflect.DeepEqual(got, want) {
		t.Errorf("after pruning the events: Exposure = %+v\nwant %+v", got, want)
	}
	s = reopen(t, s)
	if got := mustExposure(t, s, ""); !reflect.DeepEqual(got, want) {
		t.Errorf("after reopening: Exposure = %+v\nwant %+v", got, want)
	}
}

// A write that fails takes its exposure with it: the figures are in its
// savepoint.
func TestExposureRolledBackWithItsWrite(t *testing.T) {
	s := newStore(t)
	s.Append(Event{Time: t0, Kind: "session_started", Agent: "main", Ref: "ses-1"})
	failed := errors.New("failed")
	err := s.write(context.Background(), func(tx *wtx) error {
		if err := insertEvents(tx, []Event{{Time: t0, Kind: "delivery_sent", Agent: "main", Peer: "r", Category: 2, Bits: 5}}); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("write = %v", err)
	}
	got := mustExposure(t, s, "main")
	if len(got) != 1 || len(got[0].Channels) != 0 {
		t.Errorf("Exposure after a failed write = %+v, want one session sent nothing", got)
	}
}

// A state file from before the exposure tables gets them filled from its
// events when it is opened.
func TestExposureFromEventsStoredBeforeIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db := rawDB(t, path)
	for _, name := range []string{"migrations/0001_init.sql", "migrations/0002_deciders.sql"} {
		body, err := migrations.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(string(body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range exposureLog() {
		if _, err := db.Exec(`INSERT INTO events (time, kind, agent, peer, category, bits, ref) VALUES (?,?,?,?,?,?,?)`,
			millis(e.Time), e.Kind, e.Agent, e.Peer, e.Category, e.Bits, e.Ref); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`PRAGMA user_version = 2`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	page := backfillPage
	backfillPage = 4 // several pages
	t.Cleanup(func() { backfillPage = page })
	s := openT(t, path)
	if got, want := mustExposure(t, s, ""), wantExposureLog(); !reflect.DeepEqual(got, want) {
		t.Errorf("Exposure after migrating = %+v\nwant %+v", got, want)
	}
	// And it goes on from there.
	s.Append(Event{Time: t0.Add(time.Hour), Kind: "session_started", Agent: "main", Ref: "ses-3"},
		Event{Time: t0.Add(time.Hour), Kind: "delivery_sent", Agent: "main", Peer: "researcher", Category: 2, Bits: 10})
	barrier(t, s)
	got := mustExposure(t, s, "main")
	if len(got) != 3 || got[2].Session != "ses-3" || len(got[2].Channels) != 1 || got[2].Channels[0].Bits != 10 {
		t.Errorf("Exposure(main) after more events = %+v", got)
	}
}

// A send recorded late, after the session that got it ended and the next
// one started (the outbox records a failed send when it learns of the
// failure), counts for the session in progress at its time.
func TestExposureOfASendRecordedLate(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "state.db"))
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	if err := s.AppendSync(context.Background(),
		Event{Time: at(0), Kind: "session_started", Agent: "main", Ref: "ses-1"},
		Event{Time: at(2), Kind: "session_crashed", Agent: "main", Ref: "ses-1"},
		Event{Time: at(3), Kind: "session_started", Agent: "main", Ref: "ses-2"},
		Event{Time: at(1), Kind: "delivery_sent", Agent: "main", Peer: "researcher", Category: 2, Bits: 10, Ref: "dl-1"},
	); err != nil {
		t.Fatal(err)
	}
	got := mustExposure(t, s, "main")
	if len(got) != 2 || len(got[0].Channels) != 1 || got[0].Channels[0].Bits != 10 || len(got[1].Channels) != 0 {
		t.Errorf("exposure = %+v, want the 10 bits in ses-1 (sent at minute 1), none in ses-2", got)
	}
}
