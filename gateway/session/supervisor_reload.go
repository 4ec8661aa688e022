package session

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/bcpgw/bcpgw/agents"
)

// Changes is what a reload changed in the supervisor's agents, each list
// sorted by name.
type Changes struct {
	Added   []string // new agents
	Removed []string // agents gone from the definitions; their sessions end once idle
	// Restarted are agents whose runtime was started with something that
	// changed (argv, env, workdir, model, tools, prompt, limits): their
	// sessions are replaced once idle.
	Restarted []string
	// Updated are agents whose definitions changed in ways that apply to
	// a running session at once (channels, subscriptions, budgets, cron,
	// description).
	Updated []string
	// Announced are Readers whose running sessions were sent their new
	// subscriptions.
	Announced []string
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.Added)+len(c.Removed)+len(c.Restarted)+len(c.Updated)+len(c.Announced) == 0
}

// Reload puts set in force for the agents: new agents are added (and
// started if autostart), removed ones end once idle, and agents whose
// runtime would be started differently have their sessions replaced
// once idle. Readers whose subscriptions changed are told at once. The
// caller has validated set.
func (sv *Supervisor) Reload(ctx context.Context, set *agents.Set) (Changes, error) {
	return ask(ctx, sv, func(reply chan Changes) svMsg { return reloadReq{set: set, reply: reply} })
}

// StartWith replaces the set Run starts with (SupervisorConfig.Set): the
// gateway's definitions plus the subscriptions operators approved, which
// it reads from its store just before Run. Call it before Run, from the
// goroutine that calls Run; afterwards use Reload.
func (sv *Supervisor) StartWith(set *agents.Set) { sv.set = set }

// reload applies a new set; it runs on Run's goroutine.
func (sv *Supervisor) reload(ctx context.Context, all map[string]*agent, set *agents.Set) Changes {
	var ch Changes
	sv.set = set
	for _, d := range set.Agents {
		a := all[d.Name]
		switch {
		case a == nil:
			a = &agent{def: d, state: StateStopped}
			all[d.Name] = a
			ch.Added = append(ch.Added, d.Name)
			if d.Autostart {
				sv.start(ctx, a)
			}
			continue
		case a.removed || restartNeeded(a.def, d):
			// Brought back while its old session was still ending counts
			// as a restart too: the old session must not be handed out.
			a.def, a.removed = d, false
			ch.Restarted = append(ch.Restarted, d.Name)
			sv.replace(ctx, a, "definition changed")
		case !d.Equal(a.def):
			a.def = d
			ch.Updated = append(ch.Updated, d.Name)
		default:
			a.def = d
		}
		if sv.announce(a) {
			ch.Announced = append(ch.Announced, d.Name)
		}
	}
	for name, a := range all {
		if a.removed || set.Agent(name) != nil {
			continue
		}
		a.removed = true
		ch.Removed = append(ch.Removed, name)
		sv.audit(a, "agent_removed", "removed from the definitions")
		a.timerGen++ // no pending restart
		for _, w := range a.waiters {
			w <- result{err: fmt.Errorf("agent %q was removed from the definitions: %w", name, ErrNoAgent)}
		}
		a.waiters = nil
		switch {
		case a.state == StateStarting:
			// retired once its start completes (startedEv)
		case a.sess != nil:
			sv.retire(a)
		default:
			delete(all, name)
		}
	}
	for _, l := range [][]string{ch.Added, ch.Removed, ch.Restarted, ch.Updated, ch.Announced} {
		slices.Sort(l)
	}
	return ch
}

// replace arranges for a's session to be replaced by one started with its
// new definition. A failed agent gets a fresh start: its definition
// changed, which may be the fix.
func (sv *Supervisor) replace(ctx context.Context, a *agent, why string) {
	if a.state == StateFailed {
		clearFailed(a)
		sv.audit(a, "agent_reset", why)
	}
	switch {
	case a.state == StateStarting:
		a.restart = why // retired once its start completes
	case a.sess != nil:
		a.restart = why
		if a.sess != a.stopping {
			sv.retire(a)
		}
	case a.state == StateBackoff:
		// Waiting out a crash: the new definition may be the fix, so it
		// is tried now, on a fresh backoff.
		a.timerGen++
		a.attempt = 0
		sv.start(ctx, a)
	case a.state == StateStopped && a.def.Autostart && !a.held:
		sv.start(ctx, a)
	}
}

// retire asks a's running session to end once idle and stops handing it
// out: work waits for the next session (or, for a removed agent, fails).
func (sv *Supervisor) retire(a *agent) {
	why := "definition changed; restarting once idle"
	if a.removed {
		why = "agent removed from the definitions; stopping once idle"
	}
	a.stopping = a.sess
	sv.audit(a, "agent_retiring", why)
	a.sess.stopWhenIdle(why)
}

// announce sends a's running session its subscriptions under the set in
// force, if they differ from what it was told. It reports whether it did.
func (sv *Supervisor) announce(a *agent) bool {
	if a.sess == nil || a.sess.Ended() {
		return false
	}
	subs := announcements(sv.set, a.def.Name)
	if reflect.DeepEqual(subs, a.announced) || (len(subs) == 0 && len(a.announced) == 0) {
		return false
	}
	a.announced = subs
	a.sess.setAnnounced(subs)
	return true
}

// restartNeeded reports whether a session started from old would differ
// from one started from new: its process (argv, env, workdir), its start
// message (tools, model, system prompt, max turns), how the gateway reads
// and writes it (runtime dialect, flood limit) or its lifecycle (idle and
// turn timeouts, autostart). Channels, subscriptions, budgets and cron
// apply to a running session at once and need no restart.
func restartNeeded(old, new *agents.Definition) bool {
	return !slices.Equal(old.Runtime, new.Runtime) ||
		old.Workdir != new.Workdir ||
		!maps.Equal(old.Env, new.Env) ||
		old.Model != new.Model ||
		!slices.Equal(old.Tools, new.Tools) ||
		old.MaxTurns != new.MaxTurns ||
		old.SystemPrompt != new.SystemPrompt ||
		old.IdleTimeout != new.IdleTimeout ||
		old.TurnTimeout != new.TurnTimeout ||
		old.FloodLimit != new.FloodLimit ||
		old.Dialect != new.Dialect ||
		old.Autostart != new.Autostart ||
		!sandboxEqual(old.Sandbox, new.Sandbox)
}

// sandboxEqual compares two sandbox policies as the runtime would see
// them: a changed policy needs a new sandbox.
func sandboxEqual(a, b agents.Sandbox) bool {
	return a.None == b.None && slices.Equal(a.ReadOnly, b.ReadOnly) && slices.Equal(a.ReadWrite, b.ReadWrite) &&
		a.Network.Mode == b.Network.Mode && slices.Equal(a.Network.Allow, b.Network.Allow)
}
