package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// cronHarness runs a scheduler on a fake clock with a prompt function
// that blocks until the test releases it.
type cronHarness struct {
	clock   *clock.Fake
	mu      sync.Mutex
	events  []store.Event
	prompts []string // agent/label of each prompt sent
	release chan struct{}
}

func startCron(t *testing.T, set *agents.Set) *cronHarness {
	t.Helper()
	h, _ := runCron(t, set, func(string) bool { return true })
	return h
}

// runCron runs a scheduler on set until the end of the test. The prompts
// of schedules whose label hold accepts block until the test sends on
// h.release; the others are answered at once.
func runCron(t *testing.T, set *agents.Set, hold func(label string) bool) (*cronHarness, *scheduler) {
	t.Helper()
	h := &cronHarness{clock: testproc.FakeClock(), release: make(chan struct{})}
	sc := &scheduler{
		clock: h.clock, log: hclog.NewNullLogger(),
		event: func(e store.Event) { h.mu.Lock(); h.events = append(h.events, e); h.mu.Unlock() },
		prompt: func(ctx context.Context, agent string, c agents.CronSchedule) error {
			h.mu.Lock()
			h.prompts = append(h.prompts, agent+"/"+c.Label+": "+c.Message)
			h.mu.Unlock()
			if !hold(c.Label) {
				return nil
			}
			select {
			case <-h.release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sc.run(ctx, set) }()
	t.Cleanup(func() { cancel(); <-done })
	return h, sc
}

func (h *cronHarness) counts() (prompts int, kinds map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kinds = map[string]int{}
	for _, e := range h.events {
		kinds[e.Kind]++
	}
	return len(h.prompts), kinds
}

// tick advances the clock by d once a timer is set d from now, so the
// scheduler has armed its next firing before time moves.
func (h *cronHarness) tick(t *testing.T, d time.Duration) {
	t.Helper()
	cronWait(t, "the next firing to be armed", func() bool { return h.clock.PendingFor(d) })
	h.clock.Advance(d)
}

func cronWait(t *testing.T, what string, fn func() bool) {
	t.Helper()
	if !testproc.CheckFor(testWait, time.Millisecond, fn) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func cronSet(t *testing.T, schedules string) *agents.Set {
	t.Helper()
	dir := t.TempDir()
	def := "---\nname: ticker\nruntime: [/bin/true]\ncron_schedules:\n" + schedules + "---\n"
	if err := os.WriteFile(filepath.Join(dir, "ticker.md"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestCronFiresAndSkipsWhilePending(t *testing.T) {
	set := cronSet(t, "  - {schedule: \"@every 10s\", message: \"check the feeds\", label: feeds}\n")
	h := startCron(t, set)

	h.tick(t, 10*time.Second) // fires
	cronWait(t, "the first prompt", func() bool { n, _ := h.counts(); return n == 1 })
	h.tick(t, 10*time.Second) // the first prompt is still pending: skipped
	h.tick(t, 10*time.Second) // skipped again
	cronWait(t, "two skips", func() bool { _, k := h.counts(); return k["cron_skipped"] == 2 })
	h.release <- struct{}{} // the first prompt is answered
	// The schedule is free again once the prompt's goroutine has
	// finished, a moment after the answer: tick until it fires.
	for i := 0; ; i++ {
		_, before := h.counts()
		h.tick(t, 10*time.Second)
		cronWait(t, "the firing to be handled", func() bool {
			n, k := h.counts()
			return n == 2 || k["cron_skipped"] > before["cron_skipped"]
		})
		if n, _ := h.counts(); n == 2 {
			break
		}
		if i == 20 {
			t.Fatal("the schedule did not fire again after its prompt was answered")
		}
	}

	n, kinds := h.counts()
	if n != 2 || kinds["cron_fired"] != 2 || kinds["cron_skipped"] < 2 {
		t.Errorf("prompts %d, events %v; want 2 prompts, 2 cron_fired, at least 2 cron_skipped", n, kinds)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prompts[0] != "ticker/feeds: check the feeds" {
		t.Errorf("prompt = %q", h.prompts[0])
	}
	for _, e := range h.events {
		if e.Agent != "ticker" || e.Ref != "feeds" {
			t.Errorf("event %+v: want agent ticker, ref feeds", e)
		}
		if e.Kind == "cron_skipped" && !strings.Contains(e.Detail, "still pending") {
			t.Errorf("skip detail = %q", e.Detail)
		}
	}
}

func TestCronSchedulesAreIndependent(t *testing.T) {
	set := cronSet(t, "  - {schedule: \"@every 10s\", message: a, label: fast}\n  - {schedule: \"@every 20s\", message: b}\n")
	h := startCron(t, set)
	// Both timers armed: 10s and 20s from now.
	cronWait(t, "both timers", func() bool { return h.clock.PendingFor(10*time.Second) && h.clock.PendingFor(20*time.Second) })
	h.clock.Advance(20 * time.Second) // both due: each fires once
	cronWait(t, "the second prompt", func() bool { n, _ := h.counts(); return n == 2 })
	_, kinds := h.counts()
	if kinds["cron_fired"] != 2 || kinds["cron_skipped"] != 0 {
		t.Errorf("events %v; want 2 cron_fired, none skipped (a busy schedule does not hold up another)", kinds)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var unlabeled bool
	for _, e := range h.events {
		unlabeled = unlabeled || e.Ref == "@every 20s"
	}
	if !unlabeled {
		t.Errorf("an unlabeled schedule's events should name its schedule: %+v", h.events)
	}
}

// End to end: a schedule starts its agent's session and reaches the
// runtime as a prompt, with cron_fired events, on the real clock.
func TestCronPromptsReachTheRuntime(t *testing.T) {
	e := startE2E(t, []agentSpec{{name: "ticker", front: "cron_schedules:\n  - {schedule: \"@every 1s\", message: \"tick\", label: pulse}"}}, nil)
	got := e.waitRecords("ticker", "prompt", 2)
	for _, r := range got {
		if r.Prompt != "tick" {
			t.Errorf("prompt = %q, want tick", r.Prompt)
		}
	}
	var fired []store.Event
	testproc.CheckFor(testWait, pollStep, func() bool { fired = e.events("cron_fired", ""); return len(fired) >= 2 })
	if len(fired) < 2 || fired[0].Agent != "ticker" || fired[0].Ref != "pulse" {
		t.Errorf("cron_fired events = %+v", fired)
	}
	if started := e.events("session_started", ""); len(started) != 1 {
		t.Errorf("session_started events = %d, want 1: the session started for the first firing is reused", len(started))
	}
}
