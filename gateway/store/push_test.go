package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
)

// Tests of the push policy transaction (push.go): debounce and batching.

// addPush stores d under p with AddPushThen and waits for its outcome.
func addPush(t testing.TB, s *Store, d Delivery, p PushPolicy, events ...Event) PushOutcome {
	t.Helper()
	type res struct {
		out PushOutcome
		err error
	}
	ch := make(chan res, 1)
	s.AddPushThen(d, p, events, func(out PushOutcome, err error) { ch <- res{out, err} })
	r := <-ch
	if r.err != nil {
		t.Fatalf("AddPushThen(%s): %v", d.ID, r.err)
	}
	return r.out
}

// closeBatchNow closes batch id at at with CloseBatchThen and waits.
func closeBatchNow(t testing.TB, s *Store, id string, at time.Time) *Delivery {
	t.Helper()
	type res struct {
		d   *Delivery
		err error
	}
	ch := make(chan res, 1)
	s.CloseBatchThen(id, at, Event{Time: at, Kind: "batch_closed", Detail: "window passed"}, func(d *Delivery, err error) { ch <- res{d, err} })
	r := <-ch
	if r.err != nil {
		t.Fatalf("CloseBatchThen(%s): %v", id, r.err)
	}
	return r.d
}

func mustOpenBatches(t testing.TB, s *Store) []OpenBatch {
	t.Helper()
	bs, err := s.OpenBatches(context.Background())
	if err != nil {
		t.Fatalf("OpenBatches: %v", err)
	}
	return bs
}

// push is a Cat-1 push of "topics" from researcher to main, about topic,
// accepted at t0+at, costing bits.
func push(id, topic string, at time.Duration, bits float64) Delivery {
	return Delivery{
		ID: id, Controller: "main", Reader: "researcher", SubscriptionID: "topics", Category: bcp.Cat1,
		Response: json.RawMessage(fmt.Sprintf(`{"topic":%q,"score":1}`, topic)), Anomalies: []bcp.Anomaly{},
		Bits: bits, CreatedAt: t0.Add(at),
	}
}

// debounced is the policy the gateway gives a push of topic accepted at
// t0+at with a window of 10 minutes; claim says whether a pending push may
// still be replaced.
func debounced(topic string, at time.Duration, claim func(string, int64) bool) PushPolicy {
	now := t0.Add(at)
	return PushPolicy{
		Entity: fmt.Sprintf("%q", topic), Since: now.Add(-10 * time.Minute), Claim: claim,
		Supersede: Event{Time: now, Kind: "push_superseded", Agent: "researcher", Peer: "main", Category: 1},
	}
}

func accepted(ref string, at time.Duration) Event {
	return Event{Time: t0.Add(at), Kind: "publish_accepted", Agent: "researcher", Peer: "main", Ref: ref}
}

func claimAll(string, int64) bool { return true }

// pendingIDs are the ids of the pending deliveries, in order.
func pendingIDs(t testing.TB, s *Store) []string {
	t.Helper()
	ds, err := s.PendingDeliveries(context.Background())
	if err != nil {
		t.Fatalf("PendingDeliveries: %v", err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.ID)
	}
	return ids
}

// pendingPushes is the backlog of main from researcher, in pushes.
func pendingPushes(t testing.TB, s *Store) int {
	t.Helper()
	m, err := s.PendingByPair(context.Background())
	if err != nil {
		t.Fatalf("PendingByPair: %v", err)
	}
	return m[Pair{Controller: "main", Reader: "researcher"}]
}

