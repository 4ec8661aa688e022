package control

import (
	"strings"
	"testing"
)

// A cursor older than the oldest event kept (the rest pruned by the
// gateway's retention) is answered from the oldest kept, with its seq and
// a notice; a cursor at or after it gets neither.
func TestEventsListPrunedCursor(t *testing.T) {
	fb := newFakeBackend()
	kinds := make([]string, 20)
	for i := range kinds {
		kinds[i] = "agent_started"
	}
	fb.addEvents(kinds...)
	fb.prune(11)
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	tests := []struct {
		name       string
		params     EventsParams
		wantFirst  int64 // seq of the first event returned, 0 for none
		wantLen    int
		wantNext   int64
		wantPruned int64
	}{
		{"from the start", EventsParams{}, 11, 10, 20, 11},
		{"one event missed", EventsParams{Since: 9}, 11, 10, 20, 11},
		{"just before the oldest", EventsParams{Since: 10}, 11, 10, 20, 0},
		{"after the oldest", EventsParams{Since: 15}, 16, 5, 20, 0},
		{"paged", EventsParams{Since: 3, Limit: 4}, 11, 4, 14, 11},
		{"no match", EventsParams{Types: []string{"nothing"}}, 0, 0, 10, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := cl.Events(ctx, tt.params)
			if err != nil {
				t.Fatal(err)
			}
			var first int64
			if len(page.Events) > 0 {
				first = page.Events[0].Seq
			}
			if first != tt.wantFirst || len(page.Events) != tt.wantLen || page.Next != tt.wantNext || page.PrunedBefore != tt.wantPruned {
				t.Errorf("got first %d, %d events, next %d, pruned_before %d; want %d, %d, %d, %d",
					first, len(page.Events), page.Next, page.PrunedBefore, tt.wantFirst, tt.wantLen, tt.wantNext, tt.wantPruned)
			}
			wantNotice := ""
			if tt.wantPruned > 0 {
				wantNotice = "events before 11 were pruned"
			}
			if wantNotice == "" && page.Notice != "" || !strings.Contains(page.Notice, wantNotice) {
				t.Errorf("notice %q, want %q", page.Notice, wantNotice)
			}
		})
	}

	// Everything pruned: the next seq is the oldest there can be.
	fb.prune(21)
	page, err := cl.Events(ctx, EventsParams{Since: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 0 || page.PrunedBefore != 21 || page.Next != 20 || !strings.Contains(page.Notice, "events before 21 were pruned") {
		t.Errorf("all pruned: %+v", page)
	}
	// The wire names.
	var raw map[string]any
	if err := cl.Call(ctx, MethodEventsList, EventsParams{}, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["pruned_before"] != float64(21) || raw["notice"] == nil {
		t.Errorf("raw page %v, want pruned_before and notice", raw)
	}
}

// A subscription from a pruned cursor says so in its result, and its
// notifications start at the oldest event kept.
func TestSubscribePrunedCursor(t *testing.T) {
	fb := newFakeBackend()
	fb.addEvents("a", "b", "c", "d")
	fb.prune(3)
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	since := int64(0)
	res, err := cl.Subscribe(ctx, SubscribeParams{Since: &since})
	if err != nil {
		t.Fatal(err)
	}
	if res.PrunedBefore != 3 || !strings.Contains(res.Notice, "events before 3 were pruned") {
		t.Errorf("subscribe since 0 = %+v, want pruned_before 3 and a notice", res)
	}
	if evs := notesFor(t, cl, res.Subscription, 2); evs[0].Seq != 3 || evs[1].Seq != 4 {
		t.Errorf("notified %+v, want events 3 and 4", evs)
	}
	since = 2
	if res, err := cl.Subscribe(ctx, SubscribeParams{Since: &since}); err != nil || res.PrunedBefore != 0 || res.Notice != "" {
		t.Errorf("subscribe since 2 = %+v, %v; want no notice", res, err)
	}
	if res, err := cl.Subscribe(ctx, SubscribeParams{}); err != nil || res.PrunedBefore != 0 || res.Notice != "" {
		t.Errorf("subscribe from now = %+v, %v; want no notice", res, err)
	}
}
