package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway"
	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// hangSet is crashSet with a Controller that takes delay over each
// delivery and crashes on its crashAt-th one (0: never).
func hangSet(t *testing.T, dir, delay string, crashAt int) string {
	t.Helper()
	return writeSet(t, map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
runtime: [%q]
workdir: %q
env: {TESTRT_LOG: %q, TESTRT_DELAY: %s, TESTRT_CRASH_AT: "%d"}
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 10000000
    subscriptions:
      - id: items
        category: 2
        questions: [{id: item, question: "Which item?", max_words: 3}]
---
`, testrt, agentDir(t, dir, "main"), filepath.Join(dir, "main", "main.log"), delay, crashAt),
		"researcher.md": fmt.Sprintf(`---
name: researcher
runtime: [%q]
workdir: %q
autostart: true
tools: [BCPPublish]
env: {TESTRT_LOG: %q, TESTRT_PUBLISH: "${PUB}"}
bcp_channels:
  - {peer: main, role: reader, max_category: 2, budget_bits: 10000000}
---
`, testrt, agentDir(t, dir, "researcher"), filepath.Join(dir, "researcher", "researcher.log")),
	})
}

// waitTestrtRecords waits until the testrt log at path holds n records of
// event, and returns them.
func waitTestrtRecords(t *testing.T, path, event string, n int, gwLog *testproc.Buffer) []testrtRecord {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got []testrtRecord
		for _, r := range readTestrtLog(t, path) {
			if r.Event == event {
				got = append(got, r)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s records in %s, want %d\ngateway log:\n%s", len(got), event, path, n, gwLog)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killGateway kills the gateway with SIGKILL and waits for its sessions
// to die with it.
func killGateway(t *testing.T, gw *exec.Cmd) {
	t.Helper()
	pids := map[int]bool{}
	for _, p := range childPids(gw.Process.Pid) {
		pids[p] = true
	}
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = gw.Wait()
	waitGone(t, pids)
}

// A send cut off by the gateway's own crash is not the runtime's failed
// attempt: kill -9 the gateway while its Controller holds a delivery,
// again and again, and the delivery is still pending with no failure
// counted (each later send marked redelivered), so no number of gateway
// crashes parks it.
func TestGatewayKillsAreNotDeliveryFailures(t *testing.T) {
	dir := t.TempDir()
	agentsDir := hangSet(t, dir, "1h", 0)
	state := filepath.Join(dir, "state")
	mainLog := filepath.Join(dir, "main", "main.log")
	const kills = 3
	// sent waits until the store holds the delivery's nth send: its
	// bookkeeping is committed within the store's linger (100ms), and
	// the kill must not be what loses it.
	sent := func(n int, log *testproc.Buffer) {
		t.Helper()
		var r result
		if !testproc.CheckFor(30*time.Second, 50*time.Millisecond, func() bool {
			r = run(t, runOpts{env: opEnv}, "deliveries", "list", "--status", "pending", "--json", "--state", state)
			var d control.Delivery
			return r.code == 0 && json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &d) == nil && d.Attempts == n
		}) {
			t.Fatalf("send %d of the delivery never committed\n%s\ngateway log:\n%s", n, r, log)
		}
	}
	for run := range kills {
		pub := `[]`
		if run == 0 {
			pub = `[{"subscription_id": "items", "controller": "main", "response": {"item": "only item"}}]`
		}
		var log testproc.Buffer
		gw := startGateway(t, agentsDir, state, pub, &log)
		waitTestrtRecords(t, mainLog, "delivery", run+1, &log)
		sent(run+1, &log)
		killGateway(t, gw)
	}
	sends := waitTestrtRecords(t, mainLog, "delivery", kills, &testproc.Buffer{})
	for i, s := range sends {
		if s.DeliveryID != sends[0].DeliveryID || s.Redelivered != (i > 0) {
			t.Errorf("send %d = %+v, want the same delivery, redelivered after the first", i, s)
		}
	}
	st, err := store.Open(filepath.Join(state, "bcpgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	d, err := st.Delivery(ctx, sends[0].DeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != store.DeliveryPending || d.Failures != 0 || d.Attempts != kills {
		t.Errorf("after %d gateway kills: state %s, failures %d, attempts %d; want pending, 0, %d", kills, d.State, d.Failures, d.Attempts, kills)
	}
	if evs, err := st.Events(ctx, 0, 1000, "delivery_failed"); err != nil || len(evs) != 0 {
		t.Errorf("delivery_failed events after gateway kills: %+v, %v; want none", evs, err)
	}
}

// A poison delivery through the real binary: parked after its last
// allowed failure, shown by status and deliveries list, retried by an
// operator and then delivered; only parked deliveries can be retried or
// discarded.
func TestParkedDeliveryThroughTheCommands(t *testing.T) {
	dir := t.TempDir()
	agentsDir := hangSet(t, dir, "0s", 1) // main's first process dies on its first delivery
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	// An earlier run accepted it, and 9 sessions of main ended on it.
	st, err := store.Open(filepath.Join(state, "bcpgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	poison := store.Delivery{Controller: "main", Reader: "researcher", SubscriptionID: "items", Category: 2,
		Response: json.RawMessage(`{"item":"poison"}`), Bits: 30, CreatedAt: time.Now()}
	if err := st.AddDelivery(ctx, &poison); err != nil {
		t.Fatal(err)
	}
	for range gateway.MaxDeliveryFailures - 1 {
		st.RecordFailure(poison.ID)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	var log testproc.Buffer
	cli := gatewayCLI(t, agentsDir, state, &log)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := run(t, runOpts{env: opEnv}, "deliveries", "list", "--json", "--state", state)
		if r.code == 0 && strings.Contains(r.stdout, poison.ID) {
			var d control.Delivery
			if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &d); err != nil {
				t.Fatalf("deliveries list --json: %v\n%s", err, r)
			}
			if d.State != "parked" || d.Failures != gateway.MaxDeliveryFailures || !strings.Contains(d.Detail, "bcpgw deliveries") {
				t.Errorf("parked delivery = %+v", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delivery was never parked\n%s\ngateway log:\n%s", r, &log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := cli(0, "status"); !strings.Contains(r.stdout, "parked:     1 deliveries kept failing") {
		t.Errorf("status does not show the parked delivery:\n%s", r)
	}
	if r := cli(0, "deliveries", "list"); !strings.Contains(r.stdout, poison.ID) || !strings.Contains(r.stdout, "parked") {
		t.Errorf("deliveries list:\n%s", r)
	}
	if r := cli(exitUsage, "deliveries", "discard", poison.ID); !strings.Contains(r.stderr, "--reason is required") {
		t.Errorf("discard without a reason:\n%s", r)
	}
	if r := cli(0, "deliveries", "retry", poison.ID); !strings.Contains(r.stdout, "Requeued "+poison.ID) {
		t.Errorf("retry:\n%s", r)
	}
	// main's second process does not crash: the delivery arrives, once.
	applied := waitTestrtRecords(t, filepath.Join(dir, "main", "main.log"), "applied", 1, &log)
	if applied[0].DeliveryID != poison.ID {
		t.Errorf("applied %+v, want %s", applied, poison.ID)
	}
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(cli(0, "deliveries", "list", "--status", "delivered").stdout, poison.ID) {
		if time.Now().After(deadline) {
			t.Fatal("the retried delivery is never marked delivered")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := cli(exitFailed, "deliveries", "discard", poison.ID, "--reason", "late"); !strings.Contains(r.stderr, "only parked deliveries") {
		t.Errorf("discard of a delivered delivery:\n%s", r)
	}
	if r := cli(0, "deliveries", "list"); !strings.Contains(r.stdout, "No parked deliveries.") {
		t.Errorf("deliveries list after the retry:\n%s", r)
	}
	ev := cli(0, "events", "--type", "delivery_*", "--json").stdout
	for _, kind := range []string{"delivery_parked", "delivery_requeued", "delivery_acked"} {
		if !strings.Contains(ev, `"kind":"`+kind+`"`) {
			t.Errorf("no %s event:\n%s", kind, ev)
		}
	}
}
