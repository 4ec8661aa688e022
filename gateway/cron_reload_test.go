package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// startCronUpdatable is startCron with the scheduler handed back, for
// update. Prompts of the schedules labelled in held block until the test
// sends on h.release; the others are answered at once.
func startCronUpdatable(t *testing.T, set *agents.Set, held ...string) (*cronHarness, *scheduler) {
	t.Helper()
	h, sc := runCron(t, set, func(label string) bool { return slices.Contains(held, label) })
	// run starts the schedules on its own goroutine: wait until it has,
	// and until every schedule has armed its first firing, so that the
	// first tick moves the clock past all of them.
	cronWait(t, "the scheduler to start", func() bool {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return sc.ctx != nil
	})
	cronWait(t, "every schedule's first firing to be armed", func() bool { return cronTimers(h.clock) == len(cronEntries(sc)) })
	return h, sc
}

// of counts the cron_fired and cron_skipped events and the prompts of the
// schedule labelled label.
func (h *cronHarness) of(label string) (fired, skipped, prompts int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if e.Ref != label {
			continue
		}
		switch e.Kind {
		case "cron_fired":
			fired++
		case "cron_skipped":
			skipped++
		}
	}
	for _, p := range h.prompts {
		if strings.HasPrefix(p, "ticker/"+label+": ") {
			prompts++
		}
	}
	return fired, skipped, prompts
}

// handled is how many firings of label were handled (fired or skipped).
func (h *cronHarness) handled(label string) int {
	f, s, _ := h.of(label)
	return f + s
}

// cronTimers is the number of timers armed on c.
func cronTimers(c *clock.Fake) int { return c.Pending() }

// cronEntries is a snapshot of the scheduler's entries by label.
func cronEntries(sc *scheduler) map[string]*cronEntry {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	out := map[string]*cronEntry{}
	for _, e := range sc.entries {
		out[e.name()] = e
	}
	return out
}

// sched is one cron_schedules item of cronSet.
func sched(every, label string) string {
	return fmt.Sprintf("  - {schedule: \"@every %s\", message: \"run %s\", label: %s}\n", every, label, label)
}

func checkUpdate(t *testing.T, sc *scheduler, set *agents.Set, wantAdded, wantRemoved int) {
	t.Helper()
	if a, r := sc.update(set); a != wantAdded || r != wantRemoved {
		t.Fatalf("update = (%d added, %d removed), want (%d, %d)", a, r, wantAdded, wantRemoved)
	}
}

// A schedule added by update fires on its first due time; the schedule
// already running keeps its timing.
func TestCronUpdateAddedScheduleFires(t *testing.T) {
	h, sc := startCronUpdatable(t, cronSet(t, sched("10s", "old")))
	cronWait(t, "old's timer", func() bool { return h.clock.PendingFor(10 * time.Second) })

	checkUpdate(t, sc, cronSet(t, sched("10s", "old")+sched("7s", "new")), 1, 0)
	h.tick(t, 7*time.Second) // new is due; old is 3s away
	cronWait(t, "new's prompt", func() bool { _, _, p := h.of("new"); return p == 1 })
	// Its prompt is sent by a goroutine of its own: new's loop arms its
	// next firing (t=14) only after, and must have before time moves.
	cronWait(t, "new's next firing", func() bool { return h.clock.PendingFor(7 * time.Second) })
	if f, _, p := h.of("old"); f != 0 || p != 0 {
		t.Errorf("old fired %d times (%d prompts) after 7s of a 10s schedule", f, p)
	}
	h.tick(t, 3*time.Second) // old's first firing, on its original timing
	cronWait(t, "old's prompt", func() bool { _, _, p := h.of("old"); return p == 1 })
	h.tick(t, 4*time.Second) // new's second firing
	cronWait(t, "new's second prompt", func() bool { _, _, p := h.of("new"); return p == 2 })

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prompts[0] != "ticker/new: run new" {
		t.Errorf("first prompt = %q, want new's", h.prompts[0])
	}
}

