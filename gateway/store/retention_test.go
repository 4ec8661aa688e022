package store

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

type pruneRound struct {
	r      PruneResult
	before time.Time
	err    error
}

func ids[T any](items []T, id func(T) string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = id(it)
	}
	slices.Sort(out)
	return out
}

func TestRetentionPrunesWhatFinishedBeforeTheCutoff(t *testing.T) {
	const day = 24 * time.Hour
	s := newStore(t)
	ctx := context.Background()
	add := func(at time.Time) string {
		d := sampleDelivery(1)
		d.CreatedAt = at
		if err := s.AddDelivery(ctx, d, Event{Time: at, Kind: "publish_accepted", Agent: d.Reader, Peer: d.Controller}); err != nil {
			t.Fatal(err)
		}
		return d.ID
	}
	finish := func(id string, state DeliveryState, at time.Time) {
		s.FinishDelivery(id, state, "", at, Event{Time: at, Kind: "delivery_" + string(state), Agent: "main"})
	}
	decide := func(a *Approval, at time.Time) {
		if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalRejected, By: Decider{Name: "alice"}, Reason: "no", At: at}); err != nil {
			t.Fatal(err)
		}
	}
	// In the order of their times, as a gateway stores them.
	s.Append(Event{Time: t0, Kind: "session_started", Agent: "main", Ref: "ses-1"})
	delivered, dropped, pending := add(t0), add(t0), add(t0)
	oldDecided, stillPending := mustAddApproval(t, s, sampleApproval(t0)), mustAddApproval(t, s, sampleApproval(t0))
	recentDecided := mustAddApproval(t, s, sampleApproval(t0))
	s.Append(Event{Time: t0, Kind: "delivery_sent", Agent: "main", Peer: "researcher", Category: 2, Bits: 671.5, Ref: delivered})
	decide(oldDecided, t0.Add(30*time.Minute))
	finish(delivered, DeliveryDelivered, t0.Add(time.Hour))
	finish(dropped, DeliveryDropped, t0.Add(2*time.Hour))
	s.Append(Event{Time: t0.Add(day), Kind: "reload_ok"})
	recent := add(t0.Add(2 * day))
	finish(recent, DeliveryDelivered, t0.Add(2*day))
	decide(recentDecided, t0.Add(2*day))
	s.Append(Event{Time: t0.Add(3 * day), Kind: "reload_ok"})
	barrier(t, s)
	before := allEvents(t, s)
	exposure := mustExposure(t, s, "")

	clk := clock.NewFake(t0.Add(10 * day))
	rounds := make(chan pruneRound, 1)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Retention{Keep: 30 * day, Interval: time.Hour, Clock: clk,
			Pruned: func(r PruneResult, before time.Time, err error) { rounds <- pruneRound{r, before, err} }}.Run(rctx, s)
	}()
	t.Cleanup(func() { cancel(); <-done })

	// At once: nothing is 30 days old yet.
	if got := <-rounds; got.err != nil || got.r.Total() != 0 || !got.before.Equal(t0.Add(-20*day)) {
		t.Errorf("first round = %+v, want nothing pruned before %v", got, t0.Add(-20*day))
	}
	if !testproc.CheckFor(testproc.Wait, testproc.Poll, func() bool { return clk.PendingFor(time.Hour) }) {
		t.Errorf("next round not in the interval, 1h")
	}
	// 31 days and 2 hours on: what finished in the first day goes.
	clk.Advance(21*day + 2*time.Hour)
	cutoff := t0.Add(day + 2*time.Hour)
	got := <-rounds
	if got.err != nil || !got.before.Equal(cutoff) {
		t.Fatalf("second round = %+v, want a cutoff of %v", got, cutoff)
	}
	var wantEvents int64
	for _, e := range before {
		if e.Time.Before(cutoff) {
			wantEvents++
		}
	}
	if want := (PruneResult{Deliveries: 2, Approvals: 1, Events: wantEvents}); got.r != want {
		t.Errorf("second round pruned %+v, want %+v", got.r, want)
	}
	if got, want := ids(mustDeliveries(t, s), func(d Delivery) string { return d.ID }), ids([]string{pending, recent}, strings.Clone); !reflect.DeepEqual(got, want) {
		t.Errorf("deliveries left %v, want the pending one and the recent one %v", got, want)
	}
	approvals, err := s.Approvals(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(approvals, func(a Approval) string { return a.ID }), ids([]string{stillPending.ID, recentDecided.ID}, strings.Clone); !reflect.DeepEqual(got, want) {
		t.Errorf("approvals left %v, want the pending one and the recent one %v", got, want)
	}
	barrier(t, s)
	left := allEvents(t, s)
	// The round is recorded after what it kept.
	if len(left) == 0 || left[len(left)-1].Kind != "retention_pruned" || !left[len(left)-1].Time.Equal(ms(clk.Now())) ||
		!strings.Contains(left[len(left)-1].Detail, fmt.Sprintf("2 deliveries, 1 approval items, %d events", wantEvents)) {
		t.Errorf("last event %+v, want retention_pruned saying what went", left[len(left)-1])
	}
	left = left[:len(left)-1]
	if len(left) == 0 || len(left) != len(before)-int(wantEvents) {
		t.Fatalf("%d events left of %d, want %d", len(left), len(before), len(before)-int(wantEvents))
	}
	for _, e := range left {
		if e.Time.Before(cutoff) {
			t.Errorf("event %d of %v kept, older than the cutoff %v", e.Seq, e.Time, cutoff)
		}
	}
	if pb, err := s.EventsPrunedBefore(ctx); err != nil || pb != left[0].Seq {
		t.Errorf("EventsPrunedBefore = %d, %v; want the oldest kept, %d", pb, err, left[0].Seq)
	}
	// The report's figures are still there.
	if got := mustExposure(t, s, ""); !reflect.DeepEqual(got, exposure) {
		t.Errorf("exposure after pruning = %+v, want %+v", got, exposure)
	}
	// Sequence numbers go on from the last one ever given.
	if err := s.AppendSync(ctx, Event{Time: clk.Now(), Kind: "reload_ok"}); err != nil {
		t.Fatal(err)
	}
	if all := allEvents(t, s); all[len(all)-1].Seq != before[len(before)-1].Seq+2 {
		t.Errorf("new event seq %d, want %d (after retention_pruned)", all[len(all)-1].Seq, before[len(before)-1].Seq+2)
	}
}

