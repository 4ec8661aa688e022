package gateway

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

func TestRefusalFloodIsSummedUpInTheLog(t *testing.T) {
	clock := newFakeClock()
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
	if !strings.Contains(out, "990 more refused events (backlog_full) of researcher were not logged") {
		t.Errorf("no summary of the 990 left out\n%s", out)
	}
	if n := strings.Count(out, "detail=\"backlog_full: full\""); n != quietBurst+1 {
		t.Errorf("%d refusals logged after the window, want %d", n, quietBurst+1)
	}
}
