// Tests of approval quorums: an item that needs approvals from several
// distinct deciders (Approval.Required).

package store

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// addQuorumItem stores a pending item that needs required approvals.
func addQuorumItem(t *testing.T, s *Store, required int, now time.Time) *Approval {
	t.Helper()
	a := &Approval{Controller: "c", Reader: "r", SubscriptionID: "news", Category: 3, Response: []byte(`{"summary":"s"}`),
		Bits: 10, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Required: required}
	if err := s.AddApproval(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestQuorumOfTwoDistinctDeciders(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	a := addQuorumItem(t, s, 2, now)
	alice := Decider{Name: "alice", UID: 1000, PID: 41}
	bob := Decider{Name: "bob", UID: 1001, PID: 42}

	got, dl, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: alice, Note: "looks fine", At: now})
	if err != nil || dl != nil {
		t.Fatalf("first approval: delivery %v, err %v; want none and no error", dl, err)
	}
	if got.Status != ApprovalPending || len(got.Grants) != 1 || got.Progress() != "1 of 2 approvals" {
		t.Fatalf("after the first approval: %q, %q, grants %+v", got.Status, got.Progress(), got.Grants)
	}
	stored, err := s.Approval(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != ApprovalPending || stored.Required != 2 || len(stored.Grants) != 1 || stored.Grants[0].By != alice ||
		stored.Grants[0].Note != "looks fine" || stored.Grants[0].SHA256 != a.SHA256 || !stored.DecidedAt.IsZero() || stored.DecidedBy != (Decider{}) {
		t.Fatalf("stored after one approval: %+v", stored)
	}
	if n := mustCount(t, s, "deliveries"); n != 0 {
		t.Fatalf("%d deliveries after one of two approvals", n)
	}

	// The same uid from another terminal (another pid) counts once.
	again := Decider{Name: "alice", UID: 1000, PID: 99}
	if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: again, At: now}); !errors.Is(err, ErrAlreadyApproved) {
		t.Fatalf("second approval by the same uid: err %v, want ErrAlreadyApproved", err)
	}
	if st, _ := s.Approval(ctx, a.ID); len(st.Grants) != 1 || st.Status != ApprovalPending {
		t.Fatalf("the refused approval changed the item: %+v", st)
	}

	got, dl, err = s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: bob, Note: "ok", At: now.Add(time.Minute)})
	if err != nil || dl == nil {
		t.Fatalf("second approval: delivery %v, err %v; want the delivery", dl, err)
	}
	if got.Status != ApprovalApproved || got.DecidedBy != bob || len(got.Grants) != 2 {
		t.Fatalf("after the second approval: %+v", got)
	}
	stored, _ = s.Approval(ctx, a.ID)
	if stored.Status != ApprovalApproved || stored.DecidedBy != bob || len(stored.Grants) != 2 || stored.Grants[1].By != bob {
		t.Fatalf("stored after two approvals: %+v", stored)
	}
	evs, err := s.Events(ctx, 0, 100, "approval_*")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind+": "+e.Detail)
	}
	want := []string{
		"approval_partial: approval 1 of 2 by alice (uid 1000, pid 41); waits for 1 more from another operator",
		"approval_approved: approved by alice (uid 1000, pid 41) and bob (uid 1001, pid 42)",
	}
	if strings.Join(kinds, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(kinds, "\n"), strings.Join(want, "\n"))
	}
}

func TestQuorumRejectionByAnyoneEndsIt(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	alice := Decider{Name: "alice", UID: 1000, PID: 41}
	for _, by := range []Decider{alice, {Name: "bob", UID: 1001, PID: 42}} {
		a := addQuorumItem(t, s, 3, now)
		if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: alice, At: now}); err != nil {
			t.Fatal(err)
		}
		got, dl, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalRejected, By: by, Reason: "no", At: now})
		if err != nil || dl != nil || got.Status != ApprovalRejected || got.DecidedBy != by {
			t.Fatalf("rejection by %s after one approval: %+v, %v, %v", by, got, dl, err)
		}
		stored, _ := s.Approval(ctx, a.ID)
		if stored.Status != ApprovalRejected || len(stored.Grants) != 1 || stored.Grants[0].By != alice {
			t.Errorf("stored: %+v; want rejected, the approval before it kept", stored)
		}
		if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "carol", UID: 1002, PID: 43}, At: now}); !errors.Is(err, ErrDecided) {
			t.Errorf("approval after the rejection: %v, want ErrDecided", err)
		}
	}
	if n := mustCount(t, s, "deliveries"); n != 0 {
		t.Errorf("%d deliveries from rejected items", n)
	}
}

func TestQuorumApprovalsAreBoundToTheContentAndExpiry(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	a := addQuorumItem(t, s, 2, now)
	alice := Decider{Name: "alice", UID: 1000, PID: 41}
	if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: ContentHash([]byte("other")), By: alice, At: now}); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("approval of other content: %v, want ErrHashMismatch", err)
	}
	if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: alice, At: now}); err != nil {
		t.Fatal(err)
	}
	// A second approval at the expiry expires the item; the late one is
	// not counted.
	got, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "bob", UID: 1001, PID: 2}, At: a.ExpiresAt})
	if !errors.Is(err, ErrExpired) || got.Status != ApprovalExpired || len(got.Grants) != 1 {
		t.Fatalf("approval at the expiry: %+v, %v; want expired", got, err)
	}
	if stored, _ := s.Approval(ctx, a.ID); stored.Status != ApprovalExpired {
		t.Errorf("stored %q, want expired", stored.Status)
	}
}

// Partial approvals are durable: a reopened store (a restarted gateway)
// still counts them, and still refuses the same decider.
func TestQuorumSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openT(t, path)
	ctx := context.Background()
	now := time.Now()
	a := addQuorumItem(t, s, 2, now)
	alice := Decider{Name: "alice", UID: 1000, PID: 41}
	if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: alice, At: now}); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	stored, err := s.Approval(ctx, a.ID)
	if err != nil || stored.Required != 2 || len(stored.Grants) != 1 || stored.Grants[0].By != alice || !stored.Grants[0].At.Equal(now) {
		t.Fatalf("after reopen: %+v, %v", stored, err)
	}
	if _, _, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: alice, At: now}); !errors.Is(err, ErrAlreadyApproved) {
		t.Fatalf("same decider after reopen: %v", err)
	}
	if _, dl, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "bob", UID: 1001, PID: 7}, At: now}); err != nil || dl == nil {
		t.Fatalf("second decider after reopen: %v, %v", dl, err)
	}
}

// An item that needs one approval is decided by it, as before quorums.
func TestRequiredDefaultsToOne(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	now := time.Now()
	a := addQuorumItem(t, s, 0, now)
	if a.Required != 1 {
		t.Fatalf("Required = %d, want 1", a.Required)
	}
	got, dl, err := s.Decide(ctx, Decision{ID: a.ID, Status: ApprovalApproved, SHA256: a.SHA256, By: Decider{Name: "alice"}, At: now})
	if err != nil || dl == nil || got.Status != ApprovalApproved || got.Progress() != "" {
		t.Fatalf("approval: %+v, %v, %v", got, dl, err)
	}
}

func mustCount(t *testing.T, s *Store, table string) int {
	t.Helper()
	var n int
	if err := s.rdb.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
