package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/fakert"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// End-to-end tests of issue 14, items 1 to 3, through a real gateway with
// real testrt runtimes: query specs decoded strictly, TriOnyx's
// spellings, and query identity by request_id.

// rawQueries renders TESTRT_QUERIES from raw bodies: each spec is sent
// exactly as written.
func rawQueries(bodies ...string) map[string]string {
	return map[string]string{"QUERIES": "[" + strings.Join(bodies, ",") + "]"}
}

// TestQuerySpecMisspelledKeyIsRefused is the regression test of the bug:
// a misspelled key in a query spec was dropped and the query accepted
// without the limit it meant to set. Now the Controller hears
// validation_failed naming the key, the refusal is audited with the
// payload, and nothing reaches the Reader.
func TestQuerySpecMisspelledKeyIsRefused(t *testing.T) {
	bad := `{"request_id":"req-typo","to":"researcher","category":2,"spec":{"questions":[{"id":"who","question":"Who wrote it?","max_words":3,"fromat":"person_name"}]}}`
	good := `{"request_id":"req-ok","to":"researcher","category":1,"spec":{"fields":[{"name":"found","type":"boolean"}]}}`
	e := startE2E(t, pair(100000, 100000, "review", rawQueries(bad, good), map[string]string{"ANSWERS": `[{"found": true}]`}), nil)
	e.prompt("main", "query")

	refused := e.waitRecords("main", "query_error", 1)[0]
	want := "query refused: validation_failed: Query spec is not valid: questions[0].fromat: unknown field (known: expected_format, format, id, max, max_words, min, name, question)"
	if refused.RequestID != "req-typo" || refused.Detail != want {
		t.Errorf("query_error = %+v, want req-typo and %q", refused, want)
	}
	ev := e.waitEventMatching("refused", string(bcp.ValidationFailed), func(ev store.Event) bool { return ev.Ref == "req-typo" })
	if ev.Agent != "main" || ev.Peer != "researcher" || !strings.Contains(ev.Detail, "questions[0].fromat") || !strings.Contains(string(ev.Payload), `"fromat"`) {
		t.Errorf("refusal event = %+v", ev)
	}
	// The next query of the same turn goes through; only it reaches the
	// Reader, and only its answer is delivered.
	sent := e.waitRecords("main", "query_sent", 1)
	if len(sent) != 1 || sent[0].RequestID != "req-ok" {
		t.Fatalf("query_sent = %+v, want only req-ok", sent)
	}
	e.waitAllDelivered(1)
	if qs := e.records("researcher", "query"); len(qs) != 1 || qs[0].QueryID != sent[0].QueryID {
		t.Errorf("researcher's queries = %+v, want only %s", qs, sent[0].QueryID)
	}
}

// TestQuerySpecFormatIsEnforced: the example, {id, question,
// format: person_name}. "format" is TriOnyx's spelling of expected_format
// and is now enforced: "R2-D2 #42!" is refused, a name is delivered.
func TestQuerySpecFormatIsEnforced(t *testing.T) {
	q := `{"request_id":"req-1","to":"researcher","category":2,"spec":{"questions":[{"id":"who","question":"Who wrote it?","max_words":3,"format":"person_name"}]}}`
	e := startE2E(t, pair(100000, 100000, "review", rawQueries(q),
		map[string]string{"ANSWERS": `[{"who": "R2-D2 #42!"}, {"who": "Ada Lovelace"}]`}), nil)
	e.prompt("main", "query")
	sent := e.waitRecords("main", "query_sent", 1)[0]
	if sent.Bits != 33 {
		t.Errorf("bits = %v, want 33", sent.Bits)
	}
	v := e.waitRecords("researcher", "verdict", 2)
	if v[0].Success || !strings.HasPrefix(v[0].Detail, "validation_failed: who: ") || !strings.Contains(v[0].Detail, "person") {
		t.Errorf("verdict on R2-D2 = %+v, want a person_name refusal", v[0])
	}
	if !v[1].Success {
		t.Errorf("verdict on Ada Lovelace = %+v", v[1])
	}
	d := e.waitRecords("main", "delivery", 1)[0]
	if string(d.Response) != `{"who":"Ada Lovelace"}` {
		t.Errorf("delivered %s", d.Response)
	}
}

