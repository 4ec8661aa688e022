package gateway

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/store"
)

// End-to-end tests of approval policies (approvals: {required, ttl}): a
// real Gateway, real testrt subprocesses and a real store. Two operators
// are two store.Deciders with different uids, as the control socket
// would record them; cmd/bcpgw's tests take the socket's path.

var (
	alice      = store.Decider{Name: "alice", UID: 1001, PID: 4242}
	aliceAgain = store.Decider{Name: "alice", UID: 1001, PID: 4343} // alice in another terminal
	bob        = store.Decider{Name: "bob", UID: 1002, PID: 5151}
)

// quorumDigests is digests(n) with the digest subscription's approvals
// set to policy (e.g. "{required: 2}").
func quorumDigests(n int, policy string) []agentSpec {
	specs := digests(n)
	specs[0].front = strings.Replace(specs[0].front, digestBlock, digestBlock+"\n        approvals: "+policy, 1)
	return specs
}

func TestApprovalQuorumOfTwoDistinctOperators(t *testing.T) {
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e := startE2E(t, quorumDigests(1, "{required: 2, ttl: 2h}"), func(c *Config) { c.Clock = frozenClock{at} })
	e.prompt("researcher", "go")
	item := e.pendingApprovals(1)[0]
	if item.Required != 2 || !item.ExpiresAt.Equal(at.Add(2*time.Hour)) {
		t.Errorf("item requires %d, expires %v; want 2, the policy's ttl (%v)", item.Required, item.ExpiresAt, at.Add(2*time.Hour))
	}
	ctx := testCtx(t)

	// The first approval is counted; the item waits for another.
	a, err := e.gw.Approve(ctx, item.ID, item.SHA256, alice, "fine by me")
	if err != nil {
		t.Fatalf("first Approve: %v", err)
	}
	if a.Status != store.ApprovalPending || a.Progress() != "1 of 2 approvals" || len(a.Grants) != 1 || a.Grants[0].By != alice {
		t.Fatalf("after one approval: %q %q %+v", a.Status, a.Progress(), a.Grants)
	}
	ev := e.eventsFor("approval_partial", item.ID)
	if len(ev) != 1 || ev[0].Detail != "approval 1 of 2 by alice (uid 1001, pid 4242); waits for 1 more from another operator" {
		t.Errorf("approval_partial events = %+v", ev)
	}
	// The same operator, from another terminal, counts once.
	if _, err := e.gw.Approve(ctx, item.ID, item.SHA256, aliceAgain, "again"); !errors.Is(err, store.ErrAlreadyApproved) {
		t.Fatalf("second Approve by the same uid: %v, want ErrAlreadyApproved", err)
	}
	// Nothing reached the Reader or main meanwhile.
	time.Sleep(100 * time.Millisecond)
	if v := e.records("researcher", "verdict"); len(v) != 0 {
		t.Errorf("verdict after one of two approvals: %+v", v)
	}
	e.assertNothingDelivered()

	a, err = e.gw.Approve(ctx, item.ID, item.SHA256, bob, "ok")
	if err != nil {
		t.Fatalf("second operator's Approve: %v", err)
	}
	if a.Status != store.ApprovalApproved || a.DecidedBy != bob || len(a.Grants) != 2 {
		t.Errorf("after two approvals: %+v", a)
	}
	applied := e.waitRecords("main", "applied", 1)
	if string(applied[0].Response) != digestOut {
		t.Errorf("delivered %s, want %s", applied[0].Response, digestOut)
	}
	if v := e.waitRecords("researcher", "verdict", 1); !v[0].Success || v[0].Detail != digestVerdict {
		t.Errorf("verdict = %+v", v[0])
	}
	ev = e.eventsFor("approval_approved", item.ID)
	if len(ev) != 1 || ev[0].Detail != "approved by alice (uid 1001, pid 4242) and bob (uid 1002, pid 5151)" {
		t.Errorf("approval_approved events = %+v", ev)
	}
}

func TestApprovalQuorumRejectionByOneEndsIt(t *testing.T) {
	e := startE2E(t, quorumDigests(1, "{required: 3}"), nil)
	e.prompt("researcher", "go")
	item := e.pendingApprovals(1)[0]
	ctx := testCtx(t)
	for _, by := range []store.Decider{alice, bob} {
		if _, err := e.gw.Approve(ctx, item.ID, item.SHA256, by, ""); err != nil {
			t.Fatal(err)
		}
	}
	carol := store.Decider{Name: "carol", UID: 1003, PID: 6161}
	a, err := e.gw.Reject(ctx, item.ID, "", carol, "contains a link")
	if err != nil || a.Status != store.ApprovalRejected {
		t.Fatalf("Reject after two of three approvals: %+v, %v", a, err)
	}
	v := e.waitRecords("researcher", "verdict", 1)
	if v[0].Success || v[0].Detail != "approval_rejected: Publish rejected by reviewer: contains a link" {
		t.Errorf("verdict = %+v", v[0])
	}
	if _, err := e.gw.Approve(ctx, item.ID, item.SHA256, store.Decider{Name: "dave", UID: 1004, PID: 1}, ""); !errors.Is(err, store.ErrDecided) {
		t.Errorf("Approve after the rejection: %v, want ErrDecided", err)
	}
	e.assertNothingDelivered()
}

