package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

// seedDeliveries stores n pushes from researcher to main as if accepted by
// an earlier run, and returns them in acceptance order.
func seedDeliveries(t *testing.T, st *store.Store, n int) []store.Delivery {
	t.Helper()
	out := make([]store.Delivery, n)
	for i := range out {
		d := store.Delivery{Controller: "main", Reader: "researcher", SubscriptionID: "research-alerts", Category: 1,
			Response: json.RawMessage(`{"has_breaking_news":true,"priority":"low","score":1,"source":"web"}`), Bits: 6.9, CreatedAt: time.Now()}
		if err := st.AddDelivery(context.Background(), &d); err != nil {
			t.Fatal(err)
		}
		out[i] = d
	}
	return out
}

// failedBefore records n failures of delivery id, as earlier runs would
// have, and waits until they are durable.
func failedBefore(t *testing.T, st *store.Store, id string, n int) {
	t.Helper()
	for range n {
		st.RecordFailure(id)
	}
	// Writes commit in order: once this one is durable, so are those.
	if err := st.AppendSync(context.Background(), store.Event{Time: time.Now(), Kind: "test_barrier"}); err != nil {
		t.Fatal(err)
	}
}

func TestOutboxReadsABacklogLargerThanItsWindowInOrder(t *testing.T) {
	// More than three windows wait from an earlier run; the outbox holds
	// one window at a time and must still send each once, in order.
	n := 3*outboxWindow + 7
	var seeded []store.Delivery
	e := startE2E(t, pair(100000, 100000, "review", nil, nil), func(c *Config) {
		seeded = seedDeliveries(t, c.Store, n)
	})
	applied := e.waitRecords("main", "applied", n)
	got := e.records("main", "delivery")
	if len(got) != n || len(applied) != n {
		t.Fatalf("%d deliveries, %d applied; want %d each", len(got), len(applied), n)
	}
	for i, r := range got {
		if r.DeliveryID != seeded[i].ID {
			t.Fatalf("delivery %d is %s, want %s (acceptance order)", i, r.DeliveryID, seeded[i].ID)
		}
	}
	e.waitAllDelivered(n)
	if got := e.gw.backlog.pending(store.Pair{Controller: "main", Reader: "researcher"}); got != 0 {
		t.Errorf("backlog count after delivery = %d, want 0", got)
	}
}

func TestOutboxPastItsWindowWhileRunningLosesNothing(t *testing.T) {
	// main is slow, so the pushes pile up past the window while the
	// gateway runs: the surplus is read back from the store.
	n := 2*outboxWindow + 9
	e := startE2E(t, pair(1e9, 1e9, "review", map[string]string{"DELAY": "2ms"}, map[string]string{
		"PUBLISH": publishes(pub("research-alerts", "main", alert, n)),
	}), func(c *Config) { c.MaxBacklog = 10 * n })
	e.prompt("researcher", "go")
	e.waitRecords("main", "applied", n)
	e.waitAllDelivered(n)
	ds, err := e.store.Deliveries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := e.records("main", "delivery")
	if len(got) != n {
		t.Fatalf("%d deliveries sent, want %d", len(got), n)
	}
	for i, r := range got {
		if r.DeliveryID != ds[i].ID || r.Redelivered {
			t.Fatalf("delivery %d is %s (redelivered %v), want %s once (acceptance order)", i, r.DeliveryID, r.Redelivered, ds[i].ID)
		}
	}
}

func TestBacklogFullRefusesPushesAndChargesNothing(t *testing.T) {
	// main takes an hour over its first delivery: with a backlog of 2,
	// the third and later pushes are refused until it catches up.
	e := startE2E(t, pair(100000, 100000, "review", map[string]string{"DELAY": "1h"}, map[string]string{
		"PUBLISH": publishes(pub("research-alerts", "main", alert, 5)),
	}), func(c *Config) { c.MaxBacklog = 2 })
	e.prompt("researcher", "go")
	verdicts := e.waitRecords("researcher", "verdict", 5)
	accepted := 0
	for i, v := range verdicts {
		switch {
		case v.Success:
			accepted++
		case !strings.HasPrefix(v.Detail, string(bcp.BacklogFull)+": 'main' has 2 deliveries from 'researcher' still to acknowledge"):
			t.Errorf("verdict %d = %q, want backlog_full", i, v.Detail)
		}
	}
	if accepted != 2 {
		t.Errorf("%d pushes accepted, want 2 (the backlog limit)", accepted)
	}
	refused := e.waitEvent("refused", string(bcp.BacklogFull))
	if !testproc.CheckFor(testWait, pollStep, func() bool { return len(e.events("refused", string(bcp.BacklogFull))) == 3 }) {
		t.Errorf("backlog_full refusals audited: %d, want 3", len(e.events("refused", string(bcp.BacklogFull))))
	}
	if refused[0].Agent != "researcher" || refused[0].Peer != "main" || len(refused[0].Payload) == 0 {
		t.Errorf("refusal event %+v, want researcher -> main with the payload", refused[0])
	}
	// Only what was accepted was charged and stored.
	if got := len(e.events("publish_accepted", "")); got != 2 {
		t.Errorf("publish_accepted events = %d, want 2", got)
	}
	e.gw.mu.Lock()
	charged := e.gw.budgets.controller("main").bits["researcher"]
	e.gw.mu.Unlock()
	if charged < 13.7 || charged > 13.9 || refused[0].Bits != 0 {
		t.Errorf("main was charged %.2f bits (a refusal %.2f), want 13.8: two 6.9-bit alerts", charged, refused[0].Bits)
	}
}

