package session

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

// The liveness tests of sessions and the supervisor: a runtime that stops
// answering is ended by its turn timeout, and a failed agent is tried
// again on its own after a cool-down. Everything timed runs on the fake
// clock; the tests move it.

// TestFailedCoolDown checks the cool-down series: 5m doubling, capped at
// an hour.
func TestFailedCoolDown(t *testing.T) {
	want := []time.Duration{5, 10, 20, 40, 60, 60}
	for n, w := range want {
		if got := failedCoolDown(n); got != w*time.Minute {
			t.Errorf("failedCoolDown(%d) = %v, want %v", n, got, w*time.Minute)
		}
	}
	if got := failedCoolDown(1000); got != FailedRetryMax {
		t.Errorf("failedCoolDown(1000) = %v, want the cap", got)
	}
}

// A SIGSTOPped runtime answers nothing, not even SIGTERM: its turn times
// out, the stop goes on to SIGKILL, the turn's owner hears that the
// session closed, and the session ends as a crash that says why.
func TestSessionTurnTimeoutKillsAStoppedRuntime(t *testing.T) {
	h := newHarness(t, "sdk")
	h.cfg.TurnTimeout = 40 * time.Minute
	s := h.start(t)
	testproc.StopGroup(t, s.Pid())
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Wait)
	defer cancel()
	done, err := s.Turn(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if !testproc.CheckFor(testproc.Wait, testproc.Poll, func() bool { return h.clock.PendingFor(40 * time.Minute) }) {
		t.Fatal("no turn timer of 40m")
	}
	h.clock.Advance(40*time.Minute - time.Second)
	if got := h.audit.find("turn_timeout", ""); len(got) != 0 {
		t.Fatalf("turn_timeout before the timeout: %+v", got)
	}
	h.clock.Advance(time.Second)
	if !testproc.CheckFor(testproc.Wait, testproc.Poll, func() bool { return len(h.audit.find("turn_timeout", "")) == 1 }) {
		t.Fatal("no turn_timeout event")
	}
	// The grace after shutdown, then a second after SIGTERM.
	if !testproc.AdvanceUntil(h.clock, 100*time.Millisecond, testproc.Wait, func() bool { return s.Ended() }) {
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
	testproc.StopGroup(t, s.Pid())
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Wait)
	defer cancel()
	if _, err := s.Turn(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	if !testproc.CheckFor(testproc.Wait, testproc.Poll, func() bool { return h.clock.PendingFor(3 * time.Minute) }) {
		t.Fatal("no turn timer of 3m (the agent's)")
	}
	if h.clock.PendingFor(40 * time.Minute) {
		t.Error("the gateway's turn timeout armed too")
	}
	_ = syscall.Kill(-s.Pid(), syscall.SIGCONT)
	if err := s.Prompt(ctx, "again", nil); err != nil { // queued behind the first; both answered
		t.Fatal(err)
	}
	if !testproc.CheckFor(testproc.Wait, testproc.Poll, func() bool { return len(h.audit.find("turn_done", "")) == 2 }) {
		t.Fatal("turns not answered after SIGCONT")
	}
	// The session records turn_done before it stops the turn's timer.
	if !testproc.CheckFor(testproc.Wait, testproc.Poll, func() bool { return !h.clock.PendingFor(3 * time.Minute) }) {
		t.Error("a turn timer outlived its turn")
	}
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
			if !testproc.CheckFor(testproc.Wait, testproc.Poll, func() bool {
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
		case <-time.After(testproc.Wait):
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
		if !testproc.CheckFor(testproc.Wait, testproc.Poll, func() bool { return len(rec.find("agent_retry", "")) == n }) {
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