// TestQuerySpecTriOnyxSpelling: a query written the way TriOnyx's runtime
// writes it ({name, format, max_words} questions without text, enum
// options) is accepted, charged and validated like the protocol's
// spelling.
func TestQuerySpecTriOnyxSpelling(t *testing.T) {
	cat1 := `{"request_id":"r1","to":"researcher","category":1,"spec":{"fields":[{"name":"level","type":"enum","options":["low","high"]},{"name":"n","type":"integer","min":1,"max":8}],"context":"Look at today's feed."}}`
	cat2 := `{"request_id":"r2","to":"researcher","category":2,"spec":{"questions":[{"name":"author","format":"person_name","max_words":3},{"name":"when","format":"date","max_words":1}]}}`
	e := startE2E(t, pair(100000, 100000, "review", rawQueries(cat1, cat2),
		map[string]string{"ANSWER_ALL": "1", "ANSWERS": `[{"level": "high", "n": 8}, {"author": "Grace Hopper", "when": "1952-05-01"}]`}), nil)
	e.prompt("main", "query")
	sent := e.waitRecords("main", "query_sent", 2)
	if sent[0].Bits != 4 || sent[1].Bits != 44 {
		t.Errorf("bits = %v and %v, want 4 and 44", sent[0].Bits, sent[1].Bits)
	}
	ds := e.waitRecords("main", "delivery", 2)
	got := map[string]string{}
	for _, d := range ds {
		got[d.RequestID] = string(d.Response)
	}
	if got["r1"] != `{"level":"high","n":8}` || got["r2"] != `{"author":"Grace Hopper","when":"1952-05-01"}` {
		t.Errorf("deliveries = %v", got)
	}
}

// otherController is a second Controller of researcher.
const otherController = `tools: [BCPQuery]
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 3
    budget_bits: 100000`

// readerOfTwo is researcher, the Reader of main and other.
func readerOfTwo() string {
	return fmt.Sprintf(researcherChannel, 100000) + `
  - peer: other
    role: reader
    max_category: 3
    budget_bits: 100000`
}

// TestQueryRequestIDsPerController: request ids are each Controller's
// own. Two Controllers may use the same one at once: each gets its own
// answer under it, and the Reader sees only the gateway's ids.
func TestQueryRequestIDsPerController(t *testing.T) {
	q := `{"request_id":"r-1","to":"researcher","category":1,"spec":{"fields":[{"name":"found","type":"boolean"}]}}`
	e := startE2E(t, []agentSpec{
		{name: "main", front: fmt.Sprintf(mainChannel, 100000, "review"), env: rawQueries(q)},
		{name: "other", front: otherController, env: rawQueries(q)},
		{name: "researcher", front: readerOfTwo(), env: map[string]string{"ANSWERS": `[{"found": true}]`}},
	}, nil)
	e.prompt("main", "query")
	e.prompt("other", "query")
	mainSent := e.waitRecords("main", "query_sent", 1)[0]
	otherSent := e.waitRecords("other", "query_sent", 1)[0]
	if mainSent.QueryID == otherSent.QueryID || !strings.HasPrefix(mainSent.QueryID, "q-") || !strings.HasPrefix(otherSent.QueryID, "q-") {
		t.Errorf("query ids %s and %s", mainSent.QueryID, otherSent.QueryID)
	}
	for _, c := range []struct {
		agent string
		sent  rec
	}{{"main", mainSent}, {"other", otherSent}} {
		d := e.waitRecords(c.agent, "delivery", 1)
		if len(d) != 1 || d[0].RequestID != "r-1" || d[0].QueryID != c.sent.QueryID || d[0].Detail != "researcher" {
			t.Errorf("%s's deliveries = %+v, want one for r-1 / %s", c.agent, d, c.sent.QueryID)
		}
	}
	if errs := append(e.records("main", "query_error"), e.records("other", "query_error")...); len(errs) != 0 {
		t.Errorf("refused: %+v", errs)
	}
	for _, r := range e.records("researcher", "query") {
		if !strings.HasPrefix(r.QueryID, "q-") || r.RequestID != "" {
			t.Errorf("the Reader saw %+v", r)
		}
	}
}

