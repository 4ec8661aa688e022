package session

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

func TestSessionAnnounceSendsFreshSubscriptions(t *testing.T) {
	h := newHarness(t, "sdk", "BCPPublish")
	h.cfg.Subscriptions = []runtime.ActiveSubscription{{SubscriptionID: "research-alerts", Controller: "main", Category: bcp.Cat1}}
	s := h.start(t)
	for _, want := range []string{"subscriptions 1 research-alerts", "subscriptions 0 \n", "subscriptions 2 a,b"} {
		switch want {
		case "subscriptions 0 \n":
			s.setAnnounced(nil)
		case "subscriptions 2 a,b":
			s.setAnnounced([]runtime.ActiveSubscription{{SubscriptionID: "a", Controller: "main", Category: bcp.Cat1}, {SubscriptionID: "b", Controller: "main", Category: bcp.Cat1}})
		}
		if !testproc.CheckFor(10*time.Second, testproc.Poll, func() bool { return strings.Contains(h.logs.String(), want) }) {
			t.Fatalf("runtime never logged %q:\n%s", want, h.logs)
		}
	}
	if ev := h.audit.find("subscriptions_announced", ""); len(ev) != 2 {
		t.Errorf("subscriptions_announced events = %+v, want 2", ev)
	}
}

func TestSessionStopWhenIdleFinishesQueuedTurnsFirst(t *testing.T) {
	h := newHarness(t, "sdk")
	s := h.start(t)
	ctx := testproc.Context(t)
	var dones []<-chan error
	for _, p := range []string{"one", "two"} {
		done, err := s.Turn(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: p})
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, done)
	}
	s.stopWhenIdle("definition changed")
	// New work is not taken: it waits for the end and is told to go
	// elsewhere.
	if _, err := s.Turn(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: "three"}); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Turn after stopWhenIdle = %v, want ErrSessionClosed", err)
	}
	for i, done := range dones {
		if err := <-done; err != nil {
			t.Errorf("queued turn %d: %v", i, err)
		}
	}
	waitDone(t, s)
	if s.Err() != nil {
		t.Errorf("session ended with %v, want a requested stop", s.Err())
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "prompt one") || !strings.Contains(logs, "prompt two") || strings.Contains(logs, "prompt three") {
		t.Errorf("logs:\n%s", logs)
	}
	if !strings.Contains(logs, "runtime got shutdown") {
		t.Errorf("the runtime was not shut down gracefully:\n%s", logs)
	}
}

func TestSessionHoldsTakesAToolAwayAtOnce(t *testing.T) {
	h := newHarness(t, "sdk", "BCPPublish")
	var held atomic.Bool
	held.Store(true)
	h.audit.holds = func(agent, tool string) bool {
		return agent == "researcher" && tool == agents.ToolPublish && held.Load()
	}
	h.audit.onMessage = func(s *Session, m Message) {
		s.Reply(runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: "research-alerts", Success: true, Detail: "routed"})
	}
	s := h.start(t)
	ctx := testproc.Context(t)
	publish := func(want string) {
		t.Helper()
		if err := s.Prompt(ctx, "publish", nil); err != nil {
			t.Fatal(err)
		}
		if !testproc.CheckFor(10*time.Second, testproc.Poll, func() bool { return strings.Contains(h.logs.String(), "verdict "+want) }) {
			t.Fatalf("no verdict %q:\n%s", want, h.logs)
		}
	}
	publish("routed")
	held.Store(false)
	publish("tool_not_allowed: Agent 'researcher' does not have the BCPPublish tool")
	if ev := h.audit.find("refused", string(bcp.ToolNotAllowed)); len(ev) != 1 {
		t.Errorf("refused events = %+v", ev)
	}
}

// TestAnnouncementsRateLimit: a subscription's rate_limit is announced to
// its Reader ({max, window_ms}); one without has no rate_limit; the
// Controller's filter, debounce and batch are never announced. A
// subscription approved at run time is announced from the effective set
// the same way, without a limit (it has none).
func TestAnnouncementsRateLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("main", `---
name: main
runtime: [/bin/true]
tools: [BCPQuery]
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 100000
    subscriptions:
      - id: limited
        category: 1
        rate_limit: {max: 2, window: 1h30m}
        filter: priority == "high"
        debounce: {key: priority, window: 10m}
        fields:
          - {name: priority, type: enum, values: [low, high]}
      - id: batched
        category: 1
        batch: {window: 5m, max: 20}
        fields:
          - {name: priority, type: enum, values: [low, high]}
---
`)
	write("researcher", `---
name: researcher
runtime: [/bin/true]
tools: [BCPPublish]
bcp_channels:
  - peer: main
    role: reader
    max_category: 2
    budget_bits: 100000
---
`)
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	approved, refused := set.WithSubscriptions([]*agents.Subscription{{
		ID: "rt-asked", Controller: "main", Reader: "researcher",
		Spec:      bcp.Spec{Category: bcp.Cat1, Fields: []bcp.Field{{Name: "ok", Type: bcp.Boolean}}},
		RateLimit: &agents.Rate{Limit: 1, Window: time.Hour},
	}})
	if len(refused) != 0 {
		t.Fatal(refused[0].Err)
	}
	b, err := json.Marshal(runtime.SubscriptionsActive{Type: runtime.TypeSubscriptionsActive, Subscriptions: announcements(approved, "researcher")})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"bcp_subscriptions_active","subscriptions":[` +
		`{"subscription_id":"limited","controller":"main","category":1,"bandwidth_bits":1,"rate_limit":{"max":2,"window_ms":5400000},"fields":[{"name":"priority","type":"enum","values":["low","high"],"options":["low","high"]}]},` +
		`{"subscription_id":"batched","controller":"main","category":1,"bandwidth_bits":1,"fields":[{"name":"priority","type":"enum","values":["low","high"],"options":["low","high"]}]},` +
		`{"subscription_id":"rt-asked","controller":"main","category":1,"bandwidth_bits":1,"fields":[{"name":"ok","type":"boolean"}]}]}`
	if string(b) != want {
		t.Errorf("announced\n%s\nwant\n%s", b, want)
	}
	for _, hidden := range []string{`"filter"`, `"debounce"`, `"batch"`, "=="} {
		if strings.Contains(string(b), hidden) {
			t.Errorf("the announcement shows %s: %s", hidden, b)
		}
	}
}
