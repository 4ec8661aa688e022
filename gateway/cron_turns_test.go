package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

// What becomes of a cron prompt whose session ends (cronPrompt's retry
// policy): never handed to the runtime, it goes to the next session; handed
// to it, it fails as cron_failed and is not sent again.
//
// The order of events is made, not waited for: testrt holds a prompt
// "hold" in flight until its session ends, so the turns queued behind it
// stay queued (Session.Waiting counts them) until the test kills the
// session; the schedule fires, and the restart's backoff passes, only when
// the test moves the fake clock.

// cronTicker is the agent of these tests: one hourly schedule (pulse)
// sending message. Its sessions never idle out and its turns never time
// out while the test moves the clock by the hour. It is autostart, so that
// a crash is always followed by the backoff, whether or not the cron
// prompt's retry already waits for the next session.
func cronTicker(message string) []agentSpec {
	return []agentSpec{{name: "ticker", front: fmt.Sprintf("cron_schedules:\n"+
		"  - {schedule: \"@every 1h\", message: %q, label: pulse}\n"+
		"autostart: true\nidle_timeout: 0\nturn_timeout: 24h", message)}}
}

// fireCron moves the fake clock to the hourly schedule's firing, once it
// is armed, and waits for its cron_fired event.
func (e *e2e) fireCron(clk *clock.Fake) {
	e.t.Helper()
	cronWait(e.t, "the schedule's firing to be armed", func() bool { return clk.PendingFor(time.Hour) })
	clk.Advance(time.Hour)
	e.waitEvent("cron_fired", "")
}

// crashAndRestart kills s, the agent's session, and moves the fake clock
// past the supervisor's backoff, once it is armed, so that the next
// session starts.
func (e *e2e) crashAndRestart(s *session.Session, clk *clock.Fake) {
	e.t.Helper()
	s.Kill()
	cronWait(e.t, "the restart's backoff", func() bool {
		return s.Ended() && e.status(s.Name()).State == session.StateBackoff && clk.PendingFor(session.BackoffInitial)
	})
	clk.Advance(session.BackoffInitial)
	cronWait(e.t, "the next session", func() bool {
		st := e.status(s.Name())
		return st.State == session.StateRunning && st.Session != s.ID()
	})
}

// cronDone waits until the schedule labelled label has no prompt pending
// (its bringTurn has returned, so it sends nothing more), then until the
// store holds every event recorded before: its writes are committed in
// order, and a sync write is the barrier.
func (e *e2e) cronDone(label string) {
	e.t.Helper()
	cronWait(e.t, "the cron prompt to be done", func() bool {
		en := cronEntries(e.gw.sched)[label]
		return en != nil && !en.busy.Load()
	})
	if err := e.store.AppendSync(testCtx(e.t), store.Event{Time: time.Now(), Kind: "test_barrier"}); err != nil {
		e.t.Fatal(err)
	}
}

// A cron prompt queued behind another turn was never shown to the
// runtime: when the session ends before it went out, it goes to the next
// session, once, and the firing does not fail.
func TestCronPromptQueuedWhenSessionEndsGoesToNextSession(t *testing.T) {
	clk := testproc.FakeClock()
	e := startE2E(t, cronTicker("tick"), func(c *Config) { c.Clock = clk })
	ctx := testCtx(t)

	first := e.sessionOf("ticker")
	firstKey := procKey(first.Pid())
	sent, _, err := first.TurnSent(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: "hold"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-sent:
	case <-ctx.Done():
		t.Fatal("the held turn was never sent")
	}
	e.waitRecords("ticker", "prompt", 1) // the runtime holds it

	e.fireCron(clk)
	// The firing's prompt goes to the running session, behind the held
	// turn: once it is queued there, the session ends.
	cronWait(t, "the cron prompt to be queued behind the held turn", func() bool { return first.Waiting() == 1 })
	if first.Ended() {
		t.Fatal("the session ended before the test killed it")
	}
	e.crashAndRestart(first, clk)

	// The next session answers it (or the firing fails: the test fails
	// at once rather than waiting out a prompt that does not come).
	cronWait(t, "the cron prompt in the next session, or cron_failed", func() bool {
		return len(e.records("ticker", "prompt")) >= 2 || len(e.events("cron_failed", "")) > 0
	})
	e.cronDone("pulse")

	prompts := e.records("ticker", "prompt")
	if len(prompts) != 2 || prompts[0].Prompt != "hold" || prompts[0].Pid != firstKey ||
		prompts[1].Prompt != "tick" || prompts[1].Pid == firstKey {
		t.Errorf("prompts = %+v; want hold in the first session (%d), then tick once in the next", prompts, firstKey)
	}
	if f := e.events("cron_failed", ""); len(f) != 0 {
		t.Errorf("cron_failed for a prompt never sent: %+v", f)
	}
	if f := e.events("cron_fired", ""); len(f) != 1 {
		t.Errorf("cron_fired = %+v, want the one firing", f)
	}
	if c := e.events("session_crashed", ""); len(c) != 1 || c[0].Ref != first.ID() {
		t.Errorf("session_crashed = %+v, want the first session's", c)
	}
}

// A cron prompt the runtime was handed may be what killed its session: it
// is not sent again, and the firing fails as cron_failed.
func TestCronPromptSentWhenSessionEndsFails(t *testing.T) {
	clk := testproc.FakeClock()
	e := startE2E(t, cronTicker("hold"), func(c *Config) { c.Clock = clk })

	first := e.sessionOf("ticker")
	firstKey := procKey(first.Pid())
	e.fireCron(clk)
	// The runtime has it, and holds it.
	if p := e.waitRecords("ticker", "prompt", 1); p[0].Prompt != "hold" || p[0].Pid != firstKey {
		t.Fatalf("prompts = %+v, want the cron prompt in the first session (%d)", p, firstKey)
	}
	e.crashAndRestart(first, clk)

	cronWait(t, "cron_failed, or the prompt sent again", func() bool {
		return len(e.events("cron_failed", "")) > 0 || len(e.records("ticker", "prompt")) > 1
	})
	if p := e.records("ticker", "prompt"); len(p) > 1 {
		t.Fatalf("the cron prompt was sent again after its session ended: prompts %+v", p)
	}
	e.cronDone("pulse")
	failed := e.events("cron_failed", "")
	if len(failed) != 1 || failed[0].Agent != "ticker" || failed[0].Ref != "pulse" ||
		!strings.Contains(failed[0].Detail, session.ErrSessionClosed.Error()) {
		t.Errorf("cron_failed = %+v, want one for ticker's pulse: session closed", failed)
	}
	// The next session is up and was sent nothing: what it is sent now
	// is the first prompt it logs.
	e.prompt("ticker", "after")
	prompts := e.waitRecords("ticker", "prompt", 2)
	if len(prompts) != 2 || prompts[1].Prompt != "after" || prompts[1].Pid == firstKey {
		t.Errorf("prompts = %+v; want the cron prompt once, in the first session (%d), then after in the next", prompts, firstKey)
	}
}