// A schedule removed by update stops firing; the others go on.
func TestCronUpdateRemovedScheduleStops(t *testing.T) {
	h, sc := startCronUpdatable(t, cronSet(t, sched("10s", "kept")+sched("10s", "gone")))
	h.tick(t, 10*time.Second) // both fire
	cronWait(t, "both prompts", func() bool { n, _ := h.counts(); return n == 2 })
	// Both loops have armed their next firing before the update, so that
	// gone's loop is waiting when it is stopped.
	cronWait(t, "both next firings", func() bool { return cronTimers(h.clock) == 2 })

	checkUpdate(t, sc, cronSet(t, sched("10s", "kept")), 0, 1)
	cronWait(t, "gone's timer to be stopped", func() bool { return cronTimers(h.clock) == 1 })
	if _, ok := cronEntries(sc)["gone"]; ok {
		t.Error("gone is still among the entries after its removal")
	}

	for i := range 3 {
		h.tick(t, 10*time.Second)
		cronWait(t, "kept's firing", func() bool { return h.handled("kept") == i+2 })
	}
	if f, s, p := h.of("gone"); f != 1 || s != 0 || p != 1 {
		t.Errorf("gone after its removal: %d cron_fired, %d cron_skipped, %d prompts; want the 1 firing from before", f, s, p)
	}
	// A prompt is recorded by its own goroutine, a moment after its
	// cron_fired event.
	cronWait(t, "a prompt for each of kept's firings", func() bool { f, _, p := h.of("kept"); return p == f })
	if f, _, _ := h.of("kept"); f < 2 {
		t.Errorf("kept fired %d times; want it to go on firing after the update", f)
	}
}

// An unchanged schedule keeps its entry across update, busy flag
// included: while its prompt from before the update is pending, the next
// firing is skipped, not sent a second time. A changed schedule is a new
// one and is not held up by the old one's prompt.
//
// Each loop's next firing is told apart by how far away it is, so that
// no tick moves the clock before the loop it is meant for has armed.
func TestCronUpdateKeepsPendingPromptBusy(t *testing.T) {
	h, sc := startCronUpdatable(t, cronSet(t, sched("10s", "slow")+sched("10s", "edited")), "slow", "edited")
	h.tick(t, 10*time.Second) // t=10: both fire; both prompts stay pending
	cronWait(t, "both prompts", func() bool { n, _ := h.counts(); return n == 2 })
	cronWait(t, "both next firings", func() bool { return cronTimers(h.clock) == 2 }) // at t=20
	before := cronEntries(sc)
	if !before["slow"].busy.Load() || !before["edited"].busy.Load() {
		t.Fatal("the schedules are not busy while their prompts are pending")
	}

	// The same slow schedule, from a set loaded anew; edited gets another
	// message and interval, which makes it another schedule.
	edited := "  - {schedule: \"@every 7s\", message: \"run edited, differently\", label: edited}\n"
	checkUpdate(t, sc, cronSet(t, sched("10s", "slow")+edited), 1, 1)
	after := cronEntries(sc)
	if after["slow"] != before["slow"] {
		t.Error("update replaced the entry of an unchanged schedule")
	}
	if !after["slow"].busy.Load() {
		t.Error("slow lost its busy flag across the update")
	}
	if after["edited"] == before["edited"] || after["edited"].busy.Load() {
		t.Error("the edited schedule should be a new, idle entry")
	}
	// The new edited loop has armed (t=17) and the old one has stopped.
	cronWait(t, "the new edited schedule to arm, the old to stop", func() bool {
		return h.clock.PendingFor(7*time.Second) && cronTimers(h.clock) == 2
	})

	h.tick(t, 7*time.Second) // t=17: the new edited schedule fires
	cronWait(t, "the new edited schedule's first prompt", func() bool { _, _, p := h.of("edited"); return p == 2 })
	// Armed (at t=24) by its loop after the prompt's goroutine started.
	cronWait(t, "the new edited schedule's next firing", func() bool { return h.clock.PendingFor(7 * time.Second) })
	h.tick(t, 3*time.Second) // t=20: slow is due, its prompt still pending
	cronWait(t, "slow's second firing", func() bool { return h.handled("slow") == 2 })
	if f, s, p := h.of("slow"); f != 1 || s != 1 || p != 1 {
		t.Errorf("slow: %d cron_fired, %d cron_skipped, %d prompts; want its second firing skipped while the first prompt is pending", f, s, p)
	}
	if f, s, _ := h.of("edited"); f != 2 || s != 0 {
		t.Errorf("edited: %d cron_fired, %d cron_skipped; want the old and the new schedule to have fired once each", f, s)
	}
	h.mu.Lock()
	last := h.prompts[len(h.prompts)-1]
	h.mu.Unlock()
	if last != "ticker/edited: run edited, differently" {
		t.Errorf("last prompt = %q, want the edited message", last)
	}

	// Answer the three pending prompts (slow's, and the old and the new
	// edited schedule's) and drop edited, leaving slow alone on the
	// clock: it fires again once its prompt's goroutine is done.
	for range 3 {
		h.release <- struct{}{}
	}
	cronWait(t, "both next firings", func() bool {
		return h.clock.PendingFor(4*time.Second) && h.clock.PendingFor(10*time.Second) // edited at t=24, slow at t=30
	})
	checkUpdate(t, sc, cronSet(t, sched("10s", "slow")), 0, 1)
	cronWait(t, "edited to stop", func() bool { return cronTimers(h.clock) == 1 })
	for i := 0; ; i++ {
		n := h.handled("slow")
		h.tick(t, 10*time.Second)
		cronWait(t, "slow's firing to be handled", func() bool { return h.handled("slow") > n })
		if _, _, p := h.of("slow"); p == 2 {
			break
		}
		if i == 20 {
			t.Fatal("slow did not fire again after its prompt was answered")
		}
	}
}