// TestDebounceReplacesPending: a debounced push replaces, in the
// transaction that stores it, the pending push of the same key accepted
// within the window: superseded, with a push_superseded event naming it
// (Ref) and its bits, and the newer push stored pending.
func TestDebounceReplacesPending(t *testing.T) {
	s := newStore(t)
	addPush(t, s, push("dl-old", "a", 0, 3.5), debounced("a", 0, claimAll), accepted("dl-old", 0))
	var asked []string
	var seq int64
	claim := func(id string, s int64) bool { asked, seq = append(asked, id), s; return true }
	out := addPush(t, s, push("dl-new", "a", time.Minute, 4), debounced("a", time.Minute, claim), accepted("dl-new", time.Minute))

	if out.Superseded == nil || out.Superseded.ID != "dl-old" || out.Superseded.State != DeliverySuperseded {
		t.Fatalf("Superseded = %+v, want dl-old superseded", out.Superseded)
	}
	if !slices.Equal(asked, []string{"dl-old"}) {
		t.Errorf("Claim asked about %v, want [dl-old]", asked)
	}
	if want := mustDelivery(t, s, "dl-old").Seq; seq != want {
		t.Errorf("Claim was given seq %d, want dl-old's, %d", seq, want)
	}
	if out.Delivery.ID != "dl-new" || out.Delivery.State != DeliveryPending || out.Delivery.Entity != `"a"` || out.Closed != nil || out.Opened {
		t.Errorf("Delivery = %+v, want dl-new pending with entity \"a\", no batch", out.Delivery)
	}
	old := mustDelivery(t, s, "dl-old")
	if old.State != DeliverySuperseded || !old.DoneAt.Equal(ms(t0.Add(time.Minute))) || old.DoneDetail != "superseded by dl-new" {
		t.Errorf("stored dl-old = %s at %v (%q), want superseded at t0+1m by dl-new", old.State, old.DoneAt, old.DoneDetail)
	}
	nd := mustDelivery(t, s, "dl-new")
	if nd.State != DeliveryPending || nd.Entity != `"a"` || nd.Bits != 4 || string(nd.Response) != `{"topic":"a","score":1}` {
		t.Errorf("stored dl-new = %+v, want pending, entity \"a\", 4 bits", nd)
	}
	evs := eventsFor(t, s, "dl-old")
	if got := kinds(evs); !slices.Equal(got, []string{"publish_accepted", "push_superseded"}) {
		t.Fatalf("events about dl-old: %v, want publish_accepted, push_superseded", got)
	}
	sup := evs[1]
	if sup.Bits != 3.5 || sup.Agent != "researcher" || sup.Peer != "main" || !strings.Contains(sup.Detail, "dl-new") {
		t.Errorf("push_superseded = %+v, want dl-old's 3.5 bits and a detail naming dl-new", sup)
	}
	if got := kinds(eventsFor(t, s, "dl-new")); !slices.Equal(got, []string{"publish_accepted"}) {
		t.Errorf("events about dl-new: %v, want publish_accepted", got)
	}
	// The backlog is the newer push alone.
	if got := pendingIDs(t, s); !slices.Equal(got, []string{"dl-new"}) {
		t.Errorf("PendingDeliveries = %v, want [dl-new]", got)
	}
	if n := pendingPushes(t, s); n != 1 {
		t.Errorf("PendingByPair = %d, want 1", n)
	}
}

