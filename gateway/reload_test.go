package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// alertsBlock is the research-alerts subscription in mainChannel.
const alertsBlock = `
      - id: research-alerts
        category: 1
        fields:
          - {name: has_breaking_news, type: boolean}
          - {name: priority, type: enum, values: [low, medium, high]}
          - {name: score, type: integer, min: 1, max: 5}
          - {name: source, type: enum, values: [web, mail, feed, other]}`

func TestReloadInvalidEditLeavesRunningSetUntouched(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", nil, map[string]string{
		"PUBLISH": publishes(pub("research-alerts", "main", alert, 1)),
	}), nil)
	before := e.gw.set.Load()
	pid := procKey(e.sessionOf("main").Pid())

	// Two errors: a category out of range in one file, a broken YAML
	// line in another. Neither may take effect, nor the valid edit to the
	// body of the first.
	e.edit("main", replace(t, "max_category: 3", "max_category: 7"))
	e.edit("main", replace(t, "You are main.", "You are main, edited."))
	e.edit("researcher", replace(t, "budget_bits: 100000", "budget_bits: [oops"))
	_, err := e.gw.Reload(testCtx(t), "test")
	var de *DefinitionsError
	if !errors.As(err, &de) {
		t.Fatalf("Reload of an invalid set: err = %v, want a DefinitionsError", err)
	}
	for _, want := range []string{"main.md:", "max_category", "researcher.md:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q:\n%v", want, err)
		}
	}
	if e.gw.set.Load() != before {
		t.Error("the running set was replaced by an invalid one")
	}
	ev := e.waitEvent("reload_failed", "definitions_invalid")
	if len(ev) != 1 || !strings.Contains(ev[0].Detail, "main.md:") || ev[0].Ref != "test" {
		t.Errorf("reload_failed events = %+v", ev)
	}
	if ok := e.events("reload_ok", ""); len(ok) != 0 {
		t.Errorf("reload_ok events = %+v, want none", ok)
	}

	// The old set still routes: the push is accepted and delivered to the
	// same Controller session, which was not restarted.
	e.prompt("researcher", "hello")
	v := e.waitRecords("researcher", "verdict", 1)
	if !v[0].Success {
		t.Fatalf("verdict after a refused reload = %+v", v[0])
	}
	d := e.waitRecords("main", "applied", 1)
	if d[0].Pid != pid {
		t.Errorf("delivery applied by pid %d, want the original session %d", d[0].Pid, pid)
	}
}

func TestReloadRemovingSubscriptionDropsPendingDelivery(t *testing.T) {
	clk := testproc.FakeClock()
	dir := t.TempDir()
	set, vars := writeAgents(t, dir, pair(100000, 100000, "review", nil, map[string]string{
		"PUBLISH": publishes(pub("research-alerts", "main", alert, 1)),
	}))
	// main cannot start (testrt needs its log): the delivery waits.
	mainLog := vars["main_LOG"]
	vars["main_LOG"] = ""
	e := runE2E(t, dir, set, vars, func(c *Config) { c.Clock = clk })

	e.prompt("researcher", "hello")
	if v := e.waitRecords("researcher", "verdict", 1); !v[0].Success {
		t.Fatalf("verdict = %+v", v[0])
	}
	e.waitState("main", session.StateBackoff) // its restart waits on the fake clock
	ds := e.deliveries()
	if len(ds) != 1 || ds[0].State != store.DeliveryPending {
		t.Fatalf("deliveries = %+v, want one pending", ds)
	}

	// The reload removes the subscription and mends main, which starts at
	// once; the delivery is checked again before it is sent, and dropped.
	e.edit("main", func(s string) string {
		s = replace(t, alertsBlock, "")(s)
		return replace(t, "${main_LOG}", mainLog)(s)
	})
	r := e.reload()
	if !slices.Equal(r.Restarted, []string{"main"}) || !slices.Equal(r.Announced, []string{"researcher"}) {
		t.Errorf("reload = %+v, want main restarted and researcher re-announced", r)
	}
	ev := e.waitEvent("dropped_revoked", "")
	if len(ev) != 1 || !strings.Contains(ev[0].Detail, "research-alerts") || ev[0].Agent != "main" {
		t.Errorf("dropped_revoked events = %+v", ev)
	}
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		got, err := e.store.Delivery(context.Background(), ds[0].ID)
		return err == nil && got.State == store.DeliveryDropped
	}) {
		t.Error("delivery not marked dropped")
	}
	e.waitState("main", session.StateRunning)
	if got := e.records("main", "delivery"); len(got) != 0 {
		t.Errorf("main received %+v after its subscription was removed", got)
	}

	// The Reader heard its new subscriptions, without research-alerts.
	subs := e.waitRecords("researcher", "subscriptions", 2)
	if !strings.Contains(subs[0].Detail, "main/research-alerts") || strings.Contains(subs[1].Detail, "research-alerts") ||
		!strings.Contains(subs[1].Detail, "main/research-findings") {
		t.Errorf("announcements = %q then %q", subs[0].Detail, subs[1].Detail)
	}
	// And a publish to it is now refused.
	e.prompt("researcher", "publish")
	v := e.waitRecords("researcher", "verdict", 2)
	if v[1].Success || !strings.HasPrefix(v[1].Detail, string(bcp.SubscriptionNotFound)) {
		t.Errorf("verdict after the reload = %+v, want subscription_not_found", v[1])
	}
	if ok := e.waitEvent("reload_ok", ""); !strings.Contains(ok[0].Detail, "main") {
		t.Errorf("reload_ok = %+v", ok)
	}
}