// update reports how many schedules it started and stopped: a changed
// schedule counts as one of each, an unchanged one as neither, the same
// schedule listed twice once.
func TestCronUpdateCounts(t *testing.T) {
	a, b, c := sched("10s", "a"), sched("20s", "b"), sched("30s", "c")
	_, sc := startCronUpdatable(t, cronSet(t, a+b+c))
	if n := len(cronEntries(sc)); n != 3 {
		t.Fatalf("%d entries at start, want 3", n)
	}

	checkUpdate(t, sc, cronSet(t, a+b+c), 0, 0) // the same set, loaded anew
	// b goes, c changes its interval, d is new (and listed twice).
	cChanged := "  - {schedule: \"@every 31s\", message: \"run c\", label: c}\n"
	d := sched("40s", "d")
	checkUpdate(t, sc, cronSet(t, a+cChanged+d+d), 2, 2)
	if got := cronEntries(sc); len(got) != 3 || got["a"] == nil || got["c"] == nil || got["d"] == nil || got["c"].spec.Schedule != "@every 31s" {
		t.Errorf("entries after update: %v", got)
	}
	// Only the label changes: a new schedule too.
	aRelabeled := "  - {schedule: \"@every 10s\", message: \"run a\", label: a2}\n"
	checkUpdate(t, sc, cronSet(t, aRelabeled+cChanged+d), 1, 1)
	// No schedules at all.
	checkUpdate(t, sc, cronSet(t, "  []\n"), 0, 3)
	if n := len(cronEntries(sc)); n != 0 {
		t.Errorf("%d entries after an update to no schedules", n)
	}
	checkUpdate(t, sc, cronSet(t, a), 1, 0)
}

// update before start and after wait does nothing: no schedule starts,
// none stops, no timer is armed.
func TestCronUpdateAfterWaitIsNoop(t *testing.T) {
	set := cronSet(t, sched("10s", "a"))
	more := cronSet(t, sched("10s", "a")+sched("20s", "b"))

	t.Run("before start", func(t *testing.T) {
		clk := testproc.FakeClock()
		sc := &scheduler{clock: clk, log: hclog.NewNullLogger(), event: func(store.Event) {},
			prompt: func(context.Context, string, agents.CronSchedule) error { return nil }}
		checkUpdate(t, sc, more, 0, 0)
		if n := cronTimers(clk); n != 0 || len(cronEntries(sc)) != 0 {
			t.Errorf("%d timers, %d entries after an update before start", n, len(cronEntries(sc)))
		}
	})

	t.Run("after the context ended", func(t *testing.T) {
		clk := testproc.FakeClock()
		sc := &scheduler{clock: clk, log: hclog.NewNullLogger(), event: func(store.Event) {},
			prompt: func(context.Context, string, agents.CronSchedule) error { return nil }}
		ctx, cancel := context.WithCancel(context.Background())
		sc.start(ctx, set)
		cronWait(t, "a's timer", func() bool { return clk.PendingFor(10 * time.Second) })
		cancel()
		sc.wait()
		if n := cronTimers(clk); n != 0 {
			t.Fatalf("%d timers armed after wait", n)
		}
		checkUpdate(t, sc, more, 0, 0)
		checkUpdate(t, sc, cronSet(t, "  []\n"), 0, 0)
		if n := cronTimers(clk); n != 0 {
			t.Errorf("%d timers armed by an update after wait", n)
		}
		sc.wait() // nothing was started: returns at once
	})

	// wait before the context ends (nothing to wait for) closes the
	// scheduler too: an update then must not start loops nobody waits for.
	t.Run("after wait, context alive", func(t *testing.T) {
		clk := testproc.FakeClock()
		sc := &scheduler{clock: clk, log: hclog.NewNullLogger(), event: func(store.Event) {},
			prompt: func(context.Context, string, agents.CronSchedule) error { return nil }}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sc.start(ctx, cronSet(t, "  []\n"))
		sc.wait()
		checkUpdate(t, sc, more, 0, 0)
		if n := cronTimers(clk); n != 0 || len(cronEntries(sc)) != 0 {
			t.Errorf("%d timers, %d entries after an update after wait", n, len(cronEntries(sc)))
		}
	})
}
