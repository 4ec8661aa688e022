package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// The agents of the BCPSubscribe tests: boss, a Controller with the tool
// and no declared subscription, on a channel of max_category 2 to scout,
// a Reader that is always running.
const (
	bossChannel = `tools: [BCPSubscribe]
bcp_channels:
  - {peer: scout, role: controller, max_category: 2, budget_bits: 10000}`
	scoutChannel = `tools: [BCPPublish]
autostart: true
bcp_channels:
  - {peer: boss, role: reader, max_category: 2, budget_bits: 10000}`
)

// subscribeReq is one entry of TESTRT_SUBSCRIBE.
func subscribeReq(requestID string, cat int, spec string) map[string]any {
	return map[string]any{"request_id": requestID, "to": "scout", "category": cat, "spec": json.RawMessage(spec)}
}

func subscribePair(bossEnv, scoutEnv map[string]string) []agentSpec {
	return []agentSpec{
		{name: "boss", front: bossChannel, env: bossEnv},
		{name: "scout", front: scoutChannel, env: scoutEnv},
	}
}

// subscribeResult waits for the first subscribe_result of boss's log that
// match accepts.
func (e *e2e) subscribeResult(what string, match func(rec) bool) rec {
	e.t.Helper()
	var got rec
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		for _, r := range e.records("boss", "subscribe_result") {
			if match(r) {
				got = r
				return true
			}
		}
		return false
	}) {
		e.t.Fatalf("boss never logged a subscribe_result %s; log: %+v", what, e.log("boss"))
	}
	return got
}

var subAlice = store.Decider{Name: "alice", UID: 1000, PID: 4242}

