package gateway

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// DefaultWatchDebounce is how long the definitions directory must be
// quiet after a change before it is reloaded: editors and deploy tools
// write a file in several steps (temporary file, rename, chmod).
const DefaultWatchDebounce = 300 * time.Millisecond

// Reloaded is what a reload put in force.
type Reloaded struct {
	session.Changes
	Agents int // agents in the new set
	// Cancelled are the queries failed because their channel (or the
	// category they asked for) is gone, as "q-…: code".
	Cancelled []string
	// Schedules started and stopped.
	SchedulesAdded, SchedulesRemoved int
	// Notify says what changed in the notify targets, or that their
	// file did not load ("" if neither).
	Notify string
}

// Changed reports whether the reload changed anything.
func (r Reloaded) Changed() bool {
	return !r.Empty() || len(r.Cancelled) > 0 || r.SchedulesAdded+r.SchedulesRemoved > 0 || r.Notify != ""
}

// Summary describes the reload, one line per kind of change.
func (r Reloaded) Summary() []string {
	var out []string
	add := func(what string, names []string) {
		if len(names) > 0 {
			out = append(out, what+": "+strings.Join(names, ", "))
		}
	}
	add("added", r.Added)
	add("removed (stopping once idle)", r.Removed)
	add("changed (restarting once idle)", r.Restarted)
	add("changed (in force now)", r.Updated)
	add("subscriptions re-announced to", r.Announced)
	add("queries cancelled", r.Cancelled)
	if r.SchedulesAdded+r.SchedulesRemoved > 0 {
		out = append(out, fmt.Sprintf("cron: %d schedules started, %d stopped", r.SchedulesAdded, r.SchedulesRemoved))
	}
	if r.Notify != "" {
		out = append(out, r.Notify)
	}
	return out
}

// DefinitionsError is a reload refused because the definitions directory
// does not load as a whole; the running set stays in force.
type DefinitionsError struct{ Err error }

func (e *DefinitionsError) Error() string {
	return "definitions do not load; the running set stays in force:\n" + e.Err.Error()
}

func (e *DefinitionsError) Unwrap() error { return e.Err }

// Reload loads the definitions directory again and, if the new set is
// valid as a whole, puts it in force: routing, channels, subscriptions
// and budget limits switch in one step; the supervisor adds, retires and
// replaces sessions (see session.Supervisor.Reload); cron schedules follow; and
// queries in flight whose channel is gone fail with no_channel (or
// category_not_allowed). Deliveries and approval items whose channel or
// subscription is gone are dropped when their turn comes (dropped_revoked).
// If the set is invalid nothing changes and a *DefinitionsError says
// why. by names who asked, for the event ("SIGHUP", "file change", an
// operator). Reloads run one at a time.
func (g *Gateway) Reload(ctx context.Context, by string) (Reloaded, error) {
	select {
	case <-g.running:
	case <-ctx.Done():
		return Reloaded{}, ctx.Err()
	}
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	// The notify file is read whether or not the definitions load.
	notified := g.reloadNotify(by)
	dir := g.set.Load().Dir
	opts := g.set.Load().Options() // the same format (--compat) as at start
	opts.StateDir = g.cfg.StateDir
	set, err := agents.Load(dir, opts)
	if err == nil && !g.cfg.AllowUnsandboxed {
		// A reload may not do what bcpgw run would have refused.
		if un := set.Unsandboxed(); len(un) > 0 {
			names := make([]string, len(un))
			for i, d := range un {
				names[i] = fmt.Sprintf("%s (%s)", d.Name, d.File)
			}
			err = fmt.Errorf("sandbox: none for %s, and the gateway was not started with --allow-unsandboxed", strings.Join(names, ", "))
		}
	}
	if err != nil {
		g.log.Error("reload refused: the definitions do not load; the running set stays in force", "by", by, "dir", dir)
		for _, line := range strings.Split(err.Error(), "\n") {
			g.log.Error("  " + line)
		}
		g.event(store.Event{Kind: "reload_failed", Code: "definitions_invalid", Ref: by,
			Detail: fmt.Sprintf("by %s: %v", by, err)})
		g.metrics.reloaded("failed")
		return Reloaded{}, &DefinitionsError{Err: err}
	}
	for _, w := range set.Warnings {
		g.log.Warn("definition warning", "warning", w.String())
	}
	// Routing uses the definitions plus the approved subscriptions that
	// still fit them; the others are revoked (subscribe.go).
	defs := set
	set, tell, err := g.withApproved(g.ctx, defs, "reload by "+by)
	if err != nil {
		return Reloaded{}, fmt.Errorf("reload: %w", err)
	}
	g.defs.Store(defs)
	// From here on the set is applied whole: a client that hangs up must
	// not leave the supervisor on the new set and routing on the old one.
	// Only the gateway's own end stops it.
	ch, err := g.sv.Reload(g.ctx, set)
	if err != nil {
		return Reloaded{}, fmt.Errorf("reload: %w", err)
	}
	g.set.Store(set)
	tell() // the Controllers of revoked runtime subscriptions, now that routing refuses them
	g.closeUnbatched(g.ctx, set)
	g.egress.prune(set)
	r := Reloaded{Changes: ch, Agents: len(set.Agents), Notify: notified}
	r.SchedulesAdded, r.SchedulesRemoved = g.sched.update(set)
	r.Cancelled = g.cancelOrphanQueries(set)
	summary := "no changes"
	if r.Changed() {
		summary = strings.Join(r.Summary(), "; ")
	}
	g.metrics.reloaded("ok")
	g.log.Info("definitions reloaded", "by", by, "agents", r.Agents, "changes", summary)
	g.event(store.Event{Kind: "reload_ok", Ref: by, Detail: fmt.Sprintf("by %s: %s", by, summary)})
	return r, nil
}