// TestDebounceLeavesOthers: a debounced push replaces nothing outside the
// window, of another key, of another subscription or reader, already
// delivered, or that Claim keeps (handed to the runtime).
func TestDebounceLeavesOthers(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, s *Store)     // after dl-old is stored
		edit  func(d *Delivery, p *PushPolicy) // the newer push
	}{
		{"outside the window", nil, func(d *Delivery, p *PushPolicy) {
			d.CreatedAt = t0.Add(10*time.Minute + time.Millisecond)
			p.Since = d.CreatedAt.Add(-10 * time.Minute)
		}},
		{"another key", nil, func(d *Delivery, p *PushPolicy) { p.Entity = `"b"` }},
		{"another subscription", nil, func(d *Delivery, p *PushPolicy) { d.SubscriptionID = "other" }},
		{"another reader", nil, func(d *Delivery, p *PushPolicy) { d.Reader = "reader-2" }},
		{"already delivered", func(t *testing.T, s *Store) {
			s.FinishDelivery("dl-old", DeliveryDelivered, "", t0.Add(time.Second))
			barrier(t, s)
		}, nil},
		{"parked", func(t *testing.T, s *Store) {
			s.FinishDelivery("dl-old", DeliveryParked, "", t0.Add(time.Second))
			barrier(t, s)
		}, nil},
		{"in flight (Claim says no)", nil, func(d *Delivery, p *PushPolicy) { p.Claim = func(string, int64) bool { return false } }},
		{"no Claim", nil, func(d *Delivery, p *PushPolicy) { p.Claim = nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			addPush(t, s, push("dl-old", "a", 0, 3.5), debounced("a", 0, claimAll))
			if c.setup != nil {
				c.setup(t, s)
			}
			before := mustDelivery(t, s, "dl-old").State
			d, p := push("dl-new", "a", time.Minute, 4), debounced("a", time.Minute, claimAll)
			if c.edit != nil {
				c.edit(&d, &p)
			}
			out := addPush(t, s, d, p)
			if out.Superseded != nil {
				t.Errorf("Superseded = %s, want none", out.Superseded.ID)
			}
			if got := mustDelivery(t, s, "dl-old").State; got != before {
				t.Errorf("dl-old is %s, want still %s", got, before)
			}
			if got := mustDelivery(t, s, "dl-new").State; got != DeliveryPending {
				t.Errorf("dl-new is %s, want pending", got)
			}
			if evs := eventsFor(t, s, "dl-old"); slices.Contains(kinds(evs), "push_superseded") {
				t.Errorf("events about dl-old: %v, want no push_superseded", kinds(evs))
			}
		})
	}
}

// TestDebounceReplacesNewestOnly: of two pending pushes of a key (the
// older one kept because it was in flight), the newest is replaced.
func TestDebounceReplacesNewestOnly(t *testing.T) {
	s := newStore(t)
	no := func(string, int64) bool { return false }
	addPush(t, s, push("dl-1", "a", 0, 1), debounced("a", 0, claimAll))
	addPush(t, s, push("dl-2", "a", time.Second, 1), debounced("a", time.Second, no)) // dl-1 in flight
	out := addPush(t, s, push("dl-3", "a", 2*time.Second, 1), debounced("a", 2*time.Second, claimAll))
	if out.Superseded == nil || out.Superseded.ID != "dl-2" {
		t.Fatalf("Superseded = %+v, want dl-2", out.Superseded)
	}
	for id, want := range map[string]DeliveryState{"dl-1": DeliveryPending, "dl-2": DeliverySuperseded, "dl-3": DeliveryPending} {
		if got := mustDelivery(t, s, id).State; got != want {
			t.Errorf("%s is %s, want %s", id, got, want)
		}
	}
}

// batched is the policy of a push into its subscription's open batch.
func batched(max, maxBytes int, at time.Duration) PushPolicy {
	return PushPolicy{
		Batch: true, BatchMax: max, BatchMaxBytes: maxBytes,
		Close: Event{Time: t0.Add(at), Kind: "batch_closed", Detail: "its max reached"},
	}
}