func TestReloadRestartsChangedAgentOnceIdle(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review",
		map[string]string{"DELAY": "1s"},
		map[string]string{"PUBLISH": publishes(pub("research-alerts", "main", alert, 1))}), nil)
	e.prompt("researcher", "hello")
	first := e.waitRecords("main", "delivery", 1)[0]

	// main is busy applying the delivery: a changed prompt restarts it,
	// but only once that turn is done.
	e.edit("main", replace(t, "You are main.", "You are main, reloaded."))
	r := e.reload()
	if !slices.Equal(r.Restarted, []string{"main"}) || len(r.Added)+len(r.Removed)+len(r.Updated) != 0 {
		t.Errorf("reload = %+v, want main restarted only", r)
	}
	applied := e.waitRecords("main", "applied", 1)[0]
	if applied.Pid != first.Pid {
		t.Errorf("delivery applied by pid %d, received by %d", applied.Pid, first.Pid)
	}
	var next int
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		next = e.sessionOf("main").Pid()
		return procKey(next) != first.Pid
	}) {
		t.Fatal("main was not restarted")
	}
	// The courier marks the delivery delivered after the turn's result,
	// which also lets the retirement go ahead: the new session can be up
	// before the store says so.
	if got := e.waitAllDelivered(1); len(got) != 1 {
		t.Errorf("deliveries = %+v, want the one", got)
	}
	if got := e.records("main", "delivery"); len(got) != 1 {
		t.Errorf("deliveries to main = %+v, want the one, not redelivered", got)
	}
	if ev := e.events("session_crashed", ""); len(ev) != 0 {
		t.Errorf("session_crashed events = %+v; the old session should stop gracefully", ev)
	}
	if ev := e.waitEvent("agent_retiring", ""); ev[0].Agent != "main" {
		t.Errorf("agent_retiring = %+v", ev)
	}
}

func TestReloadAddsAndRemovesAgents(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", nil, nil), nil)
	old := e.sessionOf("researcher")

	// A third agent appears (autostart); researcher goes, with main's
	// channel to it.
	extra := strings.Replace(string(mustRead(t, filepath.Join(e.dir, "main.md"))), "name: main", "name: helper", 1)
	extra = strings.Replace(extra, "tools: [BCPQuery]", "autostart: true\ntools: []", 1)
	extra = extra[:strings.Index(extra, "bcp_channels:")] + "---\nYou help.\n"
	// Its log in its own workdir: main's is outside helper's sandbox.
	extra = strings.Replace(extra, "${main_LOG}", testrtLog(e.dir, "helper"), 1)
	if err := os.WriteFile(filepath.Join(e.dir, "helper.md"), []byte(extra), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.dir, "researcher.md")); err != nil {
		t.Fatal(err)
	}
	e.edit("main", func(s string) string {
		return s[:strings.Index(s, "bcp_channels:")] + "---\nYou are main.\n"
	})
	r := e.reload()
	if !slices.Equal(r.Added, []string{"helper"}) || !slices.Equal(r.Removed, []string{"researcher"}) || !slices.Equal(r.Updated, []string{"main"}) {
		t.Errorf("reload = %+v", r)
	}
	e.waitState("helper", session.StateRunning)
	if !testproc.CheckFor(testWait, pollStep, old.Ended) {
		t.Fatal("session did not end")
	}
	if old.Err() != nil {
		t.Errorf("removed agent's session ended with %v, want a graceful stop", old.Err())
	}
	states, err := e.gw.Supervisor().States(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := states["researcher"]; ok || len(states) != 2 {
		t.Errorf("states = %v, want main and helper", states)
	}
	if _, err := e.gw.Supervisor().Ensure(testCtx(t), "researcher"); !errors.Is(err, session.ErrNoAgent) {
		t.Errorf("Ensure(researcher) = %v, want session.ErrNoAgent", err)
	}
}

