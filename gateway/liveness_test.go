package gateway

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/runtime"
)

// The liveness tests: a runtime that stops answering is ended by its turn
// timeout and its work goes to the next session, and a failed agent is
// tried again on its own after a cool-down. Everything timed runs on the
// fake clock; the tests move it.

// TestFailedCoolDown checks the cool-down series: 5m doubling, capped at
// an hour.
func TestFailedCoolDown(t *testing.T) {
	want := []time.Duration{5, 10, 20, 40, 60, 60}
	for n, w := range want {
		if got := FailedCoolDown(n); got != w*time.Minute {
			t.Errorf("FailedCoolDown(%d) = %v, want %v", n, got, w*time.Minute)
		}
	}
	if got := FailedCoolDown(1000); got != FailedRetryMax {
		t.Errorf("FailedCoolDown(1000) = %v, want the cap", got)
	}
}

// advanceUntil moves clk forward by step at each poll until cond holds
// (or testWait passes): what waits on the fake clock (stop phases,
// backoffs, the courier's retries) then happens in order, at whatever
// speed the machine runs.
func advanceUntil(t *testing.T, clk *fakeClock, step time.Duration, cond func() bool) bool {
	t.Helper()
	return checkFor(t, testWait, pollStep, func() bool {
		if cond() {
			return true
		}
		clk.Advance(step)
		return false
	})
}

// stopGroup SIGSTOPs the process group of pid (a sandbox's helper and the
// runtime in it), as a debugger or a deadlock would leave it, and
// continues it at the end of the test in case the gateway did not kill it.
func stopGroup(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP the runtime: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGCONT) })
}

// A SIGSTOPped runtime answers nothing, not even SIGTERM: its turn times
// out, the stop goes on to SIGKILL, the turn's owner hears that the
// session closed, and the session ends as a crash that says why.
func TestSessionTurnTimeoutKillsAStoppedRuntime(t *testing.T) {
	h := newHarness(t, "sdk")
	h.cfg.TurnTimeout = 40 * time.Minute
	s := h.start(t)
	stopGroup(t, s.Pid())
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	done, err := s.Turn(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if !checkFor(t, testWait, pollStep, func() bool { return h.clock.PendingFor(40 * time.Minute) }) {
		t.Fatal("no turn timer of 40m")
	}
	h.clock.Advance(40*time.Minute - time.Second)
	if got := h.audit.find("turn_timeout", ""); len(got) != 0 {
		t.Fatalf("turn_timeout before the timeout: %+v", got)
	}
	h.clock.Advance(time.Second)
	if !checkFor(t, testWait, pollStep, func() bool { return len(h.audit.find("turn_timeout", "")) == 1 }) {
		t.Fatal("no turn_timeout event")
	}
	// The grace after shutdown, then a second after SIGTERM.
	if !advanceUntil(t, h.clock, 100*time.Millisecond, func() bool { return ended(s) }) {
		t.Fatalf("session did not end; logs:\n%s", h.logs)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrSessionClosed) {
			t.Errorf("turn ended with %v, want ErrSessionClosed", err)
		}
	default:
		t.Error("the turn's owner was not told")
	}
	ev := h.audit.find("turn_timeout", "")[0]
	if ev.Agent != "researcher" || ev.Detail != "turn timeout: no result for prompt within 40m0s" {
		t.Errorf("turn_timeout event %+v", ev)
	}
	var ee *ExitError
	if !errors.As(s.Err(), &ee) || !strings.Contains(ee.Reason, "turn timeout") {
		t.Errorf("Err() = %v, want an *ExitError for the turn timeout", s.Err())
	}
	if !strings.Contains(h.logs.String(), "a second after SIGTERM; sending SIGKILL") {
		t.Errorf("a stopped runtime needs SIGKILL; logs:\n%s", h.logs)
	}
	if len(h.audit.find("session_crashed", "")) != 1 {
		t.Error("no session_crashed event")
	}
}