// TestQueryRequestIDReuseRefused: a Controller may not reuse the
// request_id of its own query still pending (answers and errors would
// match two queries); another Controller's pending query with the same id
// is no obstacle.
func TestQueryRequestIDReuseRefused(t *testing.T) {
	q := `{"request_id":"r-1","to":"researcher","category":1,"spec":{"fields":[{"name":"found","type":"boolean"}]}}`
	e := startE2E(t, []agentSpec{
		{name: "main", front: fmt.Sprintf(mainChannel, 100000, "review"), env: rawQueries(q)},
		{name: "other", front: otherController, env: rawQueries(q, q)},
		{name: "researcher", front: readerOfTwo(), env: map[string]string{"SILENT": "1"}},
	}, nil)
	e.prompt("main", "query")
	e.waitRecords("main", "query_sent", 1)
	e.prompt("other", "query")
	dup := e.waitRecords("other", "query_error", 1)[0]
	if dup.RequestID != "r-1" || dup.Index != 1 || !strings.HasPrefix(dup.Detail, "query refused: protocol_error: request_id 'r-1' is already used by your pending query to 'researcher'") {
		t.Errorf("reused request_id: %+v", dup)
	}
	if sent := e.records("other", "query_sent"); len(sent) != 1 || sent[0].Index != 0 {
		t.Errorf("other's query_sent = %+v, want its first query only", sent)
	}
	e.waitEventMatching("refused", string(bcp.ProtocolError), func(ev store.Event) bool { return ev.Agent == "other" && ev.Ref == "r-1" })
}

// triOnyxE2E runs main, a Controller in TriOnyx's dialect whose runtime
// plays TriOnyx's (the test binary as triOnyxController) sending queries,
// and researcher, a testrt Reader with readerEnv. tune adjusts the config.
func triOnyxE2E(t *testing.T, queries []string, readerEnv map[string]string, tune func(*Config)) *e2e {
	t.Helper()
	return triOnyxE2EWith(t, fmt.Sprintf(mainChannel, 100000, "review"), queries, readerEnv, tune)
}

// triOnyxE2EWith is triOnyxE2E with main's frontmatter after its env.
func triOnyxE2EWith(t *testing.T, front string, queries []string, readerEnv map[string]string, tune func(*Config)) *e2e {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	def := fmt.Sprintf("---\nname: main\nruntime: [%q, -test.run=^$]\nruntime_dialect: trionyx\nenv:\n  %s: trionyx-controller\n  TRIONYX_LOG: ${main_TLOG}\n  TRIONYX_QUERIES: ${main_TQ}\n%s\n---\nYou are main.\n",
		exe, fakert.Env, front)
	if err := os.WriteFile(filepath.Join(dir, "main.md"), []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	set, vars := writeAgents(t, dir, []agentSpec{{name: "researcher", front: fmt.Sprintf(researcherChannel, 100000), env: readerEnv}})
	vars["main_TLOG"] = triOnyxLog(dir)
	vars["main_TQ"] = "[" + strings.Join(queries, ",") + "]"
	return runE2E(t, dir, set, vars, tune)
}

func triOnyxLog(dir string) string {
	return filepath.Join(agents.DefaultWorkdir(dir, "main"), "trionyx.log")
}

// triOnyxGot waits until main's TriOnyx runtime has logged n messages of
// type typ, and returns them.
func (e *e2e) triOnyxGot(typ string, n int) []map[string]any {
	e.t.Helper()
	var got []map[string]any
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		got = nil
		b, _ := os.ReadFile(triOnyxLog(e.dir))
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["type"] == typ {
				got = append(got, m)
			}
		}
		return len(got) >= n
	}) {
		b, _ := os.ReadFile(triOnyxLog(e.dir))
		e.t.Fatalf("main's TriOnyx runtime got %d %s, want %d; its log:\n%s", len(got), typ, n, b)
	}
	return got
}