func TestBacklogCountsFollowDeliveries(t *testing.T) {
	b := newBacklog(2)
	p := store.Pair{Controller: "main", Reader: "r"}
	if !b.reserve(p) || !b.reserve(p) || b.reserve(p) {
		t.Fatal("want two reservations, then a refusal")
	}
	b.add(p) // an answer or an approved item is never refused
	if b.pending(p) != 3 {
		t.Fatalf("pending = %d, want 3", b.pending(p))
	}
	b.done(store.Delivery{Controller: "main", Reader: "r"})
	b.release(p)
	if !b.reserve(p) {
		t.Error("a place freed by a delivery was not given to the next push")
	}
	for range 5 {
		b.release(p)
	}
	if len(b.n) != 0 {
		t.Errorf("counts left after release: %v, want none", b.n)
	}
}

func TestPoisonDeliveryIsParkedThenRetriedByAnOperator(t *testing.T) {
	// The first delivery has already failed 9 times (earlier runs); main's
	// first process dies on it again: it is parked, the one behind it is
	// delivered, and an operator's retry delivers it too.
	var seeded []store.Delivery
	e := startE2E(t, pair(100000, 100000, "review", map[string]string{"CRASH_AT": "1"}, nil), func(c *Config) {
		seeded = seedDeliveries(t, c.Store, 2)
		failedBefore(t, c.Store, seeded[0].ID, MaxDeliveryFailures-1)
	})
	parked := e.waitEvent("delivery_parked", "")
	if parked[0].Ref != seeded[0].ID || !strings.Contains(parked[0].Detail, "bcpgw deliveries") {
		t.Errorf("delivery_parked event %+v, want ref %s and how to act on it", parked[0], seeded[0].ID)
	}
	applied := e.waitRecords("main", "applied", 1)
	if applied[0].DeliveryID != seeded[1].ID {
		t.Fatalf("applied %+v, want the second delivery past the parked one", applied)
	}
	var d *store.Delivery
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		var err error
		d, err = e.store.Delivery(context.Background(), seeded[0].ID)
		return err == nil && d.State == store.DeliveryParked
	}) {
		t.Fatalf("first delivery = %+v, want parked", d)
	}
	if d.Failures != MaxDeliveryFailures {
		t.Errorf("failures = %d, want %d", d.Failures, MaxDeliveryFailures)
	}
	b, err := e.store.BacklogCounts(context.Background())
	if err != nil || b.Parked != 1 {
		t.Errorf("backlog = %+v, %v; want 1 parked", b, err)
	}

	// Only parked deliveries are the operator's.
	ctx := context.Background()
	if _, err := e.gw.RetryDelivery(ctx, seeded[1].ID, store.Decider{Name: "alice"}); !errors.Is(err, store.ErrNotParked) {
		t.Errorf("retry of a delivered delivery: %v, want ErrNotParked", err)
	}
	if _, err := e.gw.DiscardDelivery(ctx, "dl-nope", store.Decider{Name: "alice"}, ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("discard of an unknown delivery: %v, want ErrNotFound", err)
	}
	if _, err := e.gw.RetryDelivery(ctx, seeded[0].ID, store.Decider{Name: "alice", UID: 1000, PID: 42}); err != nil {
		t.Fatal(err)
	}
	applied = e.waitRecords("main", "applied", 2)
	if applied[1].DeliveryID != seeded[0].ID {
		t.Errorf("applied %+v, want the retried delivery last", applied)
	}
	ev := e.waitEvent("delivery_requeued", "")
	if ev[0].Ref != seeded[0].ID || ev[0].Agent != "main" || !strings.Contains(ev[0].Detail, "alice (uid 1000, pid 42)") {
		t.Errorf("delivery_requeued event %+v", ev[0])
	}
	e.waitAllDelivered(2)
}