// TestBatchHoldsAndCloses: batched pushes are held in one open batch; the
// window closing it (CloseBatchThen) makes one pending delivery with the
// batch's id, holding the pushes in the order accepted, bits summed; the
// pushes become batched and the next push opens a new batch.
func TestBatchHoldsAndCloses(t *testing.T) {
	s := newStore(t)
	var batch string
	bits := []float64{1.5, 2, 3.25}
	for i, b := range bits {
		at := time.Duration(i) * time.Second
		out := addPush(t, s, push(fmt.Sprintf("dl-%d", i), fmt.Sprint(i), at, b), batched(10, 1<<20, at), accepted(fmt.Sprintf("dl-%d", i), at))
		if i == 0 {
			batch = out.Delivery.BatchID
			if !out.Opened || batch == "" {
				t.Fatalf("first push: Opened %v, batch %q; want a batch opened", out.Opened, batch)
			}
		} else if out.Opened || out.Delivery.BatchID != batch {
			t.Errorf("push %d: Opened %v, batch %q; want held in %s", i, out.Opened, out.Delivery.BatchID, batch)
		}
		if out.Delivery.State != DeliveryHeld || out.Closed != nil || out.Superseded != nil {
			t.Errorf("push %d: %+v, want held, nothing closed", i, out)
		}
	}
	if got := pendingIDs(t, s); len(got) != 0 {
		t.Errorf("PendingDeliveries while the batch is open: %v, want none", got)
	}
	if n := pendingPushes(t, s); n != 3 {
		t.Errorf("PendingByPair while the batch is open = %d, want its 3 pushes", n)
	}
	if bs := mustOpenBatches(t, s); len(bs) != 1 || bs[0].ID != batch || bs[0].Items != 3 || !bs[0].Opened.Equal(ms(t0)) ||
		bs[0].Controller != "main" || bs[0].Reader != "researcher" || bs[0].SubscriptionID != "topics" {
		t.Errorf("OpenBatches = %+v, want %s with 3 items opened at t0", bs, batch)
	}

	at := t0.Add(5 * time.Minute)
	b := closeBatchNow(t, s, batch, at)
	if b == nil {
		t.Fatal("CloseBatchThen closed nothing")
	}
	check := func(what string, b *Delivery) {
		t.Helper()
		var ids []string
		for i, it := range b.Items {
			ids = append(ids, it.ID)
			if it.Bits != bits[i] || it.AcceptedAt != ms(t0.Add(time.Duration(i)*time.Second)).UnixMilli() {
				t.Errorf("%s: item %d = %+v, want %v bits accepted at t0+%ds", what, i, it, bits[i], i)
			}
		}
		if b.ID != batch || b.State != DeliveryPending || b.Bits != 6.75 || !ms(b.CreatedAt).Equal(ms(at)) ||
			!slices.Equal(ids, []string{"dl-0", "dl-1", "dl-2"}) || b.Weight() != 3 {
			t.Errorf("%s: batch %s %s, %v bits at %v, items %v; want %s pending, 6.75 bits at t0+5m, dl-0..2", what, b.ID, b.State, b.Bits, b.CreatedAt, ids, batch)
		}
		if want := `[{"topic":"0","score":1},{"topic":"1","score":1},{"topic":"2","score":1}]`; string(b.Response) != want {
			t.Errorf("%s: response %s, want %s", what, b.Response, want)
		}
	}
	check("returned", b)
	check("stored", mustDelivery(t, s, batch))
	if got := pendingIDs(t, s); !slices.Equal(got, []string{batch}) {
		t.Errorf("PendingDeliveries after closing = %v, want the batch alone", got)
	}
	if n := pendingPushes(t, s); n != 3 {
		t.Errorf("PendingByPair after closing = %d, want the batch's 3 pushes", n)
	}
	for i := range bits {
		if d := mustDelivery(t, s, fmt.Sprintf("dl-%d", i)); d.State != DeliveryBatched || d.BatchID != batch {
			t.Errorf("dl-%d is %s in %q, want batched in %s", i, d.State, d.BatchID, batch)
		}
	}
	evs := eventsFor(t, s, batch)
	if len(evs) != 1 || evs[0].Kind != "batch_closed" || evs[0].Bits != 6.75 || !strings.Contains(evs[0].Detail, "3 pushes") {
		t.Errorf("events about the batch: %+v, want one batch_closed of 3 pushes, 6.75 bits", evs)
	}
	if bs := mustOpenBatches(t, s); len(bs) != 0 {
		t.Errorf("OpenBatches after closing = %+v, want none", bs)
	}
	if again := closeBatchNow(t, s, batch, at.Add(time.Second)); again != nil {
		t.Errorf("closing it again made %+v, want nothing", again)
	}
	out := addPush(t, s, push("dl-next", "x", 6*time.Minute, 1), batched(10, 1<<20, 6*time.Minute))
	if !out.Opened || out.Delivery.BatchID == batch || out.Delivery.BatchID == "" {
		t.Errorf("a push after the close: Opened %v, batch %q; want a new batch", out.Opened, out.Delivery.BatchID)
	}
}