// An agent's turn_timeout wins over the gateway's, and a turn answered in
// time leaves no timer behind.
func TestSessionTurnTimeoutPerAgent(t *testing.T) {
	h := newHarness(t, "sdk")
	h.cfg.TurnTimeout = 40 * time.Minute
	d := *h.cfg.Def
	d.TurnTimeout = 3 * time.Minute
	h.cfg.Def = &d
	s := h.start(t)
	stopGroup(t, s.Pid())
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := s.Turn(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	if !checkFor(t, testWait, pollStep, func() bool { return h.clock.PendingFor(3 * time.Minute) }) {
		t.Fatal("no turn timer of 3m (the agent's)")
	}
	if h.clock.PendingFor(40 * time.Minute) {
		t.Error("the gateway's turn timeout armed too")
	}
	_ = syscall.Kill(-s.Pid(), syscall.SIGCONT)
	if err := s.Prompt(ctx, "again", nil); err != nil { // queued behind the first; both answered
		t.Fatal(err)
	}
	if !checkFor(t, testWait, pollStep, func() bool { return len(h.audit.find("turn_done", "")) == 2 }) {
		t.Fatal("turns not answered after SIGCONT")
	}
	if h.clock.PendingFor(3 * time.Minute) {
		t.Error("a turn timer outlived its turn")
	}
}

// The Controller's runtime is SIGSTOPped with a delivery in flight: the
// turn timeout (the agent's turn_timeout) ends the session, the
// supervisor restarts it, and the next session gets the same delivery,
// marked redelivered.
func TestTurnTimeoutRedeliversToTheNextSession(t *testing.T) {
	clk := newFakeClock()
	specs := pair(100000, 100000, "review", nil, map[string]string{"PUBLISH": publishes(pub("research-alerts", "main", alert, 1))})
	specs[0].front += "\nturn_timeout: 45m"
	e := startE2E(t, specs, func(c *Config) { c.Clock = clk })

	first := e.sessionOf("main")
	stopGroup(t, first.Pid())
	e.prompt("researcher", "hello") // it publishes once its subscriptions are announced
	if v := e.waitRecords("researcher", "verdict", 1); !v[0].Success {
		t.Fatalf("verdict = %+v", v[0])
	}
	// The delivery sits in the stopped runtime's stdin; its turn timer runs.
	if !checkFor(t, testWait, pollStep, func() bool { return clk.PendingFor(45 * time.Minute) }) {
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
	if !advanceUntil(t, clk, time.Second, func() bool { return len(e.records("main", "delivery")) > 0 }) {
		t.Fatal("the delivery never reached a new session")
	}
	applied := e.waitRecords("main", "applied", 1)
	got := e.records("main", "delivery")
	if len(got) != 1 || got[0].DeliveryID != ds[0].ID || !got[0].Redelivered || applied[0].DeliveryID != ds[0].ID {
		t.Errorf("deliveries %+v, applied %+v: want %s once, redelivered", got, applied, ds[0].ID)
	}
	if !ended(first) {
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
	clk := newFakeClock()
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
		if !checkFor(t, testWait, pollStep, func() bool {
			return clk.PendingFor(delay*time.Second) && e.status("main").State == StateBackoff
		}) {
			t.Fatalf("failure %d: no backoff of %v (status %+v)", i+1, delay*time.Second, e.status("main"))
		}
		clk.Advance(delay * time.Second)
	}
	e.waitState("main", StateFailed)
	st := e.status("main")
	if want := clk.Now().Add(FailedRetryInitial); !st.RetryAt.Equal(want) {
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
	clk.Advance(FailedRetryInitial - time.Second)
	time.Sleep(50 * time.Millisecond)
	if s := e.status("main").State; s != StateFailed || len(e.events("agent_retry", "")) != 0 {
		t.Fatalf("state %s, agent_retry %v a second before the cool-down ends", s, e.events("agent_retry", ""))
	}
	clk.Advance(time.Second)
	if r := e.waitEvent("agent_retry", ""); r[0].Agent != "main" || !strings.Contains(r[0].Detail, "cool-down of 5m0s") {
		t.Errorf("agent_retry %+v", r[0])
	}
	e.waitState("main", StateRunning)
	// The courier tries again within its own backoff (at most a minute).
	if !advanceUntil(t, clk, time.Second, func() bool { return len(e.records("main", "applied")) == 3 }) {
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

// status is one agent's status from the supervisor.
func (e *e2e) status(name string) AgentStatus {
	e.t.Helper()
	all, err := e.gw.Supervisor().Agents(testCtx(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range all {
		if a.Name == name {
			return a
		}
	}
	e.t.Fatalf("no agent %s", name)
	return AgentStatus{}
}

// The cool-down doubles with each failure in a row, an operator's start
// retries at once and starts the series over, and so does an hour
// without failing since the last retry. An agent that is not autostart
// is not started by its retry: the next work starts it.
func TestSupervisorFailedAgentCoolDowns(t *testing.T) {
	sv, clock, rec, _, _ := supervised(t, false, map[string]string{"worker": "exit-early"})
	status := func() AgentStatus {
		t.Helper()
		all, err := sv.Agents(context.Background())
		if err != nil || len(all) != 1 {
			t.Fatalf("Agents = %+v, %v", all, err)
		}
		return all[0]
	}
	// fail sends work to worker and drives its six failed starts (its
	// runtime exits before ready) within a minute; the work waits, and
	// is refused once the agent has failed.
	fail := func(round string) {
		t.Helper()
		ensured := make(chan error, 1)
		go func() {
			_, err := sv.Ensure(context.Background(), "worker")
			ensured <- err
		}()
		for _, delay := range []time.Duration{1, 2, 4, 8, 16} {
			if !checkFor(t, testWait, pollStep, func() bool {
				return clock.PendingFor(delay*time.Second) && status().State == StateBackoff
			}) {
				t.Fatalf("%s: no backoff of %v (status %+v)", round, delay*time.Second, status())
			}
			clock.Advance(delay * time.Second)
		}
		select {
		case err := <-ensured:
			if !errors.Is(err, ErrAgentFailed) {
				t.Fatalf("%s: Ensure = %v, want ErrAgentFailed", round, err)
			}
		case <-time.After(testWait):
			t.Fatalf("%s: Ensure did not return (status %+v)", round, status())
		}
	}
	retryIn := func(round string, want time.Duration) {
		t.Helper()
		st := status()
		if st.State != StateFailed || !st.RetryAt.Equal(clock.Now().Add(want)) {
			t.Fatalf("%s: status %+v at %v, want failed and a retry in %v", round, st, clock.Now(), want)
		}
	}
	retried := func(round string, n int) {
		t.Helper()
		if !checkFor(t, testWait, pollStep, func() bool { return len(rec.find("agent_retry", "")) == n }) {
			t.Fatalf("%s: agent_retry events = %d, want %d", round, len(rec.find("agent_retry", "")), n)
		}
		if st := status(); st.State != StateStopped || !st.RetryAt.IsZero() {
			t.Fatalf("%s: status %+v after the retry, want stopped (not autostart)", round, st)
		}
	}

	fail("first")
	retryIn("first", 5*time.Minute)
	clock.Advance(5 * time.Minute)
	retried("first", 1)

	fail("again within the hour")
	retryIn("again within the hour", 10*time.Minute)

	// The operator's start: at once, and the series starts over. The
	// pending 10-minute retry is off.
	if err := sv.Reset(context.Background(), "worker"); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.State != StateStopped || !st.RetryAt.IsZero() {
		t.Fatalf("status %+v after Reset", st)
	}
	fail("after Reset")
	retryIn("after Reset", 5*time.Minute)
	clock.Advance(5 * time.Minute)
	retried("after Reset", 2)

	// An hour without failing (the stale 10-minute timer fires meanwhile
	// and does nothing): the next failure's cool-down is 5 minutes again.
	clock.Advance(HealthyAfter)
	time.Sleep(50 * time.Millisecond)
	if n := len(rec.find("agent_retry", "")); n != 2 || status().State != StateStopped {
		t.Fatalf("agent_retry events = %d, status %+v after the stale timer", n, status())
	}
	fail("after an hour")
	retryIn("after an hour", 5*time.Minute)
}