func TestDiscardedDeliveryIsDroppedWithWhoAndWhy(t *testing.T) {
	var seeded []store.Delivery
	e := startE2E(t, pair(100000, 100000, "review", map[string]string{"CRASH_AT": "1"}, nil), func(c *Config) {
		seeded = seedDeliveries(t, c.Store, 1)
		failedBefore(t, c.Store, seeded[0].ID, MaxDeliveryFailures-1)
	})
	e.waitEvent("delivery_parked", "")
	d, err := e.gw.DiscardDelivery(context.Background(), seeded[0].ID, store.Decider{Name: "bob"}, "poison")
	if err != nil {
		t.Fatal(err)
	}
	if d.State != store.DeliveryDropped || d.DoneDetail != "discarded by bob: poison" {
		t.Errorf("discarded delivery = %+v", d)
	}
	if _, err := e.gw.RetryDelivery(context.Background(), seeded[0].ID, store.Decider{Name: "bob"}); !errors.Is(err, store.ErrNotParked) {
		t.Errorf("retry after discard: %v, want ErrNotParked", err)
	}
	e.waitEvent("delivery_discarded", "")
}

// A session an operator stops did not fail the delivery it held: even at
// its last allowed failure, the delivery is not parked.
func TestOperatorStopIsNotADeliveryFailure(t *testing.T) {
	var seeded []store.Delivery
	e := startE2E(t, pair(100000, 100000, "review", map[string]string{"DELAY": "1h"}, nil), func(c *Config) {
		seeded = seedDeliveries(t, c.Store, 1)
		failedBefore(t, c.Store, seeded[0].ID, MaxDeliveryFailures-1)
	})
	e.waitRecords("main", "delivery", 1) // main holds it
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if err := e.gw.Supervisor().Stop(ctx, "main", "operator"); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("session_stopped", "")
	// Sent again to the next session, which holds it too.
	e.waitRecords("main", "delivery", 2)
	if err := e.store.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := e.store.Delivery(ctx, seeded[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != store.DeliveryPending || d.Failures != MaxDeliveryFailures-1 {
		t.Errorf("after an operator's stop: state %s, failures %d; want pending, %d", d.State, d.Failures, MaxDeliveryFailures-1)
	}
	if evs := e.events("delivery_parked", ""); len(evs) != 0 {
		t.Errorf("parked after an operator's stop: %+v", evs)
	}
}

// A delivery queued behind another turn was never shown to the runtime:
// if the session ends first, it is neither counted as sent nor failed.
func TestDeliveryQueuedBehindATurnIsNotSent(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", map[string]string{"DELAY": "1h"}, nil), nil)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	sess, err := e.gw.Supervisor().Ensure(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	// A first turn that main holds for an hour: a delivery as testrt sees it.
	first := forController(sess, runtime.ResponseDelivery{Type: runtime.TypeResponseDelivery, SubscriptionID: "research-alerts",
		Category: 1, FromAgent: "researcher", Response: json.RawMessage(`{"has_breaking_news":true,"priority":"low","score":1,"source":"web"}`),
		DeliveryID: "dl-first", Prompt: "first"})
	if _, err := sess.Turn(ctx, first); err != nil {
		t.Fatal(err)
	}
	e.waitRecords("main", "delivery", 1)
	sent, done, err := sess.TurnSent(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: "queued"})
	if err != nil {
		t.Fatal(err)
	}
	sess.Kill()
	select {
	case err := <-done:
		if !errors.Is(err, session.ErrSessionClosed) {
			t.Errorf("queued turn ended with %v, want session.ErrSessionClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("the queued turn never ended")
	}
	select {
	case <-sent:
		t.Error("a turn that waited behind another was reported sent")
	default:
	}
}

// The courier's backoff goes on across deliveries until one is
// acknowledged, as it did before the retry moved into redeliver: a
// delivery parked or dropped does not make the next one's first retry
// come after a second again.
func TestRedeliverBackoffGoesOnAcrossDeliveries(t *testing.T) {
	g := &Gateway{log: hclog.NewNullLogger()}
	first, next := store.Delivery{ID: "dl-1", Controller: "main"}, store.Delivery{ID: "dl-2", Controller: "main"}
	c := &courier{controller: "main", queue: []store.Delivery{first, next}}
	unavailable := errors.New("agent failed")
	for n := range 3 {
		wait, again := g.redeliver(c, &first, false, unavailable)
		if !again || wait != session.Backoff(n) {
			t.Fatalf("retry %d of the first: %v, %v; want %v, true", n, wait, again, session.Backoff(n))
		}
	}
	c.pop() // the first is dropped or parked
	wait, again := g.redeliver(c, &next, false, unavailable)
	if !again || wait != session.Backoff(3) {
		t.Errorf("first retry of the next delivery: %v, %v; want %v, true", wait, again, session.Backoff(3))
	}
	if first.Failures != 0 || next.Failures != 0 {
		t.Errorf("sends that never reached the runtime counted as failures: %d, %d", first.Failures, next.Failures)
	}
}

// A newer push may replace a pending delivery only while its courier has
// not passed it. Once the runtime acknowledged it (pop), the delivery is
// still pending in the store until the courier's finish, a write nobody
// waits for, is committed, and a replacing transaction queued before that
// write finds it so: claim must refuse it, or a delivery the Controller
// applied would be recorded superseded (its Reader told it was not
// delivered, its backlog counted down twice).
func TestClaimRefusesADeliveryTheCourierPassed(t *testing.T) {
	g := &Gateway{log: hclog.NewNullLogger()}
	o := &outbox{g: g, couriers: map[string]*courier{}}
	c := &courier{controller: "main", wake: make(chan struct{}, 1)}
	o.couriers["main"] = c
	o.enqueue(store.Delivery{ID: "dl-1", Controller: "main", Seq: 1})
	o.enqueue(store.Delivery{ID: "dl-2", Controller: "main", Seq: 2})
	if d, ok := g.head(testCtx(t), c); !ok || d.ID != "dl-1" {
		t.Fatalf("head = %s, %v; want dl-1", d.ID, ok)
	}
	if o.claim("main", "dl-1", 1) {
		t.Error("claimed the delivery on its way to the runtime")
	}
	c.pop() // acknowledged; its finish is not committed yet
	if o.claim("main", "dl-1", 1) {
		t.Error("claimed a delivery the runtime acknowledged")
	}
	if !o.claim("main", "dl-2", 2) {
		t.Error("could not claim a delivery still queued")
	}
	if !o.claim("main", "dl-3", 3) {
		t.Error("could not claim a delivery the courier has not read yet")
	}
}

// A claim made by a write the store rolled back and runs again (a group
// commit with a failing write) holds on the second run, although the
// courier has passed the claimed delivery meanwhile: it passed it because
// of the claim, and a refusal would deliver it after the push replacing it.
func TestClaimHoldsWhenTheWriteRunsAgain(t *testing.T) {
	g := &Gateway{log: hclog.NewNullLogger()}
	o := &outbox{g: g, couriers: map[string]*courier{}}
	c := &courier{controller: "main", wake: make(chan struct{}, 1)}
	o.couriers["main"] = c
	o.enqueue(store.Delivery{ID: "dl-x", Controller: "main", Seq: 1})
	o.enqueue(store.Delivery{ID: "dl-y", Controller: "main", Seq: 2})
	if !o.claim("main", "dl-x", 1) {
		t.Fatal("could not claim the queued head")
	}
	if d, ok := g.head(testCtx(t), c); !ok || d.ID != "dl-y" {
		t.Fatalf("head = %s, %v; want dl-y (dl-x is claimed)", d.ID, ok)
	}
	if !o.claim("main", "dl-x", 1) {
		t.Error("the second run of the write could not claim what the first claimed")
	}
}

// The courier passes over a head being superseded (claimed) and takes it
// out under the same lock: the writer's dropSuperseded, which takes it out
// of the queue too, may come in between, and a pop after it took out the
// delivery behind instead (or panicked on an empty queue). The window is
// short: the loop gives the two goroutines many chances to meet in it.
func TestCourierPassingASupersededHeadKeepsTheNext(t *testing.T) {
	g := &Gateway{log: hclog.NewNullLogger()}
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel() // head returns at once when the queue is empty
	x, y := store.Delivery{ID: "dl-x", Controller: "main", Seq: 1}, store.Delivery{ID: "dl-y", Controller: "main", Seq: 2}
	for i := range 10000 {
		o := &outbox{g: g, couriers: map[string]*courier{}}
		c := &courier{controller: "main", wake: make(chan struct{}, 1)}
		o.couriers["main"] = c
		o.enqueue(x)
		o.enqueue(y)
		if !o.claim("main", x.ID, x.Seq) {
			t.Fatal("could not claim the queued head")
		}
		dropped := make(chan struct{})
		go func() {
			defer close(dropped)
			o.dropSuperseded(x)
		}()
		d, ok := g.head(ctx, c)
		<-dropped
		if !ok || d.ID != y.ID {
			t.Fatalf("round %d: head = %q, %v; want %s, the delivery behind the superseded one", i, d.ID, ok, y.ID)
		}
	}
}
