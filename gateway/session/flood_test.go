package session

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

// The flood tests run on the harness's fake clock, which moves only when a
// test advances it: the bucket refills only then, and a pause lasts until
// the test ends it. Counts and the order of events are deterministic.

// turnDone runs msg as a turn of s and waits for its result.
func turnDone(t *testing.T, s *Session, msg any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done, err := s.Turn(ctx, msg)
	if err != nil {
		t.Fatalf("turn: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("turn: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("turn not done")
	}
}

func query(id string) runtime.Query {
	return runtime.Query{Type: runtime.TypeQuery, QueryID: id, Category: bcp.Cat1, FromAgent: "main"}
}

// kinds returns the kinds of the events recorded so far, in order.
func (r *recorder) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.events))
	for i, e := range r.events {
		out[i] = e.Kind
		if e.Kind == "refused" && strings.Contains(e.Detail, "result without a prompt") {
			out[i] = "unsolicited_result"
		}
	}
	return out
}

// The results of turns the gateway sent and the first answer to each
// query it delivered take no token: with a bucket of 4 that never refills,
// 40 turns and 10 answers go through unslowed.
func TestFloodAskedLinesAreFree(t *testing.T) {
	h := newHarness(t, "asked", agents.ToolRespond)
	h.cfg.FloodBurst = 4 // ready takes one
	s := h.start(t)
	for range 30 {
		turnDone(t, s, runtime.Prompt{Type: runtime.TypePrompt, Content: "go"})
	}
	for i := range 10 {
		turnDone(t, s, query("q-"+string(rune('a'+i))))
	}
	if got := h.audit.find("turn_done", ""); len(got) != 40 {
		t.Errorf("turn_done events = %d, want 40", len(got))
	}
	if got := h.audit.find("session_throttled", ""); len(got) != 0 {
		t.Errorf("throttled for lines the gateway asked for: %+v", got)
	}
	if h.clock.PendingFor(floodPause) {
		t.Error("stdout is paused")
	}
}

// A result with no turn in flight and a second answer to the same query
// take tokens like any other line: a runtime cannot flood for free with
// lines that look asked for.
func TestFloodUnsolicitedLinesCount(t *testing.T) {
	h := newHarness(t, "asked", agents.ToolRespond)
	h.cfg.FloodBurst = 4
	s := h.start(t)
	// ready took a token, the second answer takes another: 2 left.
	turnDone(t, s, query("q-twice"))
	// The prompt's result is free; of the five results after it, two take
	// the last tokens and the third finds the bucket empty.
	turnDone(t, s, runtime.Prompt{Type: runtime.TypePrompt, Content: "unsolicited"})
	if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool { return h.clock.PendingFor(floodPause) }) {
		t.Fatalf("never throttled; events %v", h.audit.kinds())
	}
	// Every line is handled, the one that found the bucket empty too; the
	// event comes before it. Two before it: the second answer took a token.
	want := "unsolicited_result unsolicited_result session_throttled unsolicited_result"
	var got string
	if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool {
		var k []string
		for _, kind := range h.audit.kinds() {
			if kind == "unsolicited_result" || kind == "session_throttled" {
				k = append(k, kind)
			}
		}
		got = strings.Join(k, " ")
		return got == want
	}) {
		t.Fatalf("events %q, want %q", got, want)
	}
	// After the pause the rest is read, and the session goes on.
	h.clock.Advance(floodPause)
	unsolicited := func() int { return strings.Count(strings.Join(h.audit.kinds(), " "), "unsolicited_result") }
	if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool { return unsolicited() == 5 }) {
		t.Fatalf("unsolicited results refused: %d, want 5", unsolicited())
	}
	turnDone(t, s, runtime.Prompt{Type: runtime.TypePrompt, Content: "go"})
	if got := h.audit.find("session_throttled", ""); len(got) != 1 {
		t.Errorf("session_throttled events = %d, want 1", len(got))
	}
	if got := h.audit.find("session_killed", ""); len(got) != 0 {
		t.Errorf("stopped: %+v", got)
	}
}

