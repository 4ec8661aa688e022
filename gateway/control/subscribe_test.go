package control

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// nextNote returns the next notification of cl, failing if none comes.
func nextNote(t *testing.T, cl *Client) EventNotification {
	t.Helper()
	select {
	case n, ok := <-cl.Notifications():
		if !ok {
			t.Fatalf("the connection ended: %v", cl.Err())
		}
		return n
	case <-time.After(hangGuard):
		t.Fatal("timed out waiting for a notification")
		return EventNotification{}
	}
}

// notesFor collects n notifications of subscription sub, failing on any
// of another subscription.
func notesFor(t *testing.T, cl *Client, sub string, n int) []Event {
	t.Helper()
	var evs []Event
	for len(evs) < n {
		note := nextNote(t, cl)
		if note.Subscription != sub {
			t.Fatalf("notification of subscription %q (event %d %s), want only %q", note.Subscription, note.Event.Seq, note.Event.Kind, sub)
		}
		evs = append(evs, note.Event)
	}
	return evs
}

func filterKinds(evs []Event, types []string) []Event {
	var out []Event
	for _, e := range evs {
		if matchKind(types, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

func TestSubscribeTypes(t *testing.T) {
	kinds := []string{
		"agent_started", "approval_queued", "approvals_purged", "approval", "agent_crashed",
		"approval_decided", "delivery_sent", "approval_expired", "agent_started",
	}
	tests := []struct {
		name  string
		types []string
		want  []string // the kinds notified, in order
	}{
		{"one kind", []string{"agent_started"}, []string{"agent_started", "agent_started"}},
		{"prefix", []string{"approval_*"}, []string{"approval_queued", "approval_decided", "approval_expired"}},
		{"prefix and kind", []string{"agent_*", "delivery_sent"}, []string{"agent_started", "agent_crashed", "delivery_sent", "agent_started"}},
		{"all", nil, kinds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := newFakeBackend()
			fb.addEvents("old_event", "agent_started") // before the subscription: not sent
			ts := startServer(t, fb, ServerConfig{})
			cl := dial(t, ts.path)

			res, err := cl.Subscribe(callCtx(t), SubscribeParams{Types: tt.types})
			if err != nil {
				t.Fatal(err)
			}
			if res.Subscription == "" || res.Cursor != 2 {
				t.Fatalf("subscribe = %+v, want an id and cursor 2 (the last event stored)", res)
			}
			added := fb.addEvents(kinds...)

			got := notesFor(t, cl, res.Subscription, len(tt.want))
			var gotKinds []string
			for _, e := range got {
				gotKinds = append(gotKinds, e.Kind)
			}
			if strings.Join(gotKinds, ",") != strings.Join(tt.want, ",") {
				t.Errorf("notified kinds %v, want %v", gotKinds, tt.want)
			}
			if g, w := asJSON(t, got), asJSON(t, filterKinds(added, tt.types)); g != w {
				t.Errorf("events\n got %s\nwant %s", g, w)
			}
			// Nothing that does not match trails behind: the next
			// notification is the next matching event.
			next := filterKinds(fb.addEvents("unrelated_kind", tt.want[0]), tt.types)[0]
			if e := notesFor(t, cl, res.Subscription, 1)[0]; e.Seq != next.Seq {
				t.Errorf("next notification is event %d (%s), want %d (%s)", e.Seq, e.Kind, next.Seq, next.Kind)
			}
		})
	}
}

// With since, the backlog is replayed and live events follow, while
// events keep being stored, without gap or duplicate; the response comes
// before any notification.
func TestSubscribeSinceReplaysThenLive(t *testing.T) {
	fb := newFakeBackend()
	const backlog, live, since = 600, 600, 100
	for range backlog {
		fb.addEvents("agent_started")
	}
	ts := startServer(t, fb, ServerConfig{})
	rc := dialRaw(t, ts.path)

	rc.writeLine(reqLine(1, MethodSubscribe, map[string]any{"since": since}))
	// Store the live events while the backlog is being sent.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < live; i += 7 {
			kinds := make([]string, min(7, live-i))
			for j := range kinds {
				kinds[j] = fmt.Sprintf("kind_%d", j)
			}
			fb.addEvents(kinds...)
			time.Sleep(time.Millisecond)
		}
	}()
	t.Cleanup(wg.Wait)

	m := rc.readMsg()
	if string(m.ID) != "1" || m.Error != nil {
		t.Fatalf("first line = %+v, want the subscribe response", m)
	}
	var res SubscribeResult
	if err := json.Unmarshal(m.Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.Subscription == "" || res.Cursor != since {
		t.Fatalf("subscribe = %+v, want an id and cursor %d", res, since)
	}
	for want := int64(since + 1); want <= backlog+live; want++ {
		n := rc.readMsg().notification(t)
		if n.Subscription != res.Subscription {
			t.Fatalf("notification of %q, want %q", n.Subscription, res.Subscription)
		}
		if n.Event.Seq != want {
			t.Fatalf("notification of event %d, want %d (no gap, no duplicate)", n.Event.Seq, want)
		}
	}
}

func TestSubscribeSinceBounds(t *testing.T) {
	fb := newFakeBackend()
	fb.addEvents("a", "b", "c")
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	tests := []struct {
		since      int64
		wantCursor int64
		wantFirst  int64
	}{
		{-5, 0, 1},
		{0, 0, 1},
		{2, 2, 3},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.since), func(t *testing.T) {
			res, err := cl.Subscribe(callCtx(t), SubscribeParams{Since: &tt.since})
			if err != nil {
				t.Fatal(err)
			}
			if res.Cursor != tt.wantCursor {
				t.Errorf("cursor = %d, want %d", res.Cursor, tt.wantCursor)
			}
			evs := notesFor(t, cl, res.Subscription, int(3-tt.wantFirst+1))
			if evs[0].Seq != tt.wantFirst {
				t.Errorf("first event %d, want %d", evs[0].Seq, tt.wantFirst)
			}
			if err := cl.Unsubscribe(callCtx(t), res.Subscription); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestUnsubscribe(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	a, err := cl.Subscribe(ctx, SubscribeParams{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cl.Subscribe(ctx, SubscribeParams{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Subscription == b.Subscription {
		t.Fatalf("two subscriptions share the id %q", a.Subscription)
	}
	fb.addEvents("first")
	got := map[string]int{}
	for range 2 {
		n := nextNote(t, cl)
		got[n.Subscription]++
	}
	if got[a.Subscription] != 1 || got[b.Subscription] != 1 {
		t.Fatalf("notifications by subscription = %v, want one each", got)
	}

	if err := cl.Unsubscribe(ctx, a.Subscription); err != nil {
		t.Fatalf("unsubscribe: %v", err)
	}
	wantCode(t, cl.Unsubscribe(ctx, a.Subscription), CodeNotFound)
	wantCode(t, cl.Unsubscribe(ctx, "sub-99"), CodeNotFound)

	const more = 20
	for range more {
		fb.addEvents("later")
	}
	// Only b's arrive: notesFor fails on any of a's.
	evs := notesFor(t, cl, b.Subscription, more)
	if evs[0].Seq != 2 || evs[more-1].Seq != 1+more {
		t.Errorf("b got events %s, want 2..%d", seqs(evs), 1+more)
	}
}

func TestSubscribeLimit(t *testing.T) {
	ts := startServer(t, newFakeBackend(), ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	ids := map[string]bool{}
	for i := range MaxSubscriptions {
		res, err := cl.Subscribe(ctx, SubscribeParams{})
		if err != nil {
			t.Fatalf("subscription %d: %v", i+1, err)
		}
		if ids[res.Subscription] {
			t.Fatalf("subscription id %q given twice", res.Subscription)
		}
		ids[res.Subscription] = true
	}
	_, err := cl.Subscribe(ctx, SubscribeParams{})
	wantCode(t, err, CodeLimit)

	// The limit is per connection.
	if _, err := dial(t, ts.path).Subscribe(ctx, SubscribeParams{}); err != nil {
		t.Fatalf("subscribe on another connection: %v", err)
	}
	// Unsubscribing frees a slot.
	for id := range ids {
		if err := cl.Unsubscribe(ctx, id); err != nil {
			t.Fatal(err)
		}
		break
	}
	if _, err := cl.Subscribe(ctx, SubscribeParams{}); err != nil {
		t.Fatalf("subscribe after an unsubscribe: %v", err)
	}
	_, err = cl.Subscribe(ctx, SubscribeParams{})
	wantCode(t, err, CodeLimit)
}

func TestSubscribeBadParams(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	bad := []struct {
		name   string
		params any
	}{
		{"empty type", SubscribeParams{Types: []string{""}}},
		{"upper case", SubscribeParams{Types: []string{"Approval_queued"}}},
		{"dash", SubscribeParams{Types: []string{"approval-queued"}}},
		{"space", SubscribeParams{Types: []string{"agent started"}}},
		{"star alone", SubscribeParams{Types: []string{"*"}}},
		{"star inside", SubscribeParams{Types: []string{"appr*val"}}},
		{"two stars", SubscribeParams{Types: []string{"approval_**"}}},
		{"too long", SubscribeParams{Types: []string{strings.Repeat("a", 65)}}},
		{"one bad among good", SubscribeParams{Types: []string{"agent_started", "nope!"}}},
		{"unknown field", map[string]any{"types": []string{"agent_started"}, "from": 3}},
		{"since as text", map[string]any{"since": "3"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			err := cl.Call(ctx, MethodSubscribe, tt.params, nil)
			wantCode(t, err, CodeInvalidParams)
		})
	}
	good := [][]string{{"approval_*"}, {"agent_started", "delivery_*"}, {strings.Repeat("a", 64)}, {strings.Repeat("a", 64) + "*"}}
	for _, types := range good {
		if _, err := cl.Subscribe(ctx, SubscribeParams{Types: types}); err != nil {
			t.Errorf("subscribe %q: %v", types, err)
		}
	}
}

// After the unsubscribe response, no notification of that subscription
// may follow.
func TestUnsubscribeMidBacklog(t *testing.T) {
	fb := newFakeBackend()
	big := strings.Repeat("x", 2048)
	for range 1000 {
		fb.addEventsDetail(big, "agent_started")
	}
	ts := startServer(t, fb, ServerConfig{})
	rc := dialRaw(t, ts.path)
	rc.writeLine(reqLine(1, MethodSubscribe, map[string]any{"since": 0}))
	m := rc.readMsg()
	var res SubscribeResult
	if err := json.Unmarshal(m.Result, &res); err != nil {
		t.Fatalf("subscribe reply %+v: %v", m, err)
	}
	// The backlog (2 MB) fills the socket and the server's queue; now
	// unsubscribe, and read on.
	rc.writeLine(reqLine(2, MethodUnsubscribe, UnsubscribeParams{Subscription: res.Subscription}))
	for {
		m := rc.readMsg()
		if string(m.ID) == "2" {
			break
		}
	}
	rc.writeLine(reqLine(3, MethodStatus, nil))
	late := 0
	for {
		m := rc.readMsg()
		if string(m.ID) == "3" {
			break
		}
		late++
	}
	if late != 0 {
		t.Errorf("%d notifications of %s after its unsubscribe response", late, res.Subscription)
	}
}
