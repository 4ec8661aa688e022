// Tests of the paged reads: events by kind prefix and by agent, and
// approval items a page at a time, read through indexes.

package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// queryPlan is SQLite's EXPLAIN QUERY PLAN of q, its steps joined by "; ".
func queryPlan(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	rows, err := s.rdb.Query(`EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

// Every read of a page goes through an index, in seq order, and stops at
// its limit: no step scans the events table, and nothing sorts more than
// a limited subquery's rows. The statements are the very ones QueryEvents
// and ApprovalsAfter run, filters expanded as expandKinds does.
func TestPagedReadsUseIndexes(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	kinds := []string{"approval_queued", "approval_approved", "approval_rejected", "approvalx", "refused"}
	for i, k := range kinds {
		if err := s.AppendSync(ctx, Event{Time: time.Now(), Kind: k, Agent: fmt.Sprint("agent-", i%2)}); err != nil {
			t.Fatal(err)
		}
	}
	// The expansion of a prefix is the kinds stored under it.
	tx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := expandKinds(ctx, tx, []string{"approval_*"})
	tx.Rollback()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"approval_approved", "approval_queued", "approval_rejected"}; !reflect.DeepEqual(f.kinds, want) || len(f.ranges) != 0 {
		t.Fatalf("approval_* expanded to %q and ranges %v, want %q", f.kinds, f.ranges, want)
	}
	for _, tt := range []struct {
		name string
		q    string
		args []any
		want []string // each must be in the plan
		sort bool     // a limited subquery's rows may be sorted
	}{
		{"first kind of a prefix", sqlFirstKind, []any{"approval_", "approval`"},
			[]string{"SEARCH events USING COVERING INDEX events_by_kind (kind>? AND kind<?)"}, false},
		{"next kind of a prefix", sqlNextKind, []any{"approval_queued", "approval`"},
			[]string{"SEARCH events USING COVERING INDEX events_by_kind (kind>? AND kind<?)"}, false},
		{"prefix (several kinds)", fst(eventsSQL(EventQuery{Since: 2, Limit: 10}, f)), snd(eventsSQL(EventQuery{Since: 2, Limit: 10}, f)),
			[]string{"SEARCH events USING COVERING INDEX events_by_kind (kind=? AND seq>?)", "MERGE (UNION ALL)", "SEARCH events USING INTEGER PRIMARY KEY (rowid=?)"}, true},
		{"one kind", fst(eventsSQL(EventQuery{Since: 2, Limit: 10}, kindFilter{kinds: []string{"refused"}})), []any{"refused", 2, 10},
			[]string{"SEARCH events USING INDEX events_by_kind (kind=? AND seq>?)"}, false},
		{"agent", fst(eventsSQL(EventQuery{Since: 2, Limit: 10, Agent: "agent-1"}, kindFilter{all: true})), []any{2, "agent-1", 10},
			[]string{"SEARCH events USING INDEX events_by_agent (agent=? AND seq>?)"}, false},
		{"no filter", fst(eventsSQL(EventQuery{Since: 2, Limit: 10}, kindFilter{all: true})), []any{2, 10},
			[]string{"SEARCH events USING INTEGER PRIMARY KEY (rowid>?)"}, false},
		{"agent and prefix", fst(eventsSQL(EventQuery{Since: 2, Limit: 10, Agent: "agent-1"}, f)), snd(eventsSQL(EventQuery{Since: 2, Limit: 10, Agent: "agent-1"}, f)),
			[]string{"MERGE (UNION ALL)", "(agent=? AND seq>?)"}, true},
		{"pending approval items", sqlApprovalsByStatusAfter, []any{"pending", 7, 100},
			[]string{"SEARCH approvals USING INDEX approvals_by_status_seq (status=? AND seq>?)"}, false},
		{"all approval items", sqlApprovalsAfter, []any{7, 100},
			[]string{"SEARCH approvals USING INTEGER PRIMARY KEY (rowid>?)"}, false},
	} {
		p := queryPlan(t, s, tt.q, tt.args...)
		for _, w := range tt.want {
			if !strings.Contains(p, w) {
				t.Errorf("%s: plan of\n%s\nis\n%s\nwant %q in it", tt.name, tt.q, p, w)
			}
		}
		if strings.Contains(p, "SCAN events") || strings.Contains(p, "SCAN approvals") {
			t.Errorf("%s: plan scans a table:\n%s", tt.name, p)
		}
		if sorts := strings.Count(p, "TEMP B-TREE"); sorts > 0 && !tt.sort {
			t.Errorf("%s: plan sorts:\n%s", tt.name, p)
		} else if tt.sort && sorts > strings.Count(p, "SCAN (subquery") {
			t.Errorf("%s: plan sorts more than the limited subqueries:\n%s", tt.name, p)
		}
	}
}

// fst and snd take a statement and its arguments apart.
func fst(q string, _ []any) string   { return q }
func snd(_ string, args []any) []any { return args }