// A Controller's request, end to end: queued as an item showing the spec
// and its bits; a request over max_category refused at once; approved,
// announced to the Reader, published to and delivered; then revoked: the
// Reader told at once, its pending deliveries dropped, the Controller
// told, and a push to it refused.
func TestSubscribeApprovedAnnouncedUsedRevoked(t *testing.T) {
	reqs, _ := json.Marshal([]map[string]any{
		subscribeReq("r1", 1, `{"fields": [{"name": "urgent", "type": "boolean"}, {"name": "level", "type": "enum", "values": ["low", "mid", "high", "max"]}]}`),
		subscribeReq("r2", 3, `{"directive": "Summarize everything.", "max_words": 50}`),
	})
	e := startE2E(t, subscribePair(
		map[string]string{"SUBSCRIBE": string(reqs), "DELAY": "1500ms"},
		map[string]string{"PUBLISH_NEW": `{"response": {"urgent": true, "level": "high"}, "repeat": 3}`},
	), nil)
	e.waitRecords("scout", "subscriptions", 0)
	e.prompt("boss", "subscribe")

	pending := e.subscribeResult("pending for r1", func(r rec) bool { return r.RequestID == "r1" })
	if !strings.HasPrefix(pending.Detail, "pending") || !strings.HasPrefix(pending.SubscriptionID, "rt-") || pending.Bits != 3 {
		t.Fatalf("r1's first answer: %+v, want pending with an rt- id and 3 bits", pending)
	}
	over := e.subscribeResult("for r2", func(r rec) bool { return r.RequestID == "r2" })
	if !strings.HasPrefix(over.Detail, "rejected: "+string(bcp.CategoryNotAllowed)) {
		t.Errorf("r2 (Cat-3 on a max_category 2 channel): %q, want rejected at once with category_not_allowed", over.Detail)
	}
	items := e.pendingApprovals(1)
	if len(items) != 1 {
		t.Fatalf("%d items pending, want only r1's", len(items))
	}
	item := items[0]
	if item.Kind != store.KindSubscription || item.SubscriptionID != pending.SubscriptionID || item.Bits != 3 || item.Controller != "boss" ||
		!strings.Contains(string(item.Response), `"values":["low","mid","high","max"]`) {
		t.Fatalf("the item: %+v, want a subscription request showing the spec, 3 bits", item)
	}
	if view := approvalView(&item); view.Kind != control.KindSubscription || view.RequestID != "r1" {
		t.Errorf("the item as the API shows it: kind %q, request %q", view.Kind, view.RequestID)
	}
	// Nothing exists before the approval.
	if e.gw.set.Load().Subscription("boss", "scout", item.SubscriptionID) != nil {
		t.Fatal("the subscription is in force before any approval")
	}

	if _, err := e.gw.Approve(testCtx(t), item.ID, item.SHA256, subAlice, "fine"); err != nil {
		t.Fatalf("approve: %v", err)
	}
	id := item.SubscriptionID
	approved := e.subscribeResult("approved", func(r rec) bool { return strings.HasPrefix(r.Detail, "approved") })
	if approved.SubscriptionID != id || approved.RequestID != "r1" {
		t.Errorf("approved result %+v, want %s for r1", approved, id)
	}
	e.waitEventMatching("subscription_approved", "", func(ev store.Event) bool { return ev.Ref == id && strings.Contains(ev.Detail, "alice") })
	// Announced to the Reader, which pushes three times; the first is
	// delivered to the Controller.
	e.subscriptionsAnnounced(func(d string) bool { return strings.Contains(d, "boss/"+id) })
	verdicts := e.waitRecords("scout", "verdict", 3)
	for _, v := range verdicts[:3] {
		if !v.Success || v.SubscriptionID != id {
			t.Fatalf("push to %s: %+v, want accepted", id, v)
		}
	}
	d := e.waitRecords("boss", "delivery", 1)[0]
	if d.SubscriptionID != id || d.Detail != "scout" || !strings.Contains(string(d.Response), `"level":"high"`) {
		t.Fatalf("delivery %+v, want scout's push to %s", d, id)
	}

	// Revoked while two deliveries wait behind the one being applied.
	sub, err := e.gw.RevokeSubscription(testCtx(t), id, subAlice, "no longer needed")
	if err != nil || sub.Status != store.SubscriptionRevoked {
		t.Fatalf("revoke: %+v, %v", sub, err)
	}
	e.subscriptionsAnnounced(func(d string) bool { return !strings.Contains(d, id) })
	revoked := e.subscribeResult("revoked", func(r rec) bool { return strings.HasPrefix(r.Detail, "revoked") })
	if revoked.SubscriptionID != id || !strings.Contains(revoked.Detail, "no longer needed") || !strings.Contains(revoked.Detail, "alice") {
		t.Errorf("revoked result %+v", revoked)
	}
	e.waitEventMatching("subscription_revoked", "", func(ev store.Event) bool {
		return ev.Ref == id && strings.Contains(ev.Detail, "alice (uid 1000, pid 4242)") && strings.Contains(ev.Detail, "no longer needed")
	})
	e.waitEventMatching("dropped_revoked", "", func(store.Event) bool { return true })
	if n := len(e.records("boss", "delivery")); n >= 3 {
		t.Errorf("boss got %d deliveries, want the pending ones dropped", n)
	}
	// A push to it now is refused.
	e.prompt("scout", "publish-rt")
	late := e.waitRecords("scout", "verdict", 4)[3]
	if late.Success || !strings.HasPrefix(late.Detail, string(bcp.SubscriptionNotFound)) {
		t.Errorf("a push after the revocation: %+v, want subscription_not_found", late)
	}
	// Revoked once; a declared or unknown id is not revocable.
	if _, err := e.gw.RevokeSubscription(testCtx(t), id, subAlice, "again"); err == nil {
		t.Error("a second revocation succeeded")
	}
	if _, err := e.gw.RevokeSubscription(testCtx(t), "nope", subAlice, "x"); err == nil {
		t.Error("revoking an unknown id succeeded")
	}
}

// subscriptionsAnnounced waits for an announcement to scout that match
// accepts (its "controller/id,..." list).
func (e *e2e) subscriptionsAnnounced(match func(string) bool) {
	e.t.Helper()
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		rs := e.records("scout", "subscriptions")
		return len(rs) > 0 && match(rs[len(rs)-1].Detail)
	}) {
		e.t.Fatalf("scout was not told; log: %+v", e.log("scout"))
	}
}

