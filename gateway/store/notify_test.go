package store

import (
	"context"
	"testing"
	"time"
)

// A notification target's cursor: created after the newest event, moved
// only forward, kept with its events in one commit, and across a reopen;
// disabled and enabled again; the state file's id does not change.
func TestNotifyCursor(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.AppendSync(ctx, Event{Time: now, Kind: "a"}, Event{Time: now, Kind: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, found, err := s.NotifyCursor(ctx, "phone"); err != nil || found {
		t.Fatalf("NotifyCursor before any = found %v, %v; want none", found, err)
	}
	c, err := s.OpenNotifyCursor(ctx, "phone", now)
	if err != nil || c.Seq != 2 || c.Disabled() {
		t.Fatalf("OpenNotifyCursor = %+v, %v; want seq 2 (the newest event), enabled", c, err)
	}
	if err := s.AppendSync(ctx, Event{Time: now, Kind: "c"}); err != nil {
		t.Fatal(err)
	}
	// Opening again does not move it.
	if c, err = s.OpenNotifyCursor(ctx, "phone", now); err != nil || c.Seq != 2 {
		t.Fatalf("OpenNotifyCursor again = %+v, %v; want seq 2", c, err)
	}
	s.AdvanceNotifyCursor("phone", 3, now, Event{Time: now, Kind: "notify_sent", Ref: "phone"})
	s.AdvanceNotifyCursor("phone", 1, now) // never back
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _, err = s.NotifyCursor(ctx, "phone"); err != nil || c.Seq != 3 {
		t.Fatalf("after advancing to 3 then 1: %+v, %v; want seq 3", c, err)
	}
	if ev, _ := s.Events(ctx, 3, 10); len(ev) != 1 || ev[0].Kind != "notify_sent" || ev[0].Ref != "phone" {
		t.Fatalf("events after 3 = %+v, want the notify_sent stored with the cursor", ev)
	}
	id, err := s.NotifyInstance(ctx)
	if err != nil || len(id) != 16 {
		t.Fatalf("NotifyInstance = %q, %v; want 16 hex digits", id, err)
	}
	if err := s.DisableNotifyTarget(ctx, "phone", "abc", "410 Gone", now); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	c, _, err = s.NotifyCursor(ctx, "phone")
	if err != nil || c.Seq != 3 || !c.Disabled() || c.URLSHA256 != "abc" || c.DisabledReason != "410 Gone" || !c.DisabledAt.Equal(now) {
		t.Fatalf("after reopen: %+v, %v; want seq 3, disabled at %v for url abc", c, err, now)
	}
	if again, _ := s.NotifyInstance(ctx); again != id {
		t.Errorf("NotifyInstance after reopen = %q, want %q", again, id)
	}
	if err := s.EnableNotifyTarget(ctx, "phone", now); err != nil {
		t.Fatal(err)
	}
	if c, _, _ = s.NotifyCursor(ctx, "phone"); c.Disabled() || c.Seq != 3 {
		t.Errorf("after enabling: %+v, want enabled at seq 3", c)
	}
}

// A target created after retention deleted every event starts after the
// last seq given, not at 0: it has missed nothing.
func TestNotifyCursorAfterEverythingPruned(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.AppendSync(ctx, Event{Time: old, Kind: "a"}, Event{Time: old, Kind: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, old.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	pruned, _ := s.EventsPrunedBefore(ctx)
	c, err := s.OpenNotifyCursor(ctx, "new", old)
	if err != nil || c.Seq != 2 || pruned != 3 {
		t.Fatalf("cursor %+v (%v), pruned before %d; want seq 2, pruned before 3", c, err, pruned)
	}
}
