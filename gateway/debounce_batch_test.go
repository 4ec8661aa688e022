package gateway

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// debounceBatchPair is main and researcher with a debounced subscription
// (keyed: by topic, within 10 minutes) and a batched one (batched: 5
// minutes or 5 pushes). main takes delay to apply each delivery, so that
// pushes queue behind the first. Sessions never idle out.
func debounceBatchPair(delay, publish string) []agentSpec {
	const mainFront = `tools: [BCPQuery]
idle_timeout: 0
turn_timeout: 24h
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 100000
    subscriptions:
      - id: keyed
        category: 1
        debounce: {key: topic, window: 10m}
        fields:
          - {name: topic, type: enum, values: [a, b, c]}
          - {name: score, type: integer, min: 1, max: 5}
      - id: batched
        category: 1
        batch: {window: 5m, max: 5}
        fields:
          - {name: n, type: integer, min: 0, max: 1023}`
	const readerFront = `tools: [BCPPublish]
idle_timeout: 0
turn_timeout: 24h
bcp_channels:
  - peer: main
    role: reader
    max_category: 2
    budget_bits: 100000`
	return []agentSpec{
		{name: "main", front: mainFront, env: map[string]string{"DELAY": delay}},
		{name: "researcher", front: readerFront, env: map[string]string{"PUBLISH": publish}},
	}
}

