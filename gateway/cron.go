package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/robfig/cron/v3"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// scheduler fires the definitions' cron_schedules: each firing sends the
// schedule's message to its agent as a prompt, starting the agent's
// session if needed. A firing while the previous prompt of the same
// schedule is still queued or running is skipped and evented
// (cron_skipped), so a slow agent does not pile up prompts.
//
// Schedules are parsed with robfig/cron's standard parser (five fields,
// descriptors such as @hourly and @every 30s, an optional TZ= prefix), but
// timed with the gateway's Clock, so tests advance time instead of
// waiting for it.
type scheduler struct {
	clock Clock
	log   hclog.Logger
	event func(store.Event)
	// prompt sends one firing's prompt and returns when the agent has
	// answered it (or failed to).
	prompt func(ctx context.Context, agent string, c agents.CronSchedule) error
}

// cronEntry is one schedule of one agent.
type cronEntry struct {
	agent string
	spec  agents.CronSchedule
	sched cron.Schedule
	busy  atomic.Bool // its last prompt is still queued or running
}

// name is how events and logs refer to the entry: its label, else its
// schedule.
func (e *cronEntry) name() string {
	if e.spec.Label != "" {
		return e.spec.Label
	}
	return e.spec.Schedule
}

// entries parses the schedules of set. The set was validated at load, so
// a parse error here is logged and that schedule skipped.
func (sc *scheduler) entries(set *agents.Set) []*cronEntry {
	var out []*cronEntry
	for _, d := range set.Agents {
		for _, c := range d.CronSchedules {
			sched, err := cron.ParseStandard(c.Schedule)
			if err != nil {
				sc.log.Error("cron schedule does not parse; skipped", "agent", d.Name, "schedule", c.Schedule, "error", err)
				continue
			}
			out = append(out, &cronEntry{agent: d.Name, spec: c, sched: sched})
		}
	}
	return out
}

// run fires the schedules of set until ctx ends, then waits for the
// prompts it started.
func (sc *scheduler) run(ctx context.Context, set *agents.Set) {
	var wg sync.WaitGroup
	for _, e := range sc.entries(set) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc.loop(ctx, e, &wg)
		}()
	}
	wg.Wait()
}

// loop waits for each firing time of e in turn and fires.
func (sc *scheduler) loop(ctx context.Context, e *cronEntry, wg *sync.WaitGroup) {
	for {
		now := sc.clock.Now()
		next := e.sched.Next(now)
		if next.IsZero() {
			return // a schedule that never fires
		}
		t := sc.clock.NewTimer(next.Sub(now))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return
		}
		sc.fire(ctx, e, wg)
	}
}

// fire sends e's prompt unless the previous one is still pending.
func (sc *scheduler) fire(ctx context.Context, e *cronEntry, wg *sync.WaitGroup) {
	ev := store.Event{Time: sc.clock.Now(), Agent: e.agent, Ref: e.name()}
	if !e.busy.CompareAndSwap(false, true) {
		ev.Kind, ev.Detail = "cron_skipped", fmt.Sprintf("%s: the previous prompt of this schedule is still pending", e.name())
		sc.event(ev)
		return
	}
	ev.Kind, ev.Detail = "cron_fired", fmt.Sprintf("%s: %s", e.name(), e.spec.Schedule)
	sc.event(ev)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer e.busy.Store(false)
		if err := sc.prompt(ctx, e.agent, e.spec); err != nil && ctx.Err() == nil {
			sc.log.Warn("cron prompt failed", "agent", e.agent, "schedule", e.name(), "error", err)
			sc.event(store.Event{Time: sc.clock.Now(), Kind: "cron_failed", Agent: e.agent, Ref: e.name(),
				Detail: fmt.Sprintf("%s: %v", e.name(), err)})
		}
	}()
}

// cronPrompt sends a schedule's message to agent as a prompt turn and
// waits for the runtime's result.
func (g *Gateway) cronPrompt(ctx context.Context, agent string, c agents.CronSchedule) error {
	sess, err := g.sv.Ensure(ctx, agent)
	if err != nil {
		return err
	}
	meta := map[string]any{"source": "cron", "schedule": c.Schedule}
	if c.Label != "" {
		meta["label"] = c.Label
	}
	done, err := sess.Turn(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: c.Message, Metadata: meta})
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
