package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// A Controller's request for a subscription, through the real binary:
// queued (approvals list shows it as a subscription request), approved
// with bcpgw approve, listed by bcpgw subscriptions (with who approved
// it), revoked with bcpgw subscriptions revoke, which needs a reason and
// works once.
func TestSubscribeThroughTheCommands(t *testing.T) {
	dir := t.TempDir()
	agentsDir := writeSet(t, map[string]string{
		"boss.md": fmt.Sprintf(`---
name: boss
runtime: [%q]
workdir: %q
tools: [BCPSubscribe]
env: {TESTRT_LOG: %q, TESTRT_SUBSCRIBE: '[{"request_id": "r1", "to": "scout", "category": 1, "spec": {"fields": [{"name": "urgent", "type": "boolean"}]}}]'}
bcp_channels:
  - {peer: scout, role: controller, max_category: 1, budget_bits: 1000}
---
`, testrt, agentDir(t, dir, "boss"), filepath.Join(dir, "boss", "boss.log")),
		"scout.md": fmt.Sprintf(`---
name: scout
runtime: [%q]
workdir: %q
autostart: true
tools: [BCPPublish]
env: {TESTRT_LOG: %q}
bcp_channels:
  - {peer: boss, role: reader, max_category: 1, budget_bits: 1000}
---
`, testrt, agentDir(t, dir, "scout"), filepath.Join(dir, "scout", "scout.log")),
	})
	state := filepath.Join(dir, "state")
	var log testproc.Buffer
	cli := gatewayCLI(t, agentsDir, state, &log)
	deadline := time.Now().Add(30 * time.Second)
	for run(t, runOpts{env: opEnv}, "status", "--state", state).code != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway never answered\n%s", &log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cli(0, "prompt", "boss", "subscribe")
	var item control.Approval
	for {
		r := cli(0, "approvals", "list", "--json")
		var items []control.Approval
		if err := json.Unmarshal([]byte(r.stdout), &items); err != nil {
			t.Fatalf("approvals list --json: %v\n%s", err, r)
		}
		if len(items) == 1 && items[0].Kind == control.KindSubscription {
			item = items[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no subscription request queued\n%s\ngateway log:\n%s", r, &log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if item.RequestID != "r1" || item.Controller != "boss" || item.Reader != "scout" || item.BandwidthBits != 1 ||
		!strings.Contains(string(item.Response), `"urgent"`) || !strings.HasPrefix(item.SubscriptionID, "rt-") {
		t.Fatalf("the queued request: %+v", item)
	}
	if r := cli(0, "subscriptions"); !strings.Contains(r.stdout, "No subscriptions.") {
		t.Errorf("subscriptions before the approval:\n%s", r)
	}
	if r := cli(0, "approve", item.ID); !strings.Contains(r.stdout, "subscription "+item.SubscriptionID+" is active") {
		t.Errorf("approve:\n%s", r)
	}
	id := item.SubscriptionID
	r := cli(0, "subscriptions", "--json")
	var sub control.SubscriptionInfo
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &sub); err != nil {
		t.Fatalf("subscriptions --json: %v\n%s", err, r)
	}
	if sub.ID != id || sub.Source != control.SourceApproved || sub.Status != "active" || sub.ApprovedBy == "" || sub.ApprovedAt.IsZero() ||
		sub.ApprovalID != item.ID {
		t.Errorf("subscriptions --json: %+v", sub)
	}
	if r := cli(0, "subscriptions"); !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "approved") {
		t.Errorf("subscriptions:\n%s", r)
	}
	scoutLog := filepath.Join(dir, "scout", "scout.log")
	waitAnnounced(t, scoutLog, func(d string) bool { return strings.Contains(d, id) }, &log)

	if r := cli(exitUsage, "subscriptions", "revoke", id); !strings.Contains(r.stderr, "--reason is required") {
		t.Errorf("revoke without a reason:\n%s", r)
	}
	if r := cli(0, "subscriptions", "revoke", id, "--reason", "not needed"); !strings.Contains(r.stdout, "Revoked "+id) {
		t.Errorf("revoke:\n%s", r)
	}
	waitAnnounced(t, scoutLog, func(d string) bool { return !strings.Contains(d, id) }, &log)
	if r := cli(exitFailed, "subscriptions", "revoke", id, "--reason", "again"); !strings.Contains(r.stderr, "revoked") {
		t.Errorf("a second revocation:\n%s", r)
	}
	if r := cli(0, "subscriptions"); !strings.Contains(r.stdout, "No subscriptions.") {
		t.Errorf("subscriptions after the revocation:\n%s", r)
	}
	if r := cli(0, "subscriptions", "--all"); !strings.Contains(r.stdout, "revoked by") || !strings.Contains(r.stdout, "not needed") {
		t.Errorf("subscriptions --all:\n%s", r)
	}
}

// waitAnnounced waits for the last announcement in a testrt log to
// match.
func waitAnnounced(t *testing.T, path string, match func(string) bool, gwLog *testproc.Buffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		var last string
		for _, l := range strings.Split(string(b), "\n") {
			var r struct{ Event, Detail string }
			if json.Unmarshal([]byte(l), &r) == nil && r.Event == "subscriptions" {
				last = r.Detail
			}
		}
		if last != "" && match(last) || (last == "" && match("") && strings.Contains(string(b), `"subscriptions"`)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("announcement %q in %s does not match\ngateway log:\n%s", last, path, gwLog)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
