package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// The tests below run the reference runtime in Python
// (examples/runtimes/python/runtime.py, standard library only) as a
// Controller and a Reader through a real gateway, sandboxed, and check
// every line it exchanged against docs/protocol.md (checkTrace).

// pyrtVars are the PYRT_* variables every agent's env names (see the
// runtime's doc).
var pyrtVars = []string{"LOG", "TRACE", "QUERIES", "RESPONSES", "ANSWER", "VERDICT_TIMEOUT", "CRASH_AFTER_APPLY"}

// pyrtRecord is one line of the runtime's PYRT_LOG.
type pyrtRecord struct {
	Event          string          `json:"event"`
	Applied        int             `json:"applied"`
	DeliveryID     string          `json:"delivery_id"`
	Redelivered    bool            `json:"redelivered"`
	SubscriptionID string          `json:"subscription_id"`
	QueryID        string          `json:"query_id"`
	RequestID      string          `json:"request_id"`
	FromAgent      string          `json:"from_agent"`
	Category       int             `json:"category"`
	Context        string          `json:"context"`
	Success        bool            `json:"success"`
	Late           bool            `json:"late"`
	Detail         string          `json:"detail"`
	Reason         string          `json:"reason"`
	Response       json.RawMessage `json:"response"`
}

// pyrt is a gateway running the Python runtime as main (Controller) and
// researcher (Reader).
type pyrt struct {
	*e2e
	dir string
}

// pythonRuntime returns the path of examples/runtimes/NAME/runtime.py,
// skipping the test where there is no python to run it.
func pythonRuntime(t *testing.T, name string) string {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is absent (%v): the %s runtime is a Python program", python, err, name)
	}
	script, err := filepath.Abs(filepath.Join("..", "examples", "runtimes", name, "runtime.py"))
	if err != nil {
		t.Fatal(err)
	}
	return script
}

// startPyrt writes the two definitions, each agent's PYRT_* settings
// (without the prefix) from env, and runs a gateway on them. The
// runtime's log and trace are in each agent's workdir, the only place of
// the test's directory its sandbox can write.
func startPyrt(t *testing.T, env map[string]map[string]string) *pyrt {
	t.Helper()
	script := pythonRuntime(t, "python")
	dir := t.TempDir()
	vars := map[string]string{"PATH": os.Getenv("PATH"), "HOME": dir}
	fronts := map[string]string{
		"main": `tools: [BCPQuery]
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 3
    budget_bits: 100000
    max_cat2_queries: 5
    subscriptions:
      - id: alerts
        category: 1
        fields:
          - {name: breaking, type: boolean}
          - {name: priority, type: enum, values: [low, medium, high]}
          - {name: score, type: integer, min: 1, max: 5}
      - id: findings
        category: 2
        on_anomaly: reject
        questions:
          - {id: topic, question: "What is the topic?", max_words: 6, expected_format: short_text}
          - {id: author, question: "Who wrote it?", max_words: 3, expected_format: person_name}
      - id: digest
        category: 3
        directive: Summarize what changed today.
        max_words: 40`,
		"researcher": `tools: [BCPPublish, BCPRespond]
bcp_channels:
  - peer: main
    role: reader
    max_category: 3
    budget_bits: 100000`,
	}
	for _, name := range []string{"main", "researcher"} {
		var b strings.Builder
		fmt.Fprintf(&b, "---\nname: %s\nruntime: [%s, %s]\nsandbox: {read_only: [%s]}\nenv:\n", name, python, script, filepath.Dir(script))
		for _, v := range pyrtVars {
			key := name + "_" + v
			fmt.Fprintf(&b, "  PYRT_%s: ${%s}\n", v, key)
			vars[key] = env[name][v]
		}
		vars[name+"_LOG"] = filepath.Join(agents.DefaultWorkdir(dir, name), "pyrt.log")
		vars[name+"_TRACE"] = filepath.Join(agents.DefaultWorkdir(dir, name), "trace.jsonl")
		fmt.Fprintf(&b, "%s\n---\nYou are %s.\n", fronts[name], name)
		if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatalf("definitions: %v", err)
	}
	return &pyrt{e2e: runE2E(t, dir, set, vars, nil), dir: dir}
}

func (p *pyrt) workdir(agent string) string { return agents.DefaultWorkdir(p.dir, agent) }