func TestRetentionOffWhenKeepIsZero(t *testing.T) {
	s := newStore(t)
	s.Append(Event{Time: t0, Kind: "reload_ok"})
	barrier(t, s)
	Retention{Keep: 0}.Run(context.Background(), s) // returns at once
	if n := len(allEvents(t, s)); n != 1 {
		t.Errorf("%d events, want 1", n)
	}
}

// A large backlog is pruned in commits of pruneBatch rows of each kind.
func TestPruneInBatches(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const n = 2*pruneBatch + 234
	burst(t, s, n) // n deliveries and n events
	for _, d := range mustDeliveries(t, s) {
		s.FinishDelivery(d.ID, DeliveryDelivered, "", t0, Event{Time: t0, Kind: "delivery_acked"})
	}
	barrier(t, s)
	r, err := s.pruneBatch(ctx, t0.Add(time.Hour), pruneBatch)
	if err != nil || r != (PruneResult{Deliveries: pruneBatch, Events: pruneBatch}) {
		t.Fatalf("one batch = %+v, %v; want %d deliveries and events", r, err, pruneBatch)
	}
	r, err = s.Prune(ctx, t0.Add(time.Hour))
	if err != nil || r != (PruneResult{Deliveries: n - pruneBatch, Events: 2*n - pruneBatch}) {
		t.Fatalf("Prune = %+v, %v; want the rest: %d deliveries, %d events", r, err, n-pruneBatch, 2*n-pruneBatch)
	}
	if got := countRows(t, s, "deliveries") + countRows(t, s, "events"); got != 0 {
		t.Errorf("%d rows left", got)
	}
}

// Only a prefix of the log is pruned: an old event stored after a newer
// one waits for it, so that the events kept are all those from some seq
// on and a cursor is either complete or told what it missed.
func TestPruneKeepsAPrefixOfTheLog(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	cutoff := t0.Add(time.Hour)
	s.Append(Event{Time: t0, Kind: "a"}, Event{Time: cutoff, Kind: "b"}, Event{Time: t0, Kind: "c"})
	barrier(t, s)
	if r, err := s.Prune(ctx, cutoff); err != nil || r.Events != 1 {
		t.Fatalf("Prune = %+v, %v; want 1 event", r, err)
	}
	left := allEvents(t, s)
	if len(left) != 2 || left[0].Kind != "b" || left[0].Seq != 2 {
		t.Errorf("left %+v, want b and c", left)
	}
	if pb, err := s.EventsPrunedBefore(ctx); err != nil || pb != 2 {
		t.Errorf("EventsPrunedBefore = %d, %v; want 2", pb, err)
	}
}