// A rejected request is told to the Controller, and nothing is added.
func TestSubscribeRejectedTellsTheController(t *testing.T) {
	reqs, _ := json.Marshal([]map[string]any{
		subscribeReq("r1", 2, `{"questions": [{"id": "topic", "question": "What is it about?", "max_words": 5}]}`),
	})
	e := startE2E(t, subscribePair(map[string]string{"SUBSCRIBE": string(reqs)}, nil), nil)
	e.prompt("boss", "subscribe")
	item := e.pendingApprovals(1)[0]
	if item.Bits != 55 {
		t.Errorf("a 5-word question: %v bits, want 55", item.Bits)
	}
	if _, err := e.gw.Reject(testCtx(t), item.ID, "", subAlice, "too broad"); err != nil {
		t.Fatal(err)
	}
	r := e.subscribeResult("rejected", func(r rec) bool { return strings.HasPrefix(r.Detail, "rejected") })
	if !strings.Contains(r.Detail, string(bcp.ApprovalRejected)) || !strings.Contains(r.Detail, "too broad") {
		t.Errorf("rejection told as %q", r.Detail)
	}
	if e.gw.set.Load().Subscription("boss", "scout", item.SubscriptionID) != nil {
		t.Error("a rejected request is in force")
	}
}

// A Controller cannot flood the queue (at most MaxPendingSubscribe
// requests wait), a Reader cannot ask at all, and an invalid spec or one
// over the budget is refused at once.
func TestSubscribeLimitsAndRights(t *testing.T) {
	var many []map[string]any
	for i := range MaxPendingSubscribe + 1 {
		many = append(many, subscribeReq(fmt.Sprintf("r%d", i), 1, `{"fields": [{"name": "ok", "type": "boolean"}]}`))
	}
	many = append(many,
		subscribeReq("bad", 1, `{"fields": [{"name": "ok", "type": "bool"}]}`),
		subscribeReq("huge", 2, `{"questions": [{"id": "a", "question": "Everything?", "max_words": 1000}]}`))
	reqs, _ := json.Marshal(many)
	scoutReqs, _ := json.Marshal([]map[string]any{{"request_id": "x", "to": "boss", "category": 1, "spec": json.RawMessage(`{"fields": [{"name": "ok", "type": "boolean"}]}`)}})
	e := startE2E(t, subscribePair(map[string]string{"SUBSCRIBE": string(reqs)}, map[string]string{"SUBSCRIBE": string(scoutReqs)}), nil)
	e.prompt("boss", "subscribe")
	rs := e.waitRecords("boss", "subscribe_result", len(many))
	for i, r := range rs[:MaxPendingSubscribe] {
		if !strings.HasPrefix(r.Detail, "pending") {
			t.Errorf("request %d: %q, want pending", i, r.Detail)
		}
	}
	want := map[string]bcp.Code{fmt.Sprintf("r%d", MaxPendingSubscribe): bcp.SubscribeLimit, "bad": bcp.ValidationFailed, "huge": bcp.BudgetExhausted}
	for _, r := range rs[MaxPendingSubscribe:] {
		if code := want[r.RequestID]; !strings.HasPrefix(r.Detail, "rejected: "+string(code)) {
			t.Errorf("%s: %q, want rejected with %s", r.RequestID, r.Detail, code)
		}
	}
	if n := len(e.pendingApprovals(MaxPendingSubscribe)); n != MaxPendingSubscribe {
		t.Errorf("%d items pending, want %d", n, MaxPendingSubscribe)
	}
	e.prompt("scout", "subscribe")
	r := e.waitRecords("scout", "subscribe_result", 1)[0]
	if !strings.HasPrefix(r.Detail, "rejected: "+string(bcp.ToolNotAllowed)) {
		t.Errorf("a Reader's request: %q, want tool_not_allowed", r.Detail)
	}
	e.waitEventMatching("refused", string(bcp.ToolNotAllowed), func(ev store.Event) bool { return ev.Agent == "scout" })
}