// TestBatchClosedByMax: the push that makes max closes the batch in its
// own transaction (Closed), with the Close event.
func TestBatchClosedByMax(t *testing.T) {
	s := newStore(t)
	var outs []PushOutcome
	for i := range 3 {
		at := time.Duration(i) * time.Second
		outs = append(outs, addPush(t, s, push(fmt.Sprintf("dl-%d", i), "x", at, 1), batched(3, 1<<20, at)))
	}
	if outs[0].Closed != nil || outs[1].Closed != nil {
		t.Fatalf("closed before max: %+v, %+v", outs[0].Closed, outs[1].Closed)
	}
	b := outs[2].Closed
	if b == nil || b.ID != outs[0].Delivery.BatchID || len(b.Items) != 3 || b.State != DeliveryPending || b.Bits != 3 {
		t.Fatalf("the third push closed %+v, want the batch of 3", b)
	}
	if evs := eventsFor(t, s, b.ID); len(evs) != 1 || evs[0].Kind != "batch_closed" || !strings.Contains(evs[0].Detail, "its max reached") {
		t.Errorf("events about the batch: %+v, want batch_closed with the Close event's detail", evs)
	}
	if bs := mustOpenBatches(t, s); len(bs) != 0 {
		t.Errorf("OpenBatches = %+v, want none", bs)
	}
}

// TestBatchClosedBySize: a batch whose responses reach BatchMaxBytes (the
// gateway's 256 KiB) is closed by the push that makes it, whatever max.
func TestBatchClosedBySize(t *testing.T) {
	s := newStore(t)
	const maxBytes = 256 << 10
	big := strings.Repeat("x", 100<<10)
	var outs []PushOutcome
	for i := range 3 {
		at := time.Duration(i) * time.Second
		d := push(fmt.Sprintf("dl-%d", i), big, at, 1)
		outs = append(outs, addPush(t, s, d, batched(1000, maxBytes, at)))
	}
	if outs[0].Closed != nil || outs[1].Closed != nil {
		t.Fatalf("closed under 256 KiB")
	}
	if b := outs[2].Closed; b == nil || len(b.Items) != 3 || b.ID != outs[0].Delivery.BatchID {
		t.Fatalf("the push past 256 KiB closed %+v, want the batch of 3", b)
	}
	out := addPush(t, s, push("dl-3", "small", 3*time.Second, 1), batched(1000, maxBytes, 3*time.Second))
	if !out.Opened || out.Closed != nil {
		t.Errorf("the next push: %+v, want a new batch opened", out)
	}
}