func TestReloadCancelsQueriesOnRemovedChannel(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review",
		queriesOf(cat1Query("req-1", "researcher")),
		map[string]string{"SILENT": "1"}), nil)
	e.prompt("main", "query")
	sent := e.waitRecords("main", "query_sent", 1)[0]
	e.waitRecords("researcher", "query", 1)

	e.edit("main", func(s string) string {
		return s[:strings.Index(s, "bcp_channels:")] + "---\nYou are main.\n"
	})
	e.edit("researcher", func(s string) string {
		return s[:strings.Index(s, "bcp_channels:")] + "---\nYou are researcher.\n"
	})
	r := e.reload()
	if len(r.Cancelled) != 1 || !strings.HasPrefix(r.Cancelled[0], sent.QueryID+": no_channel") {
		t.Errorf("cancelled = %v, want %s", r.Cancelled, sent.QueryID)
	}
	failed := e.waitRecords("main", "query_failed", 1)[0]
	if failed.RequestID != "req-1" || !strings.HasPrefix(failed.Detail, "no_channel:") || !strings.Contains(failed.Detail, "reload") {
		t.Errorf("query_failed = %+v", failed)
	}
	if e.queryPending(sent.QueryID) != nil {
		t.Error("the query is still pending")
	}
	ev := e.waitEvent("query_cancelled", "no_channel")
	if ev[0].Ref != sent.QueryID {
		t.Errorf("query_cancelled = %+v", ev)
	}
}

func TestReloadUnchangedSetChangesNothing(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", nil, nil), nil)
	pid := e.sessionOf("main").Pid()
	// A blank line moves every line number; the definition is the same.
	e.edit("main", replace(t, "name: main\n", "name: main\n\n"))
	r := e.reload()
	if r.Changed() {
		t.Errorf("reload of an unchanged set = %+v, summary %v", r, r.Summary())
	}
	if e.sessionOf("main").Pid() != pid {
		t.Error("main was restarted by a reload that changed nothing")
	}
	if ev := e.waitEvent("reload_ok", ""); !strings.HasSuffix(ev[0].Detail, "no changes") {
		t.Errorf("reload_ok = %+v", ev)
	}
}

func TestReloadWatchesTheDirectory(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", nil, nil), func(c *Config) {
		c.Watch, c.WatchDebounce = true, 50*time.Millisecond
	})
	if !testproc.CheckFor(testWait, pollStep, func() bool { return strings.Contains(e.logs.String(), "watching the definitions") }) {
		t.Fatal("the directory is not watched")
	}
	waitWatched := func(what string, ok func() bool) {
		t.Helper()
		if !testproc.CheckFor(testWait, pollStep, ok) {
			t.Fatalf("%s: not reloaded; events: %+v", what, e.events("reload_failed", ""))
		}
	}
	e.edit("main", replace(t, "budget_bits: 100000", "budget_bits: 5000"))
	var mainDef *agents.Definition
	waitWatched("budget edit", func() bool {
		mainDef = e.gw.set.Load().Agent("main")
		return mainDef.Channel("researcher").BudgetBits == 5000
	})
	// An invalid edit is evented and changes nothing.
	e.edit("main", replace(t, "max_category: 3", "max_category: 9"))
	e.waitEvent("reload_failed", "definitions_invalid")
	if e.gw.set.Load().Agent("main") != mainDef {
		t.Error("an invalid edit replaced the running definition")
	}
	// Files that are not definitions are ignored.
	n := len(e.events("reload_failed", ""))
	if err := os.WriteFile(filepath.Join(e.dir, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.edit("main", func(s string) string {
		s = replace(t, "max_category: 9", "max_category: 3")(s)
		return replace(t, "budget_bits: 5000", "budget_bits: 6000")(s)
	})
	waitWatched("fix", func() bool { return e.gw.set.Load().Agent("main").Channel("researcher").BudgetBits == 6000 })
	if got := len(e.events("reload_failed", "")); got != n {
		t.Errorf("reload_failed events went from %d to %d", n, got)
	}
}
