package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// python is the interpreter of the TriOnyx stand-in: the system's, named
// explicitly (the first python3 on PATH may be a shim that cannot run in
// a sandbox).
const python = "/usr/bin/python3"

// pyRecord is one line of the stand-in's log (see its doc).
type pyRecord struct {
	Event          string          `json:"event"`
	QueryID        string          `json:"query_id"`
	RequestID      string          `json:"request_id"`
	SubscriptionID string          `json:"subscription_id"`
	Category       int             `json:"category"`
	Seen           []string        `json:"seen"`
	Success        bool            `json:"success"`
	Detail         string          `json:"detail"`
	Reason         string          `json:"reason"`
	Matched        *bool           `json:"matched"`
	Response       json.RawMessage `json:"response"`
	Context        string          `json:"context"`
	Type           string          `json:"type"`
}

// TestTriOnyxPythonRuntime runs the Python stand-in for TriOnyx's agent
// runner (examples/runtimes/trionyx-python, standard library only) as both
// a Controller and a Reader through a real gateway, sandboxed: queries
// written in TriOnyx's spellings are accepted (and a misspelled one
// refused), the Reader reads each question's name, format and word limit
// and each enum's options where TriOnyx's runner does, the Controller
// matches every answer and error by its own request_id, a Cat-3 answer
// reaches it under "response", subscriptions are announced in TriOnyx's
// spellings too, its token counts are read, and its request for a service
// bcpgw does not offer is answered at once.
func TestTriOnyxPythonRuntime(t *testing.T) {
	script := pythonRuntime(t, "trionyx-python")
	dir := t.TempDir()
	common := fmt.Sprintf("runtime: [%s, %s]\nsandbox: {read_only: [%s]}\nenv:\n  TRIONYX_LOG: ${%%s_LOG}\n  TRIONYX_QUERIES: ${%%s_Q}\n", python, script, filepath.Dir(script))
	mainDef := "---\nname: main\n" + fmt.Sprintf(common, "main", "main") + `runtime_dialect: trionyx
tools: [BCPQuery]
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 3
    budget_bits: 100000
    max_cat2_queries: 5
    max_cat3_queries: 5
    subscriptions:
      - id: findings
        category: 2
        questions:
          - {name: topic, format: short_text, max_words: 4}
          - {name: author, format: person_name, max_words: 3}
      - id: alerts
        category: 1
        fields:
          - {name: level, type: enum, options: [low, high, critical]}
---
You are main.
`
	readerDef := "---\nname: researcher\n" + fmt.Sprintf(common, "researcher", "researcher") + `tools: [BCPRespond, BCPPublish]
bcp_channels:
  - peer: main
    role: reader
    max_category: 3
    budget_bits: 100000
---
You are the researcher.
`
	for name, def := range map[string]string{"main": mainDef, "researcher": readerDef} {
		if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(def), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatalf("definitions: %v", err)
	}
	logOf := func(agent string) string { return filepath.Join(agents.DefaultWorkdir(dir, agent), "trionyx.log") }
	// The queries as TriOnyx's runtime writes them (its model fills in
	// the spec; the runner adds the context).
	queries := `[
	 {"to":"researcher","category":1,"spec":{"fields":[{"name":"level","type":"enum","options":["low","high"]},{"name":"score","type":"integer","min":1,"max":5}],"context":"Today's feed."}},
	 {"to":"researcher","category":2,"spec":{"questions":[{"name":"author","format":"person_name","max_words":3},{"name":"when","format":"date","max_words":1}]}},
	 {"to":"researcher","category":3,"spec":{"directive":"Summarize the feed for the morning brief.","max_words":12}},
	 {"to":"researcher","category":2,"spec":{"questions":[{"name":"author","fromat":"person_name","max_words":3}]}}
	]`
	vars := map[string]string{"PATH": os.Getenv("PATH"), "HOME": dir,
		"main_LOG": logOf("main"), "main_Q": queries, "researcher_LOG": logOf("researcher"), "researcher_Q": "[]"}
	e := runE2E(t, dir, set, vars, nil)

	read := func(agent string) []pyRecord {
		b, _ := os.ReadFile(logOf(agent))
		var out []pyRecord
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r pyRecord
			if json.Unmarshal([]byte(l), &r) == nil && r.Event != "" {
				out = append(out, r)
			}
		}
		return out
	}
	wait := func(agent, event string, n int) []pyRecord {
		t.Helper()
		var got []pyRecord
		if !testproc.CheckFor(testWait, pollStep, func() bool {
			got = nil
			for _, r := range read(agent) {
				if r.Event == event {
					got = append(got, r)
				}
			}
			return len(got) >= n
		}) {
			b, _ := os.ReadFile(logOf(agent))
			t.Fatalf("%s logged %d %q, want %d; its log:\n%s", agent, len(got), event, n, b)
		}
		return got
	}

	// Pull: three queries go through, the misspelled one is refused.
	e.prompt("main", "query")
	requests := wait("main", "request", 4)
	qerr := wait("main", "query_error", 1)[0]
	if qerr.RequestID != requests[3].RequestID || qerr.Matched == nil || !*qerr.Matched ||
		!strings.HasPrefix(qerr.Reason, "validation_failed: Query spec is not valid: questions[0].fromat: unknown field") {
		t.Errorf("query_error = %+v, want the 4th request's, naming fromat", qerr)
	}
	reply := wait("main", "send_message_response", 1)[0]
	if reply.Success || !strings.Contains(reply.Detail, "send_message_request is not supported by bcpgw") {
		t.Errorf("send_message_response = %+v", reply)
	}
	item := e.pendingApprovals(1)[0] // the Cat-3 answer; the Reader waits for its verdict
	if _, err := e.gw.Approve(testCtx(t), item.ID, item.SHA256, tester, "ok"); err != nil {
		t.Fatal(err)
	}
	qs := wait("researcher", "query", 3)
	wantSeen := map[int][]string{
		1: {"level (enum): one of ['low', 'high']", "score (integer) (range: 1-5)"},
		2: {"author (format: person_name, max 3 words)", "when (format: date, max 1 words)"},
		3: {"directive: Summarize the feed for the morning brief. (max 12 words)"},
	}
	for _, q := range qs {
		if !slices.Equal(q.Seen, wantSeen[q.Category]) || !strings.HasPrefix(q.QueryID, "q-") {
			t.Errorf("the Reader's runner showed %q for query %s (Cat-%d), want %q", q.Seen, q.QueryID, q.Category, wantSeen[q.Category])
		}
		if q.Category == 1 && q.Context != "Today's feed." {
			t.Errorf("context = %q", q.Context)
		}
		for _, r := range requests {
			if q.QueryID == r.RequestID {
				t.Errorf("the Reader saw a request id: %+v", q)
			}
		}
	}
	for _, v := range wait("researcher", "verdict", 3) {
		if !v.Success {
			t.Errorf("answer refused: %+v", v)
		}
	}
	byQuery := map[string]pyRecord{}
	for _, d := range wait("main", "delivery", 3) {
		byQuery[d.QueryID] = d
	}
	want := []string{`{"level": "high", "score": 5}`, `{"author": "Ada Lovelace", "when": "1843-07-10"}`,
		`{"response": "Summary of what was asked: Summarize the feed for the morning brief."}`}
	for i, w := range want {
		d, ok := byQuery[requests[i].RequestID]
		if !ok || d.Matched == nil || !*d.Matched || string(d.Response) != w {
			t.Errorf("delivery for request %d = %+v, want %s matched by its request_id", i, d, w)
		}
	}

	// Push: the subscriptions are announced in both spellings and the
	// Reader's publishes are delivered.
	e.prompt("researcher", "publish")
	subs := wait("researcher", "subscriptions", 1)[0]
	wantSubs := []string{"findings: topic (format: short_text, max 4 words); author (format: person_name, max 3 words)",
		"alerts: level (enum): one of ['low', 'high', 'critical']"}
	if !slices.Equal(subs.Seen, wantSubs) {
		t.Errorf("subscriptions shown as %q, want %q", subs.Seen, wantSubs)
	}
	for _, v := range wait("researcher", "publish_verdict", 2) {
		if !v.Success {
			t.Errorf("publish refused: %+v", v)
		}
	}
	pushes := map[string]string{}
	for _, d := range wait("main", "delivery", 5) {
		if d.SubscriptionID != "" {
			pushes[d.SubscriptionID] = string(d.Response)
		}
	}
	if pushes["findings"] != `{"topic": "analytical engine notes", "author": "Ada Lovelace"}` || pushes["alerts"] != `{"level": "critical"}` {
		t.Errorf("pushes = %v", pushes)
	}

	for _, ev := range e.events("session_started", "") {
		if !strings.Contains(ev.Detail, python+" ") || !strings.Contains(ev.Detail, "(sandboxed: ") {
			t.Errorf("not sandboxed: %+v", ev)
		}
	}
	// Every result ended a turn, token counts read; nothing the runtimes
	// wrote was refused but the unsupported request.
	e.waitAllDelivered(5)
	for _, ev := range e.events("turn_done", "") {
		if !strings.Contains(ev.Detail, "tokens 321 in, 45 out (cache: 6 written, 789 read)") {
			t.Errorf("turn_done = %+v", ev)
		}
	}
	for _, ev := range e.eventsMatching("refused", string(bcp.ProtocolError), func(ev store.Event) bool {
		return !strings.Contains(ev.Detail, "send_message_request is not supported by bcpgw")
	}) {
		t.Errorf("refused: %+v", ev)
	}
	if n := len(e.eventsMatching("refused", string(bcp.ProtocolError), func(store.Event) bool { return true })); n != 1 {
		t.Errorf("%d protocol_error refusals, want 1 (send_message_request)", n)
	}
}