// TestBatchWithDebounce: with both, a newer push of a key replaces the
// one held in the open batch, which then holds the newest of each key;
// the batch's window still runs from its first push, superseded or not,
// and is read back so after a restart (a real file, reopened).
func TestBatchWithDebounce(t *testing.T) {
	s := newStore(t)
	both := func(topic string, at time.Duration) PushPolicy {
		p := debounced(topic, at, func(id string, _ int64) bool {
			t.Errorf("Claim asked about %s: a held push needs no claim", id)
			return false
		})
		b := batched(10, 1<<20, at)
		p.Batch, p.BatchMax, p.BatchMaxBytes, p.Close = b.Batch, b.BatchMax, b.BatchMaxBytes, b.Close
		return p
	}
	first := addPush(t, s, push("dl-a1", "a", 0, 2), both("a", 0))
	addPush(t, s, push("dl-b", "b", time.Second, 3), both("b", time.Second))
	out := addPush(t, s, push("dl-a2", "a", 2*time.Second, 5), both("a", 2*time.Second))
	batch := first.Delivery.BatchID
	if out.Superseded == nil || out.Superseded.ID != "dl-a1" || out.Delivery.BatchID != batch || out.Delivery.State != DeliveryHeld {
		t.Fatalf("dl-a2: %+v, want dl-a1 superseded and dl-a2 held in %s", out, batch)
	}
	if evs := eventsFor(t, s, "dl-a1"); len(evs) != 1 || evs[0].Kind != "push_superseded" || evs[0].Bits != 2 {
		t.Errorf("events about dl-a1: %+v, want push_superseded of 2 bits", evs)
	}

	s = reopen(t, s)
	bs := mustOpenBatches(t, s)
	if len(bs) != 1 || bs[0].ID != batch || bs[0].Items != 2 || !bs[0].Opened.Equal(ms(t0)) {
		t.Fatalf("OpenBatches after reopening = %+v, want %s with 2 items, opened at t0 (its superseded first push)", bs, batch)
	}
	b := closeBatchNow(t, s, batch, t0.Add(time.Hour))
	if b == nil {
		t.Fatal("CloseBatchThen after reopening closed nothing")
	}
	var ids []string
	for _, it := range b.Items {
		ids = append(ids, it.ID)
	}
	if !slices.Equal(ids, []string{"dl-b", "dl-a2"}) || b.Bits != 8 {
		t.Errorf("batch items %v, %v bits; want [dl-b dl-a2], 8 bits", ids, b.Bits)
	}
	if d := mustDelivery(t, s, "dl-a1"); d.State != DeliverySuperseded {
		t.Errorf("dl-a1 is %s after the close, want still superseded", d.State)
	}
}

// TestOpenBatchesAfterReopen: each subscription's open batch survives a
// restart with its first push's time and its pushes, oldest first; a
// closed one is not listed.
func TestOpenBatchesAfterReopen(t *testing.T) {
	s := newStore(t)
	on := func(sub, id string, at time.Duration) Delivery {
		d := push(id, "x", at, 1)
		d.SubscriptionID = sub
		return d
	}
	a := addPush(t, s, on("topics", "dl-1", 0), batched(10, 1<<20, 0))
	b := addPush(t, s, on("scores", "dl-2", 3*time.Second), batched(10, 1<<20, 3*time.Second))
	addPush(t, s, on("topics", "dl-3", 4*time.Second), batched(10, 1<<20, 4*time.Second))
	addPush(t, s, on("full", "dl-4", 5*time.Second), batched(2, 1<<20, 5*time.Second))
	if out := addPush(t, s, on("full", "dl-5", 6*time.Second), batched(2, 1<<20, 6*time.Second)); out.Closed == nil {
		t.Fatal("the batch of full was not closed at its max")
	}
	s = reopen(t, s)
	got := mustOpenBatches(t, s)
	want := []OpenBatch{
		{ID: a.Delivery.BatchID, Controller: "main", Reader: "researcher", SubscriptionID: "topics", Opened: ms(t0), Items: 2},
		{ID: b.Delivery.BatchID, Controller: "main", Reader: "researcher", SubscriptionID: "scores", Opened: ms(t0.Add(3 * time.Second)), Items: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("OpenBatches after reopening = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].SubscriptionID != want[i].SubscriptionID || got[i].Items != want[i].Items ||
			!got[i].Opened.Equal(want[i].Opened) || got[i].Controller != want[i].Controller || got[i].Reader != want[i].Reader {
			t.Errorf("OpenBatches[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	// A push after the restart joins the open batch, not a new one.
	if out := addPush(t, s, on("topics", "dl-6", time.Minute), batched(10, 1<<20, time.Minute)); out.Opened || out.Delivery.BatchID != a.Delivery.BatchID {
		t.Errorf("a push after reopening: Opened %v in %q, want held in %s", out.Opened, out.Delivery.BatchID, a.Delivery.BatchID)
	}
}