// Partial approvals are durable: after a restart the item still counts
// them, still refuses the same operator, and the next one releases it.
func TestApprovalQuorumSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	set, vars := writeAgents(t, dir, quorumDigests(1, "{required: 2}"))
	e1 := runE2E(t, dir, set, vars, nil)
	e1.prompt("researcher", "go")
	item := e1.pendingApprovals(1)[0]
	if _, err := e1.gw.Approve(testCtx(t), item.ID, item.SHA256, alice, ""); err != nil {
		t.Fatal(err)
	}
	e1.stop()

	e2 := runE2E(t, dir, set, vars, nil)
	e2.running()
	pending := e2.pendingApprovals(1)
	if len(pending) != 1 || pending[0].ID != item.ID || pending[0].Progress() != "1 of 2 approvals" || pending[0].Grants[0].By != alice {
		t.Fatalf("pending after restart = %+v", pending)
	}
	if _, err := e2.gw.Approve(testCtx(t), item.ID, item.SHA256, aliceAgain, ""); !errors.Is(err, store.ErrAlreadyApproved) {
		t.Fatalf("same operator after restart: %v, want ErrAlreadyApproved", err)
	}
	if _, err := e2.gw.Approve(testCtx(t), item.ID, item.SHA256, bob, ""); err != nil {
		t.Fatal(err)
	}
	if applied := e2.waitRecords("main", "applied", 1); string(applied[0].Response) != digestOut {
		t.Errorf("delivered %s", applied[0].Response)
	}
}

// A reload that changes the policy applies to items queued after it: an
// item keeps the number of approvals it was queued with, as it keeps its
// content hash and expiry.
func TestApprovalQuorumIsFixedWhenQueued(t *testing.T) {
	e := startE2E(t, quorumDigests(2, "{required: 2}"), nil)
	e.prompt("researcher", "go")
	first := e.pendingApprovals(1)[0]
	e.edit("main", replace(t, "approvals: {required: 2}", "approvals: {required: 1}"))
	e.reload()
	ctx := testCtx(t)
	a, err := e.gw.Approve(ctx, first.ID, first.SHA256, alice, "")
	if err != nil || a.Status != store.ApprovalPending {
		t.Fatalf("approval after the reload: %q, %v; want still pending (2 required when queued)", a.Status, err)
	}
	if _, err := e.gw.Approve(ctx, first.ID, first.SHA256, bob, ""); err != nil {
		t.Fatal(err)
	}
	// The Reader's verdict releases its second digest, queued under the
	// new policy: one approval delivers it.
	seen := map[string]bool{first.ID: true}
	second := e.nextPending(seen)
	if second.Required != 1 {
		t.Errorf("second item requires %d, want 1 (the policy when it was queued)", second.Required)
	}
	if a, err := e.gw.Approve(ctx, second.ID, second.SHA256, alice, ""); err != nil || a.Status != store.ApprovalApproved {
		t.Fatalf("approval of the second item: %q, %v", a.Status, err)
	}
	e.waitRecords("main", "applied", 2)
}

// The channel's policy covers answers to queries; its ttl replaces
// --approval-ttl in the expiry and in what the Reader and the Controller
// hear. The ttl is real time, and the first approval must come within
// it: 3s leaves a loaded machine room to stall.
func TestApprovalChannelPolicyCoversAnswers(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", queriesOf(cat3Query("req-3", "researcher", 20)), map[string]string{
		"ANSWERS": `[{"summary": "Quiet day."}]`,
	}), func(c *Config) { c.ExpiryCheck = 10 * time.Millisecond })
	e.edit("main", replace(t, "    max_cat3_queries: 1\n", "    max_cat3_queries: 1\n    approvals: {required: 2, ttl: 3s}\n"))
	e.reload()
	e.prompt("main", "query")
	item := e.pendingApprovals(1)[0]
	if item.QueryID == "" || item.Required != 2 || item.ExpiresAt.Sub(item.CreatedAt) != 3*time.Second {
		t.Fatalf("answer item requires %d, ttl %v; want 2 and 3s (query %q)", item.Required, item.ExpiresAt.Sub(item.CreatedAt), item.QueryID)
	}
	if _, err := e.gw.Approve(testCtx(t), item.ID, item.SHA256, alice, ""); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("approval_expired: Approval item %s expired after 3s without a decision", item.ID)
	if v := e.waitRecords("researcher", "verdict", 1)[0]; v.Success || v.Detail != want {
		t.Errorf("verdict = %+v, want %q", v, want)
	}
	if f := e.waitRecords("main", "query_failed", 1)[0]; f.Detail != want {
		t.Errorf("query_failed = %+v, want %q", f, want)
	}
	if st := e.approval(item.ID); st.Status != store.ApprovalExpired || st.Reason != "no decision within 3s (1 of 2 approvals)" {
		t.Errorf("expired item: %q, reason %q", st.Status, st.Reason)
	}
}