// TestDebounceReplacesAPendingPush: while main applies the first push
// (topic a), three pushes on topic b arrive: each replaces the one before,
// which was still pending. main gets a and the last b only; the two
// replaced are superseded (with events naming the newer push), their
// Reader heard which one each verdict replaced, and both budgets are
// charged for the two delivered pushes only.
func TestDebounceReplacesAPendingPush(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	publish := publishes(
		pub("keyed", "main", `{"topic": "a", "score": 1}`, 1),
		pub("keyed", "main", `{"topic": "b", "score": 1}`, 1),
		pub("keyed", "main", `{"topic": "b", "score": 2}`, 1),
		pub("keyed", "main", `{"topic": "b", "score": 3}`, 1),
	)
	e := startE2E(t, debounceBatchPair("1500ms", publish), func(c *Config) { c.Clock = clk })
	e.prompt("researcher", "go")
	vs := e.waitRecords("researcher", "verdict", 4)
	applied := e.waitRecords("main", "applied", 2)
	e.waitCount("delivery_acked", "", 2)

	ds := e.deliveries()
	if len(ds) != 4 {
		t.Fatalf("%d deliveries stored, want 4", len(ds))
	}
	for i, want := range []store.DeliveryState{store.DeliveryDelivered, store.DeliverySuperseded, store.DeliverySuperseded, store.DeliveryDelivered} {
		if ds[i].State != want {
			t.Errorf("delivery %d (%s) is %s, want %s", i, ds[i].Response, ds[i].State, want)
		}
	}
	for i, v := range vs {
		want := ""
		if i >= 2 {
			want = ds[i-1].ID
		}
		if !v.Success || v.Superseded != want || (want != "" && !strings.Contains(v.Detail, "superseded "+want)) {
			t.Errorf("verdict %d = %+v, want success superseding %q", i, v, want)
		}
	}
	for i, want := range []string{`{"topic":"a","score":1}`, `{"topic":"b","score":3}`} {
		if string(applied[i].Response) != want {
			t.Errorf("applied %d = %s, want %s", i, applied[i].Response, want)
		}
	}
	if n := len(e.records("main", "delivery")); n != 2 {
		t.Errorf("main was sent %d deliveries, want 2", n)
	}
	ev := e.events("push_superseded", "")
	if len(ev) != 2 || ev[0].Ref != ds[1].ID || !strings.Contains(ev[0].Detail, "superseded by "+ds[2].ID) || ev[1].Ref != ds[2].ID {
		t.Errorf("push_superseded events %+v", ev)
	}
	// What was charged is what reached main: two pushes.
	bits := ds[0].Bits
	e.gw.mu.Lock()
	c := e.gw.budgets.controller("main").bits["researcher"]
	var r float64
	for _, l := range e.gw.budgets.readers {
		r += l.bits["main"]
	}
	e.gw.mu.Unlock()
	if math.Abs(c-2*bits) > 1e-9 || math.Abs(r-2*bits) > 1e-9 {
		t.Errorf("charged %v to main's pool and %v to researcher's, want %v each", c, r, 2*bits)
	}
	if n := e.gw.backlog.pending(store.Pair{Controller: "main", Reader: "researcher"}); n != 0 {
		t.Errorf("backlog %d after everything was delivered, want 0", n)
	}
	// The subscription's figures say the same: four accepted, two of them
	// superseded, two delivered, the bits of two.
	if err := e.gw.cfg.Store.Flush(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	figs, err := e.gw.cfg.Store.SubscriptionFigures(testCtx(t), "main")
	if err != nil || len(figs) != 1 {
		t.Fatalf("figures = %+v, %v", figs, err)
	}
	if f := figs[0]; f.ID != "keyed" || f.Accepted != 4 || f.Superseded != 2 || f.Delivered != 2 || math.Abs(f.Bits-2*bits) > 1e-9 {
		t.Errorf("figures of keyed = %+v, want 4 accepted, 2 superseded, 2 delivered, %v bits", f, 2*bits)
	}
}

// TestDebounceWindow: a push accepted more than the window ago is not
// replaced, even if it is still pending.
func TestDebounceWindow(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	publish := publishes(
		pub("keyed", "main", `{"topic": "a", "score": 1}`, 1),
		pub("keyed", "main", `{"topic": "b", "score": 1}`, 1),
	)
	e := startE2E(t, debounceBatchPair("2s", publish), func(c *Config) { c.Clock = clk })
	e.prompt("researcher", "go")
	e.waitRecords("researcher", "verdict", 2)
	// main's session, started for the first push, is past its ready
	// timeout (30s on this clock) once it has the push: the jump of ten
	// minutes must not fail its start.
	e.waitRecords("main", "delivery", 1)
	clk.Advance(10*time.Minute + time.Millisecond)
	e.prompt("researcher", "publish")
	vs := e.waitRecords("researcher", "verdict", 4)
	if vs[2].Superseded != "" || vs[3].Superseded != "" {
		t.Errorf("a push older than the window was replaced: %+v", vs)
	}
	e.waitRecords("main", "applied", 4)
}

// batchedPushes is n pushes on batched, {"n": 0} to {"n": n-1}.
func batchedPushes(n int) string {
	ps := make([]map[string]any, n)
	for i := range ps {
		ps[i] = pub("batched", "main", `{"n": `+strconv.Itoa(i)+`}`, 1)
	}
	return publishes(ps...)
}

// TestBatchOfFiveIsOneTurn: five pushes fill the batch (max 5): main gets
// one delivery, one turn, holding the five in order, at once (the window
// has not passed); each push was charged on its own.
func TestBatchOfFiveIsOneTurn(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	e := startE2E(t, debounceBatchPair("", batchedPushes(5)), func(c *Config) { c.Clock = clk })
	e.prompt("researcher", "go")
	vs := e.waitRecords("researcher", "verdict", 5)
	for i, v := range vs {
		if !v.Success || !strings.Contains(v.Detail, "held in batch dl-") {
			t.Errorf("verdict %d = %+v", i, v)
		}
	}
	got := e.waitRecords("main", "delivery", 1)
	e.waitCount("delivery_acked", "", 1)
	if len(got) != 1 {
		t.Fatalf("main got %d deliveries, want 1", len(got))
	}
	var items []map[string]int
	if err := json.Unmarshal(got[0].Response, &items); err != nil || len(items) != 5 {
		t.Fatalf("batch response %s: %v", got[0].Response, err)
	}
	for i, it := range items {
		if it["n"] != i {
			t.Errorf("item %d = %v, want n %d", i, it, i)
		}
	}
	if !strings.Contains(got[0].Prompt, "a batch of 5 pushes on subscription batched") || !strings.Contains(got[0].Prompt, "Push 5 of 5") {
		t.Errorf("prompt:\n%s", got[0].Prompt)
	}
	if n := len(e.records("main", "prompt")); n != 0 {
		t.Errorf("main had %d other turns", n)
	}
	ds := e.deliveries()
	var batch store.Delivery
	batched := 0
	for _, d := range ds {
		switch {
		case len(d.Items) > 0:
			batch = d
		case d.State == store.DeliveryBatched:
			batched++
		}
	}
	if batched != 5 || len(batch.Items) != 5 || batch.State != store.DeliveryDelivered || batch.ID != got[0].DeliveryID {
		t.Errorf("stored: %d batched pushes, batch %+v", batched, batch)
	}
	if math.Abs(batch.Bits-5*10) > 1e-9 { // log2(1024) = 10 bits a push
		t.Errorf("batch bits %v, want 50", batch.Bits)
	}
	if n := e.gw.backlog.pending(store.Pair{Controller: "main", Reader: "researcher"}); n != 0 {
		t.Errorf("backlog %d after the batch was acknowledged, want 0", n)
	}
	if ev := e.events("batch_closed", ""); len(ev) != 1 || !strings.Contains(ev[0].Detail, "max of 5") {
		t.Errorf("batch_closed events %+v", ev)
	}
}

// waitTimer waits until something waits for d on clk.
func waitTimer(t *testing.T, clk *clock.Fake, d time.Duration) {
	t.Helper()
	if !testproc.CheckFor(testWait, pollStep, func() bool { return clk.PendingFor(d) }) {
		t.Fatalf("nothing waits for %s", d)
	}
}

// TestBatchWindow: two pushes wait until the window from the first has
// passed on the gateway's clock, not a second less.
func TestBatchWindow(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	e := startE2E(t, debounceBatchPair("", batchedPushes(2)), func(c *Config) { c.Clock = clk })
	e.prompt("researcher", "go")
	e.waitRecords("researcher", "verdict", 2)
	waitTimer(t, clk, 5*time.Minute)
	clk.Advance(5*time.Minute - time.Second)
	time.Sleep(300 * time.Millisecond)
	if n := len(e.records("main", "delivery")); n != 0 {
		t.Fatalf("main got %d deliveries before the window passed", n)
	}
	clk.Advance(time.Second)
	got := e.waitRecords("main", "delivery", 1)
	if string(got[0].Response) != `[{"n":0},{"n":1}]` {
		t.Errorf("batch %s", got[0].Response)
	}
}

// TestBatchWindowSurvivesRestart: a batch open when the gateway stops is
// in the store; the next run closes it when what was left of its window
// has passed (2 of 5 minutes), not a new window.
func TestBatchWindowSurvivesRestart(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	set, vars := writeAgents(t, dir, debounceBatchPair("", batchedPushes(3)))
	e := runE2E(t, dir, set, vars, func(c *Config) { c.Clock = clk })
	e.prompt("researcher", "go")
	e.waitRecords("researcher", "verdict", 3)
	waitTimer(t, clk, 5*time.Minute)
	e.stop()

	clk.Advance(3 * time.Minute)
	e2 := runE2E(t, dir, set, vars, func(c *Config) { c.Clock = clk })
	waitTimer(t, clk, 2*time.Minute)
	if n := len(e2.records("main", "delivery")); n != 0 {
		t.Fatalf("main got %d deliveries before the window passed", n)
	}
	clk.Advance(2 * time.Minute)
	got := e2.waitRecords("main", "delivery", 1)
	if string(got[0].Response) != `[{"n":0},{"n":1},{"n":2}]` {
		t.Errorf("batch %s", got[0].Response)
	}
	e2.waitCount("delivery_acked", "", 1)
	if n := e2.gw.backlog.pending(store.Pair{Controller: "main", Reader: "researcher"}); n != 0 {
		t.Errorf("backlog %d after the batch was acknowledged, want 0", n)
	}
}

// TestDebounceWithinBatch: with both, a push replaces the one with the
// same key in the open batch; the batch holds the newest of each key.
func TestDebounceWithinBatch(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	specs := debounceBatchPair("", publishes(
		pub("keyed", "main", `{"topic": "a", "score": 1}`, 1),
		pub("keyed", "main", `{"topic": "b", "score": 1}`, 1),
		pub("keyed", "main", `{"topic": "a", "score": 5}`, 1),
	))
	specs[0].front = strings.Replace(specs[0].front, "debounce: {key: topic, window: 10m}", "debounce: {key: topic, window: 10m}\n        batch: {window: 1m, max: 3}", 1)
	e := startE2E(t, specs, func(c *Config) { c.Clock = clk })
	e.prompt("researcher", "go")
	vs := e.waitRecords("researcher", "verdict", 3)
	if vs[2].Superseded == "" {
		t.Errorf("verdict %+v, want one superseding the first", vs[2])
	}
	waitTimer(t, clk, time.Minute)
	clk.Advance(time.Minute)
	got := e.waitRecords("main", "delivery", 1)
	if string(got[0].Response) != `[{"topic":"b","score":1},{"topic":"a","score":5}]` {
		t.Errorf("batch %s", got[0].Response)
	}
}

// TestReloadThatRemovesBatchClosesTheOpenBatch: a reload that takes the
// batch away closes the open batch at once, without waiting for its
// window, so that it reaches main before the pushes that now go directly.
func TestReloadThatRemovesBatchClosesTheOpenBatch(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	e := startE2E(t, debounceBatchPair("", batchedPushes(2)), func(c *Config) { c.Clock = clk })
	e.prompt("researcher", "go")
	e.waitRecords("researcher", "verdict", 2)
	waitTimer(t, clk, 5*time.Minute)
	e.edit("main", replace(t, "        batch: {window: 5m, max: 5}\n", ""))
	e.reload()
	got := e.waitRecords("main", "delivery", 1) // the clock has not moved
	if string(got[0].Response) != `[{"n":0},{"n":1}]` {
		t.Errorf("batch %s, want both pushes", got[0].Response)
	}
	if ev := e.waitEvent("batch_closed", ""); len(ev) != 1 || !strings.Contains(ev[0].Detail, "no longer batches") {
		t.Errorf("batch_closed events = %+v", ev)
	}
	// The same pushes again now go one by one, after the batch.
	e.prompt("researcher", "publish")
	got = e.waitRecords("main", "delivery", 3)
	if string(got[1].Response) != `{"n":0}` || string(got[2].Response) != `{"n":1}` {
		t.Errorf("after the reload main got %s then %s, want {\"n\":0} then {\"n\":1}", got[1].Response, got[2].Response)
	}
}