// A request_id names one waiting request: the decision is told by it, so
// a second request under the id of one still waiting is refused, also
// after a restart; once the first is decided, the id is free again.
func TestSubscribeRequestIDOnceWhileWaiting(t *testing.T) {
	spec := `{"fields": [{"name": "ok", "type": "boolean"}]}`
	reqs, _ := json.Marshal([]map[string]any{subscribeReq("r1", 1, spec), subscribeReq("r1", 1, spec)})
	dir := t.TempDir()
	set, vars := writeAgents(t, dir, subscribePair(map[string]string{"SUBSCRIBE": string(reqs)}, nil))
	dup := "rejected: " + string(bcp.ProtocolError) + ": request_id 'r1' is already used"
	check := func(rs []rec, want ...string) {
		t.Helper()
		for i, w := range want {
			if r := rs[len(rs)-len(want)+i]; !strings.HasPrefix(r.Detail, w) || r.RequestID != "r1" {
				t.Errorf("result %d of the last prompt: %s %q, want r1 %q", i, r.RequestID, r.Detail, w)
			}
		}
	}
	e := runE2E(t, dir, set, vars, nil)
	e.prompt("boss", "subscribe")
	check(e.waitRecords("boss", "subscribe_result", 2), "pending", dup)
	item := e.pendingApprovals(1)[0]
	e.stop()

	e = runE2E(t, dir, set, vars, nil)
	e.prompt("boss", "subscribe")
	check(e.waitRecords("boss", "subscribe_result", 4), dup, dup)
	if n := len(e.pendingApprovals(1)); n != 1 {
		t.Fatalf("%d items pending, want 1", n)
	}
	if _, err := e.gw.Reject(testCtx(t), item.ID, "", subAlice, "no"); err != nil {
		t.Fatal(err)
	}
	check(e.waitRecords("boss", "subscribe_result", 5), "rejected: "+string(bcp.ApprovalRejected))
	e.prompt("boss", "subscribe")
	check(e.waitRecords("boss", "subscribe_result", 7), "pending", dup)
}

// An approved subscription is kept in the store, not in the definitions:
// after a restart it is in force and announced again, listed with who
// approved it; a reload whose definitions no longer allow it revokes it.
func TestSubscribePersistsAcrossRestartAndReload(t *testing.T) {
	reqs, _ := json.Marshal([]map[string]any{subscribeReq("r1", 2, `{"questions": [{"id": "topic", "question": "Topic?", "max_words": 3}]}`)})
	dir := t.TempDir()
	set, vars := writeAgents(t, dir, subscribePair(map[string]string{"SUBSCRIBE": string(reqs)}, nil))
	e := runE2E(t, dir, set, vars, nil)
	e.prompt("boss", "subscribe")
	item := e.pendingApprovals(1)[0]
	if _, err := e.gw.Approve(testCtx(t), item.ID, item.SHA256, subAlice, ""); err != nil {
		t.Fatal(err)
	}
	id := item.SubscriptionID
	e.subscriptionsAnnounced(func(d string) bool { return strings.Contains(d, id) })
	e.stop()

	e = runE2E(t, dir, set, vars, nil)
	e.waitRecords("scout", "subscriptions", 2)
	e.subscriptionsAnnounced(func(d string) bool { return strings.Contains(d, "boss/"+id) })
	subs, err := e.gw.Operator().Subscriptions(testCtx(t), control.SubscriptionsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 1 || subs[0].ID != id || subs[0].Source != control.SourceApproved || !strings.Contains(subs[0].ApprovedBy, "alice") ||
		subs[0].ApprovedAt.IsZero() {
		t.Fatalf("subscriptions after a restart: %+v", subs)
	}

	// max_category 1 no longer allows its Cat-2 spec.
	e.edit("boss", replace(t, "max_category: 2", "max_category: 1"))
	e.reload()
	e.subscriptionsAnnounced(func(d string) bool { return !strings.Contains(d, id) })
	e.waitEventMatching("subscription_revoked", "", func(ev store.Event) bool {
		return ev.Ref == id && strings.Contains(ev.Detail, string(bcp.CategoryNotAllowed))
	})
	if e.gw.set.Load().Subscription("boss", "scout", id) != nil {
		t.Error("still in force after a reload that does not allow it")
	}
	all, err := e.gw.Operator().Subscriptions(context.Background(), control.SubscriptionsParams{All: true})
	if err != nil || len(all) != 1 || all[0].Status != store.SubscriptionRevoked || !strings.Contains(all[0].RevokedBy, "bcpgw") {
		t.Errorf("--all after the reload: %+v, %v", all, err)
	}
}