// A runtime that floods is slowed first, with one session_throttled
// event for the whole episode, and stopped only once the episode has
// lasted FloodStopAfter without a line the gateway asked for.
func TestFloodThrottledBeforeStopped(t *testing.T) {
	h := newHarness(t, "flood")
	h.cfg.FloodBurst = 50
	h.cfg.FloodStopAfter = 2 * time.Second
	s := h.start(t)
	pauses := 0
	for !s.Ended() {
		if !testproc.CheckFor(10*time.Second, time.Millisecond, func() bool { return h.clock.PendingFor(floodPause) || s.Ended() }) {
			t.Fatalf("neither paused nor stopped after %d pauses; events %v", pauses, h.audit.kinds())
		}
		if s.Ended() {
			break
		}
		if got := h.audit.find("session_killed", ""); len(got) != 0 {
			t.Fatalf("stopped while paused: %+v", got)
		}
		pauses++
		if pauses > 100 {
			t.Fatal("never stopped")
		}
		h.clock.Advance(floodPause)
	}
	waitDone(t, s)
	var ee *ExitError
	if !errors.As(s.Err(), &ee) || !strings.HasPrefix(ee.Reason, "flooding: ") || !strings.Contains(ee.Reason, "for 2s (8 pauses)") {
		t.Fatalf("Err() = %v, want an ExitError for flooding for 2s", s.Err())
	}
	// 2s of pauses of 250ms: the ninth pause would start at 2s.
	if pauses != 8 {
		t.Errorf("paused %d times, want 8", pauses)
	}
	var order []string
	for _, k := range h.audit.kinds() {
		if k == "session_throttled" || k == "session_killed" {
			order = append(order, k)
		}
	}
	if strings.Join(order, " ") != "session_throttled session_killed" {
		t.Errorf("events %v, want one session_throttled, then session_killed", order)
	}
	if got := h.audit.find("session_killed", string(bcp.ProtocolError)); len(got) != 1 || !strings.Contains(got[0].Detail, "none of them a result or answer the gateway asked for") {
		t.Errorf("session_killed = %+v", got)
	}
}

// An agent's flood_limit wins over the gateway's: the runtime is read at
// its rate, and the event says so.
func TestFloodLimitPerAgent(t *testing.T) {
	h := newHarness(t, "flood")
	h.cfg.FloodRate, h.cfg.FloodBurst = 1000, 1000 // the gateway's, overridden
	h.cfg.Def.FloodLimit = agents.FloodLimit{LinesPerSecond: 10, Burst: 5}
	s := h.start(t)
	texts := func() int { return len(h.audit.find("runtime_text", "")) }
	// ready and four lines take the burst; the fifth finds it empty and is
	// handled all the same, and paid back by the pause.
	want := 5
	for i := 0; i <= 4; i++ {
		if !testproc.CheckFor(10*time.Second, time.Millisecond, func() bool { return h.clock.PendingFor(floodPause) && texts() >= want }) {
			t.Fatalf("step %d: %d text lines handled, want %d (paused: %v)", i, texts(), want, h.clock.PendingFor(floodPause))
		}
		if got := texts(); got != want {
			t.Fatalf("step %d: %d text lines handled, want %d", i, got, want)
		}
		h.clock.Advance(floodPause)
		// 2.5 lines a pause, paid back line for line.
		want += []int{2, 3, 2, 3, 2}[i]
	}
	ev := h.audit.find("session_throttled", "")
	if len(ev) != 1 || !strings.Contains(ev[0].Detail, "more than 10 lines a second on stdout (bursts of 5)") {
		t.Errorf("session_throttled = %+v, want one naming the agent's limit", ev)
	}
	if s.Ended() {
		t.Errorf("stopped: %v", s.Err())
	}
}

// A runtime that exits while throttled is not read at its limit to the
// end of what it left in its pipe: its end is seen at once. The fake clock
// never moves here, so no pause ends on its own.
func TestFloodExitWhileThrottled(t *testing.T) {
	h := newHarness(t, "flood")
	h.cfg.FloodBurst = 50
	s := h.start(t)
	if !testproc.CheckFor(10*time.Second, time.Millisecond, func() bool { return h.clock.PendingFor(floodPause) }) {
		t.Fatal("never throttled")
	}
	s.Kill()
	waitDone(t, s)
	var ee *ExitError
	if !errors.As(s.Err(), &ee) || ee.Signal != "SIGKILL" {
		t.Errorf("Err() = %v, want the runtime killed by SIGKILL", s.Err())
	}
	if n := len(h.audit.find("runtime_text", "")); n <= 50 {
		t.Errorf("%d lines handled: what it left was not read", n)
	}
}