// TestQueryTriOnyxDialect: a Controller whose runtime is TriOnyx's matches
// by its own request_id: it is the query_id of what it is told about the
// query (bcp_query_sent, bcp_response_delivery), the Reader still sees the
// gateway's id, a Cat-3 answer arrives under "response", where TriOnyx's
// runtime reads it, and a refusal reaches it as a turn of its own, which
// its result ends.
func TestQueryTriOnyxDialect(t *testing.T) {
	cat3 := `{"request_id":"req-sum","to":"researcher","category":3,"spec":{"directive":"Summarize the feed.","max_words":20}}`
	cat1 := `{"request_id":"req-bool","to":"researcher","category":1,"spec":{"fields":[{"name":"found","type":"boolean"}]}}`
	typo := `{"request_id":"req-typo","to":"researcher","category":2,"spec":{"questions":[{"name":"who","fromat":"person_name","max_words":3}]}}`
	// TriOnyx's Reader answers a Cat-3 query under "response".
	e := triOnyxE2E(t, []string{cat3, cat1, typo},
		map[string]string{"ANSWER_ALL": "1", "ANSWERS": `[{"response": "Two new papers on error correction."}, {"found": true}]`}, nil)
	e.prompt("main", "query")
	sent := e.triOnyxGot("bcp_query_sent", 2)
	if sent[0]["query_id"] != "req-sum" || sent[1]["query_id"] != "req-bool" {
		t.Errorf("bcp_query_sent = %v; want the request ids as query ids", sent)
	}
	qe := e.triOnyxGot("bcp_query_error", 1)[0]
	if qe["request_id"] != "req-typo" || qe["query_id"] != nil || !strings.HasPrefix(qe["reason"].(string), "validation_failed: Query spec is not valid: questions[0].fromat: unknown field") {
		t.Errorf("bcp_query_error = %v", qe)
	}
	item := e.pendingApprovals(1)[0]
	if item.RequestID != "req-sum" || !strings.HasPrefix(item.QueryID, "q-") {
		t.Errorf("approval item = %+v", item)
	}
	// The Reader's turn on the Cat-3 query waits for the verdict; the
	// second query comes after.
	if _, err := e.gw.Approve(testCtx(t), item.ID, item.SHA256, tester, "ok"); err != nil {
		t.Fatal(err)
	}
	for _, q := range e.waitRecords("researcher", "query", 2) {
		if !strings.HasPrefix(q.QueryID, "q-") {
			t.Errorf("the Reader saw query id %q", q.QueryID)
		}
	}
	got := map[any]map[string]any{}
	for _, d := range e.triOnyxGot("bcp_response_delivery", 2) {
		got[d["query_id"]] = d
	}
	if d := got["req-sum"]; d == nil || d["request_id"] != "req-sum" || fmt.Sprint(d["response"]) != "map[response:Two new papers on error correction.]" {
		t.Errorf("Cat-3 delivery = %v", d)
	}
	if d := got["req-bool"]; d == nil || d["request_id"] != "req-bool" || fmt.Sprint(d["response"]) != "map[found:true]" {
		t.Errorf("Cat-1 delivery = %v", d)
	}
	// Every result ended a turn: the prompt, the query error, the two
	// deliveries; none was refused.
	done := e.waitEventMatching("turn_done", "", func(ev store.Event) bool {
		return strings.HasPrefix(ev.Detail, "query error for request req-typo done")
	})
	if !strings.Contains(done.Detail, "tokens 50 in, 9 out (cache: 0 written, 40 read)") {
		t.Errorf("turn_done = %+v", done)
	}
	e.waitAllDelivered(2)
	if r := e.eventsMatching("refused", string(bcp.ProtocolError), func(ev store.Event) bool { return ev.Agent == "main" }); len(r) != 0 {
		t.Errorf("main's lines refused: %+v", r)
	}
	// The store keeps the gateway's ids and the normalized summary.
	stored, err := e.store.Deliveries(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range stored {
		if !strings.HasPrefix(d.QueryID, "q-") || (d.Category == bcp.Cat3 && !strings.Contains(string(d.Response), `"summary"`)) {
			t.Errorf("stored delivery %+v", d)
		}
	}
}

// TestQueryTriOnyxDialectTimeout: a TriOnyx Controller's query_timeout
// carries its request_id both as request_id and as query_id.
func TestQueryTriOnyxDialectTimeout(t *testing.T) {
	q := `{"request_id":"req-t","to":"researcher","category":1,"spec":{"fields":[{"name":"found","type":"boolean"}]}}`
	e := triOnyxE2E(t, []string{q}, map[string]string{"SILENT": "1"}, func(c *Config) { c.QueryTimeout = 300 * time.Millisecond })
	e.prompt("main", "query")
	f := e.triOnyxGot("bcp_query_error", 1)[0]
	if f["request_id"] != "req-t" || f["query_id"] != "req-t" || !strings.HasPrefix(f["reason"].(string), "query_timeout: ") {
		t.Errorf("bcp_query_error = %v", f)
	}
	e.waitEventMatching("turn_done", "", func(ev store.Event) bool { return strings.HasPrefix(ev.Detail, "query error for request req-t done") })
}

// TestQueryErrorCarriesQueryID: in the protocol's dialect a query_timeout
// names the gateway's query id beside the request id.
func TestQueryErrorCarriesQueryID(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", queriesOf(cat1Query("req-t", "researcher")), map[string]string{"SILENT": "1"}),
		func(c *Config) { c.QueryTimeout = 300 * time.Millisecond })
	e.prompt("main", "query")
	sent := e.waitRecords("main", "query_sent", 1)[0]
	f := e.waitRecords("main", "query_failed", 1)[0]
	if f.RequestID != "req-t" || f.QueryID != sent.QueryID || !strings.HasPrefix(f.QueryID, "q-") {
		t.Errorf("query_failed = %+v, want query_id %s", f, sent.QueryID)
	}
}

