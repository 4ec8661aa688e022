package main

// End-to-end tests of reading a state file when no gateway runs: bcpgw
// events, report, approvals list and deliveries list after the gateway
// stopped or crashed, through the real binary.

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// offlineNotice is what stderr says when the output comes from the state
// file.
const offlineNotice = "not from a running gateway"

// stateFiles lists the state directory's files with their sizes and
// modification times: reading offline must change none of them.
func stateFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fmt.Sprintf("%d %s", fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
	}
	return out
}

// What the reading commands print from the state file once the gateway
// has stopped is what they printed through it (events: and those of the
// stop), stderr says where it comes from, nothing in the state directory
// changes, --follow is refused, and the gateway starts again afterwards
// (no lock was left). After a crash, what only the write-ahead log holds
// is read too.
func TestCLIOfflineReading(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(true, 3, "off"))
	seen := map[string]bool{}
	a := g.nextPending(seen)
	g.ok("approve", a.ID)
	b := g.nextPending(seen) // pending when the gateway stops
	g.ok("reject", b.ID, "--reason", "not today")
	c := g.nextPending(seen)
	opWait(t, "Cat-1, Cat-2 and Cat-3 deliveries acknowledged", func() (bool, string) {
		cats := map[int]bool{}
		for _, e := range g.events("--type", "delivery_acked") {
			cats[e.Category] = true
		}
		return cats[1] && cats[2] && cats[3], fmt.Sprint(cats)
	})

	// Through the running gateway: no notice.
	reads := [][]string{
		{"approvals", "list", "--json", "--status", "all"},
		{"approvals", "list", "--json"},
		{"deliveries", "list", "--json", "--status", "all"},
		{"report", "--json"},
	}
	online := map[string]result{}
	for _, args := range reads {
		r := g.ok(args...)
		if strings.Contains(r.stderr, offlineNotice) {
			t.Errorf("%q with a gateway running reads the state file:\n%s", args, r)
		}
		online[strings.Join(args, " ")] = r
	}
	evOnline := g.ok("events")
	evOnlineJSON := g.events()
	g.stop()

	before := stateFiles(t, g.state)
	offline := func(args ...string) result {
		t.Helper()
		r := g.bcpgw(args...)
		if r.code != 0 || !strings.Contains(r.stderr, offlineNotice) || !strings.Contains(r.stderr, filepath.Join(g.state, "bcpgw.db")) {
			t.Fatalf("%q without a gateway: want exit 0, and stderr naming the state file it read\n%s", args, r)
		}
		return r
	}
	for _, args := range reads {
		key := strings.Join(args, " ")
		r := offline(args...)
		switch args[0] {
		case "report":
			// The sessions have ended since; the figures are the same.
			var on, off control.Report
			opJSON(t, online[key].stdout, &on)
			opJSON(t, r.stdout, &off)
			if len(off.Sessions) == 0 || len(off.Sessions) < len(on.Sessions) {
				t.Fatalf("report: online %+v, offline %+v", on, off)
			}
			if len(off.Subscriptions) == 0 || !reflect.DeepEqual(on.Subscriptions, off.Subscriptions) {
				t.Errorf("report's subscriptions: online %+v, offline %+v", on.Subscriptions, off.Subscriptions)
			}
			for i, s := range on.Sessions {
				o := off.Sessions[i]
				if o.EndedAt.IsZero() || o.Agent != s.Agent || o.Session != s.Session || o.Bits != s.Bits || !reflect.DeepEqual(o.Channels, s.Channels) {
					t.Errorf("report session %d: online %+v, offline %+v", i, s, o)
				}
			}
		default:
			if r.stdout != online[key].stdout {
				t.Errorf("%q: offline\n%s\nonline\n%s", args, r.stdout, online[key].stdout)
			}
		}
	}
	var items []control.Approval
	opJSON(t, offline("approvals", "list", "--json").stdout, &items)
	if len(items) != 1 || items[0].ID != c.ID {
		t.Errorf("pending offline: %+v, want %s", items, c.ID)
	}
	if r := offline("approvals", "list"); !strings.Contains(r.stdout, c.ID) || !strings.HasPrefix(r.stdout, "ID ") {
		t.Errorf("approvals list offline:\n%s", r)
	}
	if r := offline("report"); !strings.Contains(r.stdout, "main ses-") || !strings.Contains(r.stdout, "from researcher") ||
		!strings.Contains(r.stdout, "\nSubscriptions\n  main <- researcher ") {
		t.Errorf("report offline:\n%s", r)
	}
	if r := offline("report", "--agent", "nosuch"); !strings.Contains(r.stdout, "No Controller sessions recorded yet.") {
		t.Errorf("report --agent nosuch offline:\n%s", r)
	}
	if r := offline("deliveries", "list"); !strings.Contains(r.stdout, "No parked deliveries.") {
		t.Errorf("deliveries list offline:\n%s", r)
	}
	if r := offline("deliveries", "list", "--status", "delivered"); !strings.HasPrefix(r.stdout, "ID ") || strings.Count(r.stdout, " delivered ") < 3 {
		t.Errorf("deliveries list --status delivered offline:\n%s", r)
	}
	// The events printed through the gateway, then those of its stop.
	evOffline := offline("events")
	if !strings.HasPrefix(evOffline.stdout, evOnline.stdout) || len(evOffline.stdout) == len(evOnline.stdout) {
		t.Errorf("events offline do not continue those online:\nonline:\n%s\noffline:\n%s", evOnline.stdout, evOffline.stdout)
	}
	evs := opParseEvents(t, offline("events", "--json").stdout)
	if len(evs) <= len(evOnlineJSON) || !reflect.DeepEqual(evs[:len(evOnlineJSON)], evOnlineJSON) {
		t.Errorf("events --json offline do not continue those online")
	}
	last := evs[len(evs)-1].Seq
	// The filters and cursors work as through the gateway.
	for _, e := range opParseEvents(t, offline("events", "--json", "--type", "approval_*", "--agent", "main").stdout) {
		if !strings.HasPrefix(e.Kind, "approval_") || e.Agent != "main" {
			t.Errorf("events --type approval_* --agent main: %+v", e)
		}
	}
	if got := opParseEvents(t, offline("events", "--json", "--since", fmt.Sprint(last-1)).stdout); len(got) != 1 || got[0].Seq != last {
		t.Errorf("events --since %d: %+v", last-1, got)
	}
	if r := g.bcpgw("events", "--type", "BAD"); r.code != 2 {
		t.Errorf("events --type BAD offline: want the usage error of the gateway\n%s", r)
	}
	// --follow needs the gateway.
	if r := g.bcpgw("events", "--follow"); r.code != 3 || !strings.Contains(r.stderr, "--follow needs a running gateway") || r.stdout != "" {
		t.Errorf("events --follow without a gateway:\n%s", r)
	}
	// Commands that change something still need the gateway.
	if r := g.bcpgw("approve", c.ID); r.code != 3 {
		t.Errorf("approve without a gateway:\n%s", r)
	}
	if after := stateFiles(t, g.state); !reflect.DeepEqual(before, after) {
		t.Errorf("reading offline changed the state directory:\nbefore %v\nafter  %v", before, after)
	}

	// The gateway starts again on it: nothing was left locked. A crash
	// leaves its last commits in the write-ahead log: read too.
	g.start("[]")
	g.ok("reject", c.ID, "--reason", "after the restart")
	g.kill()
	if _, err := os.Stat(filepath.Join(g.state, "bcpgw.db-wal")); err != nil {
		t.Fatalf("no write-ahead log after a crash: %v", err)
	}
	before = stateFiles(t, g.state)
	opJSON(t, offline("approvals", "list", "--json", "--status", "rejected").stdout, &items)
	if len(items) != 2 || items[1].ID != c.ID || items[1].Reason != "after the restart" {
		t.Errorf("rejected items after the crash: %+v", items)
	}
	if got := opParseEvents(t, offline("events", "--json", "--since", fmt.Sprint(last)).stdout); len(got) == 0 {
		t.Errorf("no events of the second run read after its crash")
	}
	if after := stateFiles(t, g.state); !reflect.DeepEqual(before, after) {
		t.Errorf("reading after a crash changed the state directory:\nbefore %v\nafter  %v", before, after)
	}
}

// A state file of an older schema is not migrated by reading it: the
// command says to run bcpgw run. The file is not changed.
func TestCLIOfflineOldSchema(t *testing.T) {
	t.Parallel()
	state := opStateDir(t)
	path := filepath.Join(state, "bcpgw.db")
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	os.Remove(path + ".lock")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 1"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := stateFiles(t, state)
	for _, args := range [][]string{{"events"}, {"report"}, {"approvals", "list"}, {"deliveries", "list"}} {
		r := run(t, runOpts{env: opEnv}, append(args, "--state", state)...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "not running") || !strings.Contains(r.stderr, "run bcpgw run on this state directory once to migrate it") {
			t.Errorf("%q on a schema of version 1: want exit 1 saying to run bcpgw run\n%s", args, r)
		}
	}
	if after := stateFiles(t, state); !reflect.DeepEqual(before, after) {
		t.Errorf("reading changed the state directory:\nbefore %v\nafter  %v", before, after)
	}
}
