// Tests of what the operator side (control socket, one gateway per state
// directory) needs of the store.

package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

func TestOpenLocksTheStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openT(t, path)
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: err = %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	again.Close()
}

func TestEventsByKind(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	kinds := []string{"approval_queued", "refused", "approval_approved", "approvals_digest", "session_started", "approval_"}
	for _, k := range kinds {
		if err := s.AppendSync(ctx, Event{Time: time.Now(), Kind: k}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		filter []string
		want   []string
	}{
		{nil, kinds},
		{[]string{"refused"}, []string{"refused"}},
		{[]string{"approval_*"}, []string{"approval_queued", "approval_approved", "approval_"}},
		{[]string{"approval_*", "session_started"}, []string{"approval_queued", "approval_approved", "session_started", "approval_"}},
		{[]string{"approval"}, nil},
		{[]string{"*"}, kinds},
	} {
		evs, err := s.Events(ctx, 0, 100, tc.filter...)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range evs {
			got = append(got, e.Kind)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Events(%q) = %q, want %q", tc.filter, got, tc.want)
		}
	}
	last, err := s.LastEventSeq(ctx)
	if err != nil || last != int64(len(kinds)) {
		t.Errorf("LastEventSeq = %d, %v; want %d", last, err, len(kinds))
	}
}

func TestEventsChangedWakesOnEventCommits(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	changed := s.EventsChanged()
	// A write without events does not wake followers.
	if err := s.AddDelivery(ctx, &Delivery{Controller: "c", Reader: "r", Category: 1, Response: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
		t.Fatal("EventsChanged closed by a commit without events")
	default:
	}
	s.Append(Event{Time: time.Now(), Kind: "x"})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("EventsChanged not closed after an event was committed")
	}
	evs, err := s.Events(ctx, 0, 10)
	if err != nil || len(evs) != 1 {
		t.Fatalf("after the wake-up: events %v, %v; want the committed one", evs, err)
	}
	if next := s.EventsChanged(); next == changed {
		t.Error("EventsChanged returned the closed channel again")
	}
}

func TestDecideRecordsTheDecider(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	a := &Approval{Controller: "c", Reader: "r", Category: 3, Response: []byte(`{"summary":"s"}`), Bits: 10, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	a.SHA256 = ContentHash(a.Response)
	if err := s.AddApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "alice", UID: 1000, PID: 4242}, Note: "ok", At: now}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Approval(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.DecidedBy.Name != "alice" || got.DecidedBy.UID != 1000 || got.DecidedBy.PID != 4242 || got.DecidedSHA256 != a.SHA256 || got.Note != "ok" {
		t.Errorf("decided = %q uid %d pid %d sha %q note %q", got.DecidedBy, got.DecidedBy.UID, got.DecidedBy.PID, got.DecidedSHA256, got.Note)
	}
	evs, err := s.Events(ctx, 0, 10, "approval_approved")
	if err != nil || len(evs) != 1 || evs[0].Detail != "approved by alice (uid 1000, pid 4242)" {
		t.Errorf("approval_approved events = %+v, %v", evs, err)
	}
}

func TestOpenRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{"state.db", "other.db.lock"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{filepath.Join(dir, "state.db"), filepath.Join(dir, "other.db")} {
		if s, err := Open(path); err == nil {
			s.Close()
			t.Errorf("Open(%s) through a symbolic link succeeded", path)
		}
	}
}

func TestBacklogCountsPendingOnly(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	for i := range 3 {
		d := &Delivery{Controller: "c", Reader: "r", Category: 1, Response: []byte(`{}`), CreatedAt: now}
		if err := s.AddDelivery(ctx, d); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			s.FinishDelivery(d.ID, DeliveryDelivered, "", now)
		}
	}
	for i := range 2 {
		a := &Approval{Controller: "c", Reader: "r", Category: 3, Response: []byte(`{"summary":"s"}`), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		a.SHA256 = ContentHash(a.Response)
		if err := s.AddApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalRejected, By: Decider{Name: "x"}, Reason: "no", At: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var approvals, deliveries int
	checkBacklog := func() bool {
		var err error
		approvals, deliveries, err = s.Backlog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return approvals == 1 && deliveries == 2
	}
	testproc.CheckFor(10*time.Second, 5*time.Millisecond, checkBacklog) // FinishDelivery commits asynchronously
	if approvals != 1 || deliveries != 2 {
		t.Errorf("Backlog = %d approvals, %d deliveries; want 1 and 2", approvals, deliveries)
	}
}
