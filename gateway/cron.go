package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/robfig/cron/v3"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/session"
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
//
// A reload hands the scheduler a new set (update): schedules that did not
// change keep their timers and their pending prompt, new ones start, and
// removed ones stop firing (a prompt of theirs already sent still runs).
type scheduler struct {
	clock Clock
	log   hclog.Logger
	event func(store.Event)
	// prompt sends one firing's prompt and returns when the agent has
	// answered it (or failed to).
	prompt func(ctx context.Context, agent string, c agents.CronSchedule) error

	mu      sync.Mutex // guards the fields below
	ctx     context.Context
	entries map[cronKey]*cronEntry
	closed  bool           // wait was called: start nothing more
	wg      sync.WaitGroup // loops and the prompts they sent
}

// cronKey identifies a schedule across reloads.
type cronKey struct {
	agent string
	spec  agents.CronSchedule
}

// cronEntry is one schedule of one agent.
type cronEntry struct {
	agent string
	spec  agents.CronSchedule
	sched cron.Schedule
	stop  context.CancelFunc // ends its loop
	busy  atomic.Bool        // its last prompt is still queued or running
}

// name is how events and logs refer to the entry: its label, else its
// schedule.
func (e *cronEntry) name() string {
	if e.spec.Label != "" {
		return e.spec.Label
	}
	return e.spec.Schedule
}

// run fires the schedules of set until ctx ends, then waits for the
// prompts it started.
func (sc *scheduler) run(ctx context.Context, set *agents.Set) {
	sc.start(ctx, set)
	<-ctx.Done()
	sc.wait()
}

// start begins firing the schedules of set until ctx ends.
func (sc *scheduler) start(ctx context.Context, set *agents.Set) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.ctx = ctx
	sc.apply(set)
}

// update switches to the schedules of set and reports how many started
// and stopped. Before start, or after wait, it does nothing.
func (sc *scheduler) update(set *agents.Set) (added, removed int) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.ctx == nil || sc.closed || sc.ctx.Err() != nil {
		return 0, 0
	}
	return sc.apply(set)
}

// wait waits, once ctx has ended, for the loops and the prompts they sent.
func (sc *scheduler) wait() {
	sc.mu.Lock()
	sc.closed = true
	sc.mu.Unlock()
	sc.wg.Wait()
}

// apply starts the schedules of set not yet running and stops those set
// no longer has. The set was validated at load, so a parse error here is
// logged and that schedule skipped. sc.mu is held.
func (sc *scheduler) apply(set *agents.Set) (added, removed int) {
	next := map[cronKey]*cronEntry{}
	for _, d := range set.Agents {
		for _, c := range d.CronSchedules {
			k := cronKey{agent: d.Name, spec: c}
			if e := sc.entries[k]; e != nil {
				next[k] = e
				continue
			}
			if next[k] != nil {
				continue // the same schedule twice fires once
			}
			sched, err := cron.ParseStandard(c.Schedule)
			if err != nil {
				sc.log.Error("cron schedule does not parse; skipped", "agent", d.Name, "schedule", c.Schedule, "error", err)
				continue
			}
			e := &cronEntry{agent: d.Name, spec: c, sched: sched}
			ctx, cancel := context.WithCancel(sc.ctx)
			e.stop = cancel
			next[k] = e
			added++
			sc.wg.Add(1)
			go func() {
				defer sc.wg.Done()
				sc.loop(ctx, e)
			}()
		}
	}
	for k, e := range sc.entries {
		if next[k] == nil {
			e.stop()
			removed++
		}
	}
	sc.entries = next
	return added, removed
}

// loop waits for each firing time of e in turn and fires.
func (sc *scheduler) loop(ctx context.Context, e *cronEntry) {
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
		if ctx.Err() != nil {
			return // removed by a reload just as it came due
		}
		sc.fire(e)
	}
}

// fire sends e's prompt unless the previous one is still pending. The
// prompt lives as long as the scheduler, not the entry: a reload that
// removes the schedule does not cut short a prompt already sent.
func (sc *scheduler) fire(e *cronEntry) {
	ctx := sc.ctx // set before any loop started; never changed
	ev := store.Event{Time: sc.clock.Now(), Agent: e.agent, Ref: e.name()}
	if !e.busy.CompareAndSwap(false, true) {
		ev.Kind, ev.Detail = "cron_skipped", fmt.Sprintf("%s: the previous prompt of this schedule is still pending", e.name())
		sc.event(ev)
		return
	}
	ev.Kind, ev.Detail = "cron_fired", fmt.Sprintf("%s: %s", e.name(), e.spec.Schedule)
	sc.event(ev)
	sc.wg.Add(1) // the loop calling fire is counted: never from zero
	go func() {
		defer sc.wg.Done()
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
	meta := map[string]any{"source": "cron", "schedule": c.Schedule}
	if c.Label != "" {
		meta["label"] = c.Label
	}
	msg := runtime.Prompt{Type: runtime.TypePrompt, Content: c.Message, Metadata: meta}
	_, err := g.bringTurn(ctx, turnJob{
		agent: agent,
		msg:   func(*session.Session) any { return msg },
		// A prompt the runtime was never handed goes to the next session,
		// at most three in all: a session being replaced after a reload
		// takes no new turns, and one that ends (a crash) drops the turns
		// queued behind the one in flight. Never sent, it is sent once.
		// One that was handed to the runtime is not sent again.
		retry: func(attempt int, sent bool, err error) (time.Duration, bool) {
			return 0, !sent && errors.Is(err, session.ErrSessionClosed) && attempt < 2
		},
	})
	return err
}