// records returns agent's records of event so far.
func (p *pyrt) records(agent, event string) []pyrtRecord {
	b, _ := os.ReadFile(filepath.Join(p.workdir(agent), "pyrt.log"))
	var out []pyrtRecord
	for _, l := range strings.Split(string(b), "\n") {
		var r pyrtRecord
		if json.Unmarshal([]byte(l), &r) == nil && r.Event == event {
			out = append(out, r)
		}
	}
	return out
}

// wait waits until agent has logged n records of event, and returns them.
func (p *pyrt) wait(agent, event string, n int) []pyrtRecord {
	p.t.Helper()
	var got []pyrtRecord
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		got = p.records(agent, event)
		return len(got) >= n
	}) {
		b, _ := os.ReadFile(filepath.Join(p.workdir(agent), "pyrt.log"))
		p.t.Fatalf("%s logged %d %q, want %d; its log:\n%s", agent, len(got), event, n, b)
	}
	return got
}

// applied returns the Controller's record of applied deliveries: its
// deliveries.jsonl.
func (p *pyrt) applied(agent string) []pyrtRecord {
	b, err := os.ReadFile(filepath.Join(p.workdir(agent), "deliveries.jsonl"))
	if err != nil {
		p.t.Fatal(err)
	}
	var out []pyrtRecord
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r pyrtRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			p.t.Fatalf("deliveries.jsonl: %v: %s", err, l)
		}
		out = append(out, r)
	}
	return out
}

// sandboxed checks that every session ran in the sandbox.
func (p *pyrt) sandboxed() {
	p.t.Helper()
	evs := p.events("session_started", "")
	if len(evs) == 0 {
		p.t.Error("no session_started events")
	}
	for _, ev := range evs {
		if !strings.Contains(ev.Detail, python+" ") || !strings.Contains(ev.Detail, "(sandboxed: ") {
			p.t.Errorf("not sandboxed: %+v", ev)
		}
	}
}

// sameJSON reports whether a and b hold the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestPythonRuntimePushAndQuery: the Reader publishes to each announced
// subscription on a prompt (Cat-1 and Cat-2 delivered at once, Cat-3
// once an operator approved it, its verdict coming after the Reader's
// turn ended), the Controller applies each delivery, asks the Reader a
// query that the Reader answers in its turn and that is delivered with
// the Controller's request_id, and hears a refused query's error at once.
// Every line both runtimes exchanged matches docs/protocol.md.
func TestPythonRuntimePushAndQuery(t *testing.T) {
	p := startPyrt(t, map[string]map[string]string{
		"main": {"QUERIES": `[
			{"to": "researcher", "category": 2, "spec": {"questions": [{"id": "title", "question": "What is the title?", "max_words": 8, "expected_format": "short_text"}], "context": "The article you read today."}},
			{"to": "nobody", "category": 1, "spec": {"fields": [{"name": "ok", "type": "boolean"}]}}
		]`},
		"researcher": {"VERDICT_TIMEOUT": "1"},
	})

	// Push.
	p.prompt("researcher", "publish what you found")
	verdicts := p.wait("researcher", "verdict", 2)
	for _, v := range verdicts[:2] {
		if !v.Success || v.Late || !strings.HasPrefix(v.Detail, "Published to controller main (Cat-") {
			t.Errorf("verdict = %+v", v)
		}
	}
	if pending := p.wait("researcher", "verdict_pending", 1)[0]; pending.SubscriptionID != "digest" {
		t.Errorf("verdict_pending = %+v, want the Cat-3 digest's", pending)
	}
	item := p.pendingApprovals(1)[0]
	if _, err := p.gw.Approve(testCtx(t), item.ID, item.SHA256, tester, "ok"); err != nil {
		t.Fatal(err)
	}
	if late := p.wait("researcher", "verdict", 3)[2]; !late.Late || !late.Success || late.SubscriptionID != "digest" {
		t.Errorf("the digest's verdict = %+v, want a late success", late)
	}
	want := map[string]string{
		"alerts":   `{"breaking": true, "priority": "low", "score": 1}`,
		"findings": `{"topic": "nothing new to report", "author": "Ada Lovelace"}`,
		"digest":   `{"summary": "Nothing changed since the last summary."}`,
	}
	for _, a := range p.wait("main", "applied", 3) {
		if w, ok := want[a.SubscriptionID]; !ok || !sameJSON(a.Response, []byte(w)) || a.FromAgent != "researcher" ||
			a.Redelivered || !strings.HasPrefix(a.DeliveryID, "dl-") {
			t.Errorf("applied %+v, want %s", a, w)
		}
		delete(want, a.SubscriptionID)
	}

	// Pull.
	p.prompt("main", "ask the researcher")
	sent := p.wait("main", "query_sent", 1)[0]
	if refused := p.wait("main", "query_refused", 1)[0]; !strings.HasPrefix(refused.Reason, string(bcp.NoChannel)+": ") {
		t.Errorf("query_refused = %+v, want no_channel", refused)
	}
	q := p.wait("researcher", "query", 1)[0]
	if q.QueryID != sent.QueryID || q.FromAgent != "main" || q.Category != 2 || q.Context != "The article you read today." {
		t.Errorf("the Reader got %+v for the query sent as %+v", q, sent)
	}
	if v := p.wait("researcher", "verdict", 4)[3]; !v.Success || v.QueryID != q.QueryID || !strings.HasPrefix(v.Detail, "Answered query "+q.QueryID) {
		t.Errorf("the answer's verdict = %+v", v)
	}
	answer := p.wait("main", "applied", 4)[3]
	if answer.QueryID != sent.QueryID || answer.RequestID != sent.RequestID || answer.SubscriptionID != "" ||
		!sameJSON(answer.Response, []byte(`{"title": "nothing new to report"}`)) {
		t.Errorf("the answer was applied as %+v, want query %s (request %s)", answer, sent.QueryID, sent.RequestID)
	}
	if got := p.applied("main"); len(got) != 4 {
		t.Errorf("deliveries.jsonl holds %d deliveries, want 4: %+v", len(got), got)
	}

	p.sandboxed()
	p.waitAllDelivered(4)
	if refused := p.events("refused", string(bcp.ProtocolError)); len(refused) > 0 {
		t.Errorf("the gateway refused lines of the runtime: %+v", refused)
	}
	seen := checkTrace(t, filepath.Join(p.workdir("main"), "trace.jsonl"))
	for typ := range checkTrace(t, filepath.Join(p.workdir("researcher"), "trace.jsonl")) {
		seen[typ] = true
	}
	for _, typ := range []string{"start", "ready", "bcp_subscriptions_active", "prompt", "bcp_response", "bcp_validation_result",
		"result", "bcp_response_delivery", "bcp_query_request", "bcp_query_sent", "bcp_query_error", "bcp_query"} {
		if !seen[typ] {
			t.Errorf("no %s in the traces (seen: %q)", typ, sortedKeys(seen))
		}
	}
}

