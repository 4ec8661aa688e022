package main

// End-to-end tests of the paged operator commands: bcpgw approvals list
// over more items than a page, and bcpgw events --agent.

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// storePendingItems writes n pending items of main's digest subscription
// into the state file of state, before a gateway opens it, and returns
// their ids in queue order.
func storePendingItems(t *testing.T, state string, n int) []string {
	t.Helper()
	path := filepath.Join(state, "bcpgw.db")
	st, err := store.Open(path) // creates the file and its schema
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	response := `{"summary":"Two sources changed, nothing urgent."}`
	now := time.Now()
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
		INSERT INTO approvals (id, controller, reader, subscription_id, category, directive, response, sha256, bits, created_at, expires_at)
		SELECT printf('ap-%07d', i), 'main', 'researcher', 'digest', 3, 'Summarize what changed today.', ?, ?, 300, ?, ? FROM n`,
		n, response, store.ContentHash([]byte(response)), now.UnixMilli(), now.Add(24*time.Hour).UnixMilli()); err != nil {
		t.Fatalf("store %d items: %v", n, err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("ap-%07d", i)
	}
	return ids
}

// approvals list reads the queue a page at a time and prints it as it
// always did: every item (here 2,345, three pages), in order, as a table
// or as one JSON array; --limit prints the first N.
func TestCLIApprovalsListPages(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	ids := storePendingItems(t, g.state, 2345)
	g.start("[]")

	items := g.approvals("pending")
	if len(items) != len(ids) {
		t.Fatalf("approvals list --json: %d items, want %d", len(items), len(ids))
	}
	for i, a := range items {
		if a.ID != ids[i] || a.Status != "pending" || a.Seq != int64(i+1) {
			t.Fatalf("item %d: %s (%s, seq %d), want %s", i, a.ID, a.Status, a.Seq, ids[i])
		}
	}
	// The JSON streamed page by page is byte for byte what encoding the
	// whole slice gives.
	var whole strings.Builder
	if err := printJSON(&whole, items); err != nil {
		t.Fatal(err)
	}
	if out := g.ok("approvals", "list", "--json").stdout; out != whole.String() {
		t.Errorf("approvals list --json differs from the slice encoded whole (%d bytes, want %d)", len(out), whole.Len())
	}

	table := strings.Split(strings.TrimSpace(g.ok("approvals", "list").stdout), "\n")
	if len(table) != len(ids)+1 || !strings.HasPrefix(table[0], "ID ") {
		t.Fatalf("approvals list: %d lines, want a header and %d rows", len(table), len(ids))
	}
	for i, row := range table[1:] {
		if !strings.HasPrefix(row, ids[i]+" ") {
			t.Fatalf("row %d is %q, want item %s", i+1, row, ids[i])
		}
	}

	for _, n := range []int{3, 1000, 1500} {
		var got []control.Approval
		opJSON(t, g.ok("approvals", "list", "--json", "--limit", fmt.Sprint(n)).stdout, &got)
		if len(got) != n || got[n-1].ID != ids[n-1] {
			t.Errorf("--limit %d: %d items", n, len(got))
		}
	}
	if rows := strings.Split(strings.TrimSpace(g.ok("approvals", "list", "--limit", "2").stdout), "\n"); len(rows) != 3 {
		t.Errorf("approvals list --limit 2: %q", rows)
	}
	if r := g.bcpgw("approvals", "list", "--limit", "-1"); r.code != 2 || !strings.Contains(r.stderr, "--limit") {
		t.Errorf("approvals list --limit -1: want a usage error\n%s", r)
	}
	if r := g.ok("approvals", "list", "--status", "approved"); strings.TrimSpace(r.stdout) != "No approved approval items." {
		t.Errorf("approvals list --status approved:\n%s", r)
	}
	if r := g.ok("approvals", "list", "--status", "approved", "--json"); r.stdout != "[]\n" {
		t.Errorf("approvals list --status approved --json: %q, want []", r.stdout)
	}
}

// events --agent prints exactly the events whose agent is the one named,
// alone or with --type; the store filters them.
func TestCLIEventsAgent(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(true, 0, "agent"))
	var all []control.Event
	opWait(t, "the Cat-2 delivery_acked event", func() (bool, string) {
		all = g.events()
		for _, e := range all {
			if e.Kind == "delivery_acked" && e.Category == 2 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", all)
	})
	last := all[len(all)-1].Seq
	upTo := func(evs []control.Event) []control.Event { // what the first listing covered
		return slices.DeleteFunc(evs, func(e control.Event) bool { return e.Seq > last })
	}
	keep := func(agent, prefix string) []control.Event {
		var out []control.Event
		for _, e := range all {
			if e.Agent == agent && strings.HasPrefix(e.Kind, prefix) {
				out = append(out, e)
			}
		}
		return out
	}
	seqs := func(evs []control.Event) []int64 {
		var out []int64
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	for _, tt := range []struct {
		args          []string
		agent, prefix string
	}{
		{[]string{"--agent", "researcher"}, "researcher", ""},
		{[]string{"--agent", "main"}, "main", ""},
		{[]string{"--agent", "main", "--type", "delivery_*"}, "main", "delivery_"},
		{[]string{"--agent", "researcher", "--type", "publish_accepted"}, "researcher", "publish_accepted"},
		{[]string{"--agent", "researcher", "--type", "delivery_*"}, "researcher", "delivery_"},
		{[]string{"--agent", "nobody"}, "nobody", ""},
	} {
		got, want := seqs(upTo(g.events(tt.args...))), seqs(keep(tt.agent, tt.prefix))
		if !slices.Equal(got, want) {
			t.Errorf("events %q: seqs %v, want %v", tt.args, got, want)
		}
		if tt.agent != "nobody" && tt.prefix != "delivery_" && len(want) == 0 {
			t.Errorf("events %q: nothing to compare; all events: %+v", tt.args, all)
		}
	}
}