// cancelOrphanQueries fails the pending queries that set no longer
// allows: their channel is gone, their category is above the channel's
// new max_category, or the Reader lost BCPRespond. The Controller that
// asked hears bcp_query_error at once instead of a timeout later.
func (g *Gateway) cancelOrphanQueries(set *agents.Set) []string {
	g.mu.Lock()
	var orphans []*pendingQuery
	var why []*bcp.Error
	for _, q := range g.queries {
		link := set.Link(q.controller, q.reader)
		var e *bcp.Error
		switch {
		case link == nil:
			e = bcp.Errorf(bcp.NoChannel, "The channel between '%s' and '%s' was removed by a definition reload; query %s is cancelled", q.controller, q.reader, q.id)
		case q.spec.Category > link.MaxCategory():
			e = bcp.Errorf(bcp.CategoryNotAllowed, "Category %d is no longer allowed on the channel to '%s' (max_category %d since a definition reload); query %s is cancelled",
				q.spec.Category, q.reader, link.MaxCategory(), q.id)
		case !link.Reader.HasTool(agents.ToolRespond):
			e = bcp.Errorf(bcp.ToolNotAllowed, "Reader '%s' no longer has the %s tool since a definition reload; query %s is cancelled", q.reader, agents.ToolRespond, q.id)
		default:
			continue
		}
		orphans = append(orphans, q)
		why = append(why, e)
	}
	g.mu.Unlock()
	var out []string
	for i, q := range orphans {
		if !g.finishQuery(q) {
			continue // answered or timed out meanwhile
		}
		e := why[i]
		g.metrics.query("cancelled", e)
		g.event(store.Event{Kind: "query_cancelled", Agent: q.controller, Peer: q.reader, Code: string(e.Code), Detail: e.Error(), Ref: q.id})
		g.tellController(q, e)
		out = append(out, fmt.Sprintf("%s: %s", q.id, e.Code))
	}
	sort.Strings(out)
	return out
}

// WatchDefinitions reloads the definitions whenever a *.md file in their
// directory is created, written, renamed or removed, once the directory
// has been quiet for debounce (DefaultWatchDebounce if <= 0), or at the
// latest ten debounces after the first change. It returns
// when ctx ends, or at once if the directory cannot be watched. A change
// to an invalid set is logged and evented, and the running set stays.
func (g *Gateway) WatchDefinitions(ctx context.Context, debounce time.Duration) error {
	if debounce <= 0 {
		debounce = DefaultWatchDebounce
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch definitions: %w", err)
	}
	defer w.Close()
	dir := g.set.Load().Dir
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch definitions in %s: %w", dir, err)
	}
	g.log.Debug("watching the definitions for changes", "dir", dir)
	// Armed by the first change. Since Go 1.23 a stopped timer never
	// delivers a stale tick, so Reset needs no draining. A directory that
	// never stops changing is still reloaded every maxWait.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	maxWait := 10 * debounce
	var first time.Time // of the changes not yet reloaded; zero if none
	arm := func() {
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		timer.Reset(min(debounce, first.Add(maxWait).Sub(now)))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if !strings.EqualFold(filepath.Ext(ev.Name), ".md") || ev.Op == fsnotify.Chmod {
				continue
			}
			g.log.Debug("definitions changed", "file", ev.Name, "op", ev.Op.String())
			arm() // wait until the writes settle
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			g.log.Warn("watching the definitions", "dir", dir, "error", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				arm() // changes were missed: reload anyway
			}
		case <-timer.C:
			first = time.Time{}
			if _, err := g.Reload(ctx, "file change"); err != nil && ctx.Err() == nil {
				var de *DefinitionsError
				if !errors.As(err, &de) {
					g.log.Error("reload after a file change failed", "error", err)
				}
			}
		}
	}
}