func TestEventSeqStaysMonotonicWhenEverythingIsPruned(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if pb, err := s.EventsPrunedBefore(ctx); err != nil || pb != 0 {
		t.Errorf("EventsPrunedBefore on a new store = %d, %v; want 0", pb, err)
	}
	s.Append(Event{Time: t0, Kind: "a"}, Event{Time: t0, Kind: "b"})
	barrier(t, s)
	if pb, err := s.EventsPrunedBefore(ctx); err != nil || pb != 0 {
		t.Errorf("EventsPrunedBefore with nothing pruned = %d, %v; want 0", pb, err)
	}
	if _, err := s.Prune(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if pb, err := s.EventsPrunedBefore(ctx); err != nil || pb != 3 {
		t.Errorf("EventsPrunedBefore with all pruned = %d, %v; want 3", pb, err)
	}
	s = reopen(t, s)
	if err := s.AppendSync(ctx, Event{Time: t0, Kind: "c"}); err != nil {
		t.Fatal(err)
	}
	if got := allEvents(t, s); len(got) != 1 || got[0].Seq != 3 {
		t.Errorf("events after reopening = %+v, want c with seq 3", got)
	}
	if last, err := s.LastEventSeq(ctx); err != nil || last != 3 {
		t.Errorf("LastEventSeq = %d, %v", last, err)
	}
}

// Sessions of the report that ended long ago and were sent nothing go;
// those that were sent something, and each agent's last, stay.
func TestPruneSessionsSentNothing(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	s.Append(
		Event{Time: at(0), Kind: "session_started", Agent: "main", Ref: "ses-empty"},
		Event{Time: at(1), Kind: "session_stopped", Agent: "main", Ref: "ses-empty"},
		Event{Time: at(2), Kind: "session_started", Agent: "main", Ref: "ses-sent"},
		Event{Time: at(3), Kind: "delivery_sent", Agent: "main", Peer: "r", Category: 1, Bits: 2},
		Event{Time: at(4), Kind: "session_stopped", Agent: "main", Ref: "ses-sent"},
		Event{Time: at(5), Kind: "session_started", Agent: "main", Ref: "ses-running"},
		Event{Time: at(6), Kind: "session_started", Agent: "helper", Ref: "ses-last"},
		Event{Time: at(7), Kind: "session_stopped", Agent: "helper", Ref: "ses-last"},
	)
	barrier(t, s)
	r, err := s.Prune(ctx, at(60))
	if err != nil || r.Sessions != 1 {
		t.Fatalf("Prune = %+v, %v; want 1 session", r, err)
	}
	got := ids(mustExposure(t, s, ""), func(e SessionExposure) string { return e.Session })
	if want := []string{"ses-last", "ses-running", "ses-sent"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sessions left %v, want %v", got, want)
	}
}

// The pruning statements find their rows through indexes (or the rowid):
// a gateway keeps millions of recent rows, and pruning must not read them
// all, or sort them, each round.
func TestPruneUsesIndexes(t *testing.T) {
	s := newStore(t)
	for _, tt := range []struct {
		q    string
		args []any
		want string
	}{
		{sqlPruneDeliveries, []any{5, 10}, "USING INDEX deliveries_finished"},
		{sqlPruneApprovals, []any{5, 10}, "USING INDEX approvals_decided"},
		{sqlPruneEvents, []any{10, 5, 10}, "SCAN events"},
		// Sessions are scanned (a row per session, not per delivery),
		// each looked up in exposure by its key.
		{sqlPruneSessions, []any{5, 10}, "SEARCH e USING PRIMARY KEY (session=?)"},
	} {
		rows, err := s.rdb.Query(`EXPLAIN QUERY PLAN `+tt.q, tt.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		p := strings.Join(plan, "; ")
		if !strings.Contains(p, tt.want) || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("plan of %s:\n%s\nwant %q, and no sorting", tt.q, p, tt.want)
		}
	}
}
