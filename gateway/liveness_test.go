package gateway

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// The liveness tests: a runtime that stops answering is ended by its turn
// timeout and its work goes to the next session, and a failed agent is
// tried again on its own after a cool-down. Everything timed runs on the
// fake clock; the tests move it.

// The Controller's runtime is SIGSTOPped with a delivery in flight: the
// turn timeout (the agent's turn_timeout) ends the session, the
// supervisor restarts it, and the next session gets the same delivery,
// marked redelivered.
func TestTurnTimeoutRedeliversToTheNextSession(t *testing.T) {
	clk := testproc.FakeClock()
	specs := pair(100000, 100000, "review", nil, map[string]string{"PUBLISH": publishes(pub("research-alerts", "main", alert, 1))})
	specs[0].front += "\nturn_timeout: 45m"
	// The researcher's turns get the gateway's turn timeout: a day, so
	// that only main's turn times out when the clock jumps 45 minutes
	// (its prompt's result may still be on its way then).
	e := startE2E(t, specs, func(c *Config) {
		c.Clock = clk
		c.Session.TurnTimeout = 24 * time.Hour
	})

	first := e.sessionOf("main")
	testproc.StopGroup(t, first.Pid())
	e.prompt("researcher", "hello") // it publishes once its subscriptions are announced
	if v := e.waitRecords("researcher", "verdict", 1); !v[0].Success {
		t.Fatalf("verdict = %+v", v[0])
	}
	// The delivery sits in the stopped runtime's stdin; its turn timer runs.
	if !testproc.CheckFor(testWait, pollStep, func() bool { return clk.PendingFor(45 * time.Minute) }) {
		t.Fatal("no turn timer of 45m for the delivery")
	}
	ds := e.deliveries()
	if len(ds) != 1 {
		t.Fatalf("deliveries = %+v, want one", ds)
	}
	clk.Advance(45 * time.Minute)
	ev := e.waitEvent("turn_timeout", "")
	if ev[0].Agent != "main" || ev[0].Ref != first.ID() || !strings.Contains(ev[0].Detail, "delivery "+ds[0].ID+" within 45m0s") {
		t.Errorf("turn_timeout event %+v, want main's session %s and delivery %s", ev[0], first.ID(), ds[0].ID)
	}
	// Grace, SIGTERM, SIGKILL, the restart and the courier's retry all
	// wait on the fake clock.
	if !testproc.AdvanceUntil(clk, time.Second, testWait, func() bool { return len(e.records("main", "delivery")) > 0 }) {
		t.Fatal("the delivery never reached a new session")
	}
	applied := e.waitRecords("main", "applied", 1)
	got := e.records("main", "delivery")
	if len(got) != 1 || got[0].DeliveryID != ds[0].ID || !got[0].Redelivered || applied[0].DeliveryID != ds[0].ID {
		t.Errorf("deliveries %+v, applied %+v: want %s once, redelivered", got, applied, ds[0].ID)
	}
	if !first.Ended() {
		t.Error("the stopped session did not end")
	}
	crashed := e.waitEvent("session_crashed", "")
	if !strings.Contains(crashed[0].Detail, "turn timeout") {
		t.Errorf("session_crashed %+v, want the turn timeout as the reason", crashed[0])
	}
	e.waitEvent("delivery_acked", "")
}

// A Controller that cannot start is marked failed while deliveries wait
// for it; once mended, it is tried again after the cool-down on its own
// (it is autostart: started at once) and its backlog is delivered.
func TestFailedControllerRetriesAfterCoolDownAndDrains(t *testing.T) {
	clk := testproc.FakeClock()
	dir := t.TempDir()
	specs := pair(100000, 100000, "review", nil, map[string]string{"PUBLISH": publishes(pub("research-alerts", "main", alert, 3))})
	specs[0].front += "\nautostart: true"
	set, vars := writeAgents(t, dir, specs)
	// main's runtime exits before ready (testrt needs its log) until the
	// test mends it; sessions read the environment as they start.
	var envMu sync.Mutex
	mainLog := vars["main_LOG"]
	vars["main_LOG"] = ""
	lookup := func(k string) (string, bool) {
		envMu.Lock()
		defer envMu.Unlock()
		v, ok := vars[k]
		return v, ok
	}
	e := runE2E(t, dir, set, vars, func(c *Config) {
		c.Clock = clk
		c.Session.LookupEnv = lookup
		c.Session.TurnTimeout = 24 * time.Hour // the test moves the clock by the minute below
	})

	// Six failed starts within a minute (backoffs of 1s to 16s) fail it.
	for i, delay := range []time.Duration{1, 2, 4, 8, 16} {
		if !testproc.CheckFor(testWait, pollStep, func() bool {
			return clk.PendingFor(delay*time.Second) && e.status("main").State == session.StateBackoff
		}) {
			t.Fatalf("failure %d: no backoff of %v (status %+v)", i+1, delay*time.Second, e.status("main"))
		}
		clk.Advance(delay * time.Second)
	}
	e.waitState("main", session.StateFailed)
	st := e.status("main")
	if want := clk.Now().Add(session.FailedRetryInitial); !st.RetryAt.Equal(want) {
		t.Errorf("RetryAt = %v, want %v", st.RetryAt, want)
	}
	if f := e.waitEvent("agent_failed", ""); !strings.Contains(f[0].Detail, "retrying at") {
		t.Errorf("agent_failed %+v, want when it is retried", f[0])
	}

	// The backlog grows meanwhile.
	e.prompt("researcher", "hello")
	if v := e.waitRecords("researcher", "verdict", 3); !v[2].Success {
		t.Fatalf("verdicts = %+v", v)
	}
	envMu.Lock()
	vars["main_LOG"] = mainLog
	envMu.Unlock()

	// Not before the cool-down ends.
	clk.Advance(session.FailedRetryInitial - time.Second)
	time.Sleep(50 * time.Millisecond)
	if s := e.status("main").State; s != session.StateFailed || len(e.events("agent_retry", "")) != 0 {
		t.Fatalf("state %s, agent_retry %v a second before the cool-down ends", s, e.events("agent_retry", ""))
	}
	clk.Advance(time.Second)
	if r := e.waitEvent("agent_retry", ""); r[0].Agent != "main" || !strings.Contains(r[0].Detail, "cool-down of 5m0s") {
		t.Errorf("agent_retry %+v", r[0])
	}
	e.waitState("main", session.StateRunning)
	// The courier tries again within its own backoff (at most a minute).
	if !testproc.AdvanceUntil(clk, time.Second, testWait, func() bool { return len(e.records("main", "applied")) == 3 }) {
		t.Fatalf("backlog not drained: %+v", e.log("main"))
	}
	for _, d := range e.records("main", "delivery") {
		if d.Redelivered {
			t.Errorf("delivery %+v marked redelivered: no session had it before", d)
		}
	}
	if st := e.status("main"); !st.RetryAt.IsZero() {
		t.Errorf("RetryAt = %v once running, want zero", st.RetryAt)
	}
}

// A gateway stopped while it is still starting (a SIGTERM right after
// "gateway running") stops cleanly: Run returns nil, not the error of the
// store's read that the stop cancelled under it.
func TestRunStoppedWhileStartingIsAStop(t *testing.T) {
	dir := t.TempDir()
	set, vars := writeAgents(t, dir, pair(100000, 100000, "review", nil, nil))
	e := newE2E(t, dir, set, vars, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.gw.Run(ctx); err != nil {
		t.Fatalf("Run with its context ended before its start = %v, want nil (a stop)", err)
	}
}