// TestPythonRuntimeDedupesRedelivery: the Controller crashes after
// applying its first delivery and before its result; the gateway sends
// the delivery again, marked redelivered, to the next process, which
// finds its delivery_id in the workdir the first one wrote and
// acknowledges it without applying it twice.
func TestPythonRuntimeDedupesRedelivery(t *testing.T) {
	p := startPyrt(t, map[string]map[string]string{
		"main":       {"CRASH_AFTER_APPLY": "1"},
		"researcher": {"VERDICT_TIMEOUT": "1"}, // the Cat-3 digest waits for an operator, who never comes
	})
	p.prompt("researcher", "publish what you found")
	applied := p.wait("main", "applied", 2)
	crash := p.wait("main", "crash", 1)[0]
	dup := p.wait("main", "duplicate", 1)[0]
	first, second := applied[0], applied[1]
	if crash.DeliveryID != first.DeliveryID || first.Redelivered {
		t.Errorf("crashed on %+v after applying %+v", crash, first)
	}
	if dup.DeliveryID != first.DeliveryID || !dup.Redelivered {
		t.Errorf("duplicate = %+v, want %s again, marked redelivered", dup, first.DeliveryID)
	}
	if second.DeliveryID == first.DeliveryID || second.SubscriptionID != "findings" {
		t.Errorf("then applied %+v, want the findings push", second)
	}
	starts := p.wait("main", "start", 2)
	if starts[0].Applied != 0 || starts[1].Applied != 1 {
		t.Errorf("starts = %+v, want the second process to find 1 applied delivery in its workdir", starts)
	}
	got := p.applied("main")
	if len(got) != 2 || got[0].DeliveryID != first.DeliveryID || got[1].DeliveryID != second.DeliveryID {
		t.Errorf("deliveries.jsonl = %+v, want %s and %s once each", got, first.DeliveryID, second.DeliveryID)
	}
	p.waitEvent("session_crashed", "")
	p.waitEvent("delivery_retried", "")
	p.sandboxed()
	checkTrace(t, filepath.Join(p.workdir("main"), "trace.jsonl"))
	checkTrace(t, filepath.Join(p.workdir("researcher"), "trace.jsonl"))
}