// TestQueryTriOnyxDialectToolNotAllowed: the session's own refusal (no
// BCPQuery tool) also reaches a TriOnyx Controller as a turn, which its
// result ends.
func TestQueryTriOnyxDialectToolNotAllowed(t *testing.T) {
	q := `{"request_id":"req-x","to":"researcher","category":1,"spec":{"fields":[{"name":"found","type":"boolean"}]}}`
	front := strings.Replace(fmt.Sprintf(mainChannel, 100000, "review"), "tools: [BCPQuery]", "tools: [Read]", 1)
	e := triOnyxE2EWith(t, front, []string{q}, nil, nil)
	e.prompt("main", "query")
	f := e.triOnyxGot("bcp_query_error", 1)[0]
	if f["request_id"] != "req-x" || !strings.HasPrefix(f["reason"].(string), "tool_not_allowed: ") {
		t.Errorf("bcp_query_error = %v", f)
	}
	e.waitEventMatching("turn_done", "", func(ev store.Event) bool { return strings.HasPrefix(ev.Detail, "query error for request req-x done") })
	if r := e.eventsMatching("refused", string(bcp.ProtocolError), func(ev store.Event) bool { return ev.Agent == "main" }); len(r) != 0 {
		t.Errorf("main's lines refused: %+v", r)
	}
}