// Prefixes are byte ranges, so the LIKE and GLOB metacharacters are
// plain characters in them, and a prefix covering more kinds than are
// listed falls back to its range with the same results. Every filter
// pages: a page's cursor leads to the next without loss or repetition.
func TestQueryEventsFilters(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	type ev struct{ kind, agent string }
	var stored []ev
	add := func(kind, agent string) {
		stored = append(stored, ev{kind, agent})
		s.Append(Event{Time: time.Now(), Kind: kind, Agent: agent})
	}
	base := []string{"a_b", "axb", "a%c", "abc", "a*d", "approval_queued", "approval_x", "approvalz", "approval", "approval_approved"}
	for i := 0; i < 3; i++ {
		for j, k := range base {
			add(k, []string{"main", "scout", ""}[(i+j)%3])
		}
	}
	// More kinds under one prefix than expandKinds lists.
	for i := 0; i < maxListedKinds+6; i++ {
		add(fmt.Sprintf("many_%03d", i), "main")
		add(fmt.Sprintf("many_%03d", i), "scout")
	}
	add("\xff\xffodd", "main")
	barrier(t, s)

	// want is what a filter keeps, computed in Go.
	want := func(patterns []string, agent string) []ev {
		var out []ev
		for _, e := range stored {
			if agent != "" && e.agent != agent {
				continue
			}
			ok := len(patterns) == 0
			for _, p := range patterns {
				if prefix, isPrefix := strings.CutSuffix(p, "*"); isPrefix {
					ok = ok || strings.HasPrefix(e.kind, prefix)
				} else {
					ok = ok || e.kind == p
				}
			}
			if ok {
				out = append(out, e)
			}
		}
		return out
	}
	for _, tt := range []struct {
		kinds []string
		agent string
		n     int // the number of events kept, as a check on want
	}{
		{[]string{"a_*"}, "", 3},
		{[]string{"a%*"}, "", 3},
		{[]string{"a*d"}, "", 3},
		{[]string{"a**"}, "", 3}, // the prefix "a*": a "*" before the last is literal
		{[]string{"approval_*"}, "", 9},
		{[]string{"approval_*"}, "scout", 3},
		{[]string{"approval*", "a_b"}, "", 18},
		{[]string{"approval_*", "approval_x"}, "", 9},
		{[]string{"many_*"}, "", 2 * (maxListedKinds + 6)},
		{[]string{"many_*", "approval_*"}, "main", maxListedKinds + 6 + 3},
		{[]string{"many_01*", "refused"}, "scout", 10},
		{[]string{"\xff\xff*"}, "", 1},
		{[]string{"nothing_*"}, "", 0},
		{[]string{"nothing"}, "", 0},
		{nil, "scout", 10 + maxListedKinds + 6},
		{[]string{"*"}, "main", 10 + maxListedKinds + 6 + 1},
		{nil, "", len(stored)},
	} {
		name := fmt.Sprintf("%q agent %q", tt.kinds, tt.agent)
		w := want(tt.kinds, tt.agent)
		if len(w) != tt.n {
			t.Fatalf("%s: the test expects %d events, want() keeps %d", name, tt.n, len(w))
		}
		limits := []int{7, 1000}
		if tt.n <= 20 {
			limits = append(limits, 1)
		}
		for _, limit := range limits {
			var got []ev
			var since int64
			for pages := 0; ; pages++ {
				if pages > len(stored)+1 {
					t.Fatalf("%s, limit %d: paging does not end", name, limit)
				}
				page, err := s.QueryEvents(ctx, EventQuery{Since: since, Limit: limit, Kinds: tt.kinds, Agent: tt.agent})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if len(page) > limit {
					t.Fatalf("%s: a page of %d events, over the limit %d", name, len(page), limit)
				}
				for _, e := range page {
					if e.Seq <= since {
						t.Fatalf("%s: seq %d after cursor %d: out of order", name, e.Seq, since)
					}
					since = e.Seq
					got = append(got, ev{e.Kind, e.Agent})
				}
				if len(page) < limit {
					break
				}
			}
			if !reflect.DeepEqual(got, w) && (len(got) > 0 || len(w) > 0) {
				t.Errorf("%s, limit %d: got %d events %v\nwant %d %v", name, limit, len(got), got, len(w), w)
			}
		}
	}
}

func TestPrefixRange(t *testing.T) {
	for _, tt := range []struct {
		prefix string
		want   kindRange
	}{
		{"approval_", kindRange{lo: "approval_", hi: "approval`", bounded: true}},
		{"a%", kindRange{lo: "a%", hi: "a&", bounded: true}},
		{"a\xff", kindRange{lo: "a\xff", hi: "b", bounded: true}},
		{"\xff\xff", kindRange{lo: "\xff\xff"}},
	} {
		if got := prefixRange(tt.prefix); got != tt.want {
			t.Errorf("prefixRange(%q) = %+v, want %+v", tt.prefix, got, tt.want)
		}
	}
}

// ApprovalsAfter pages through the items of a status in seq order,
// however the statuses interleave.
func TestApprovalsAfterPages(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	t0 := time.Now()
	var pending, all []string
	for i := 0; i < 25; i++ {
		a := mustAddApproval(t, s, sampleApproval(t0))
		all = append(all, a.ID)
		if i%3 == 0 {
			if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalRejected, By: Decider{Name: "t"}, Reason: "no", At: t0}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		pending = append(pending, a.ID)
	}
	for _, tt := range []struct {
		status ApprovalStatus
		want   []string
	}{{ApprovalPending, pending}, {"", all}} {
		for _, limit := range []int{1, 7, 100} {
			var got []string
			var after int64
			for {
				page, err := s.ApprovalsAfter(ctx, tt.status, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range page {
					if tt.status != "" && a.Status != tt.status {
						t.Fatalf("status %q: item %s is %s", tt.status, a.ID, a.Status)
					}
					got = append(got, a.ID)
					after = a.Seq
				}
				if len(page) < limit {
					break
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("status %q, limit %d: %v, want %v", tt.status, limit, got, tt.want)
			}
		}
	}
	if page, err := s.ApprovalsAfter(ctx, ApprovalPending, 0, 0); err != nil || len(page) != 0 {
		t.Errorf("limit 0: %d items, %v; want none", len(page), err)
	}
}
