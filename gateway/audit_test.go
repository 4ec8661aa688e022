package gateway

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

func TestRefusalFloodIsSummedUpInTheLog(t *testing.T) {
	clock := testproc.FakeClock()
	logs := &testproc.Buffer{}
	a := LogAuditor{Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}), Quiet: newLogQuiet(clock)}
	refusal := store.Event{Kind: "refused", Agent: "researcher", Peer: "main", Code: "backlog_full", Detail: "backlog_full: full"}
	for range 1000 {
		a.Audit(refusal)
	}
	// Another agent's refusals and other events are not held back.
	a.Audit(store.Event{Kind: "refused", Agent: "watcher", Code: "backlog_full", Detail: "other agent"})
	a.Audit(store.Event{Kind: "session_started", Agent: "main", Detail: "not a refusal"})
	out := logs.String()
	if n := strings.Count(out, "detail=\"backlog_full: full\""); n != quietBurst {
		t.Errorf("%d refusals logged in the first window, want %d\n%s", n, quietBurst, out)
	}
	if n := strings.Count(out, "not logging them until"); n != 1 {
		t.Errorf("the log says %d times that it leaves refusals out, want once\n%s", n, out)
	}
	for _, want := range []string{"other agent", "not a refusal", "event: agent=researcher kind=refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q\n%s", want, out)
		}
	}
	clock.Advance(quietWindow)
	a.Audit(refusal)
	out = logs.String()
	if !strings.Contains(out, "995 more refused events (backlog_full) of researcher were not logged") {
		t.Errorf("no summary of the 995 left out\n%s", out)
	}
	if n := strings.Count(out, "detail=\"backlog_full: full\""); n != quietBurst+1 {
		t.Errorf("%d refusals logged after the window, want %d", n, quietBurst+1)
	}
}

func TestLogPayloadIsCut(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes
	got := logPayload([]byte(long))
	if !strings.HasSuffix(got, "... (600 bytes; bcpgw events --json has it)") || len(got) > maxLogPayload+60 {
		t.Errorf("logPayload = %q", got)
	}
	if cut := strings.TrimSuffix(got, "... (600 bytes; bcpgw events --json has it)"); !utf8.ValidString(cut) || len(cut) != maxLogPayload {
		t.Errorf("cut at %d bytes (valid UTF-8: %v), want %d", len(cut), utf8.ValidString(cut), maxLogPayload)
	}
	if got := logPayload([]byte("short")); got != "short" {
		t.Errorf("logPayload(short) = %q", got)
	}
}

// The log says how to decide a held item, and, after a restart, that
// items from before it still wait and for whom.
func TestLogSaysHowToDecideWaitingItems(t *testing.T) {
	e := startE2E(t, digests(1), func(c *Config) {
		item := store.Approval{Controller: "main", Reader: "researcher", SubscriptionID: "digest", Category: 3,
			Response: []byte(`{"summary":"held before"}`), Bits: 10, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
		if err := c.Store.AddApproval(context.Background(), &item); err != nil {
			t.Fatal(err)
		}
	})
	e.prompt("researcher", "go")
	e.pendingApprovals(2)
	hint := "decide=\"bcpgw approvals --state " + e.dir + "\""
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		out := e.logs.String()
		return strings.Contains(out, "approval item waiting for an operator") && strings.Count(out, hint) >= 2
	}) {
		t.Errorf("the log does not say how to decide the items (%s)\n%s", hint, e.logs)
	}
	if out := e.logs.String(); !strings.Contains(out, "approval items from before the restart wait for an operator: pending=1") {
		t.Errorf("the log does not mention the item from before the restart\n%s", out)
	}
}
