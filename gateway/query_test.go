package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

// End-to-end tests of the pull flow (PROTOCOL.md section 5, Pull): a
// Controller's testrt sends TESTRT_QUERIES on the prompt "query", a
// Reader's testrt answers with TESTRT_ANSWERS.

// queryList renders TESTRT_QUERIES.
func queryList(qs ...runtime.QueryRequest) string {
	b, err := json.Marshal(qs)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// cat2Query asks one short_text question per word limit, with ids q0, q1, ...
func cat2Query(requestID, to string, words ...int) runtime.QueryRequest {
	q := runtime.QueryRequest{RequestID: requestID, To: to, Category: bcp.Cat2}
	for i, w := range words {
		q.Spec.Questions = append(q.Spec.Questions, bcp.Question{ID: fmt.Sprintf("q%d", i), Question: "What did you find?", MaxWords: w, Format: bcp.ShortText})
	}
	return q
}

// cat1Query asks for one boolean (1 bit).
func cat1Query(requestID, to string) runtime.QueryRequest {
	return runtime.QueryRequest{RequestID: requestID, To: to, Category: bcp.Cat1,
		Spec: runtime.QuerySpec{Fields: []bcp.Field{{Name: "found", Type: bcp.Boolean}}}}
}

// cat3Query asks for a summary of at most maxWords words.
func cat3Query(requestID, to string, maxWords int) runtime.QueryRequest {
	return runtime.QueryRequest{RequestID: requestID, To: to, Category: bcp.Cat3,
		Spec: runtime.QuerySpec{Directive: "Summarize what you found.", MaxWords: maxWords}}
}

// testChannel is one bcp_channels entry of a test definition.
type testChannel struct {
	peer, role          string
	maxCategory, budget int
	maxCat2, maxCat3    int // controller side only
}

// agentFront renders the frontmatter of a test agent (after name,
// runtime and env): its tools and channels.
func agentFront(tools []string, chans ...testChannel) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tools: [%s]\n", strings.Join(tools, ", "))
	if len(chans) > 0 {
		b.WriteString("bcp_channels:\n")
	}
	for _, c := range chans {
		fmt.Fprintf(&b, "  - peer: %s\n    role: %s\n    max_category: %d\n    budget_bits: %d\n", c.peer, c.role, c.maxCategory, c.budget)
		if c.role == "controller" {
			fmt.Fprintf(&b, "    max_cat2_queries: %d\n    max_cat3_queries: %d\n", c.maxCat2, c.maxCat3)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// queriesOf is a TESTRT setting that sends qs on the prompt "query".
func queriesOf(qs ...runtime.QueryRequest) map[string]string {
	return map[string]string{"QUERIES": queryList(qs...)}
}

func queryInt64(v int64) *int64 { return &v }

func TestQueryCat2IsAnsweredAndDelivered(t *testing.T) {
	q := runtime.QueryRequest{RequestID: "req-1", To: "researcher", Category: bcp.Cat2, Spec: runtime.QuerySpec{
		MaxWords: 20,
		Context:  "Looking into error correction.",
		Questions: []bcp.Question{
			{ID: "topic", Question: "What is the topic?", MaxWords: 10, Format: bcp.ShortText},
			{ID: "finding", Question: "What did you find?", Format: bcp.ShortText}, // the spec's 20 words
			{ID: "relevance", Question: "How relevant, 1 to 5?", MaxWords: 1, Format: bcp.IntegerFmt, Min: queryInt64(1), Max: queryInt64(5)},
		},
	}}
	const bits = 11 * (10 + 20 + 1)
	// Keys out of order, runs of spaces, a number for the integer.
	answer := `{"relevance": 4, "finding": "  A new   surface code  lowers errors. ", "topic": "Quantum error correction"}`
	e := startE2E(t, pair(100000, 100000, "review", queriesOf(q), map[string]string{"ANSWERS": "[" + answer + "]"}), nil)
	// Neither agent runs yet: the prompt starts main, the query starts
	// researcher, the answer is delivered to main's session.
	e.prompt("main", "query")

	sent := e.waitRecords("main", "query_sent", 1)[0]
	if !strings.HasPrefix(sent.QueryID, "q-") || sent.RequestID != "req-1" || sent.Bits != bits {
		t.Fatalf("query_sent = %+v, want request req-1 and %d bits", sent, bits)
	}
	if errs := e.records("main", "query_error"); len(errs) != 0 {
		t.Fatalf("query refused: %+v", errs)
	}
	got := e.waitRecords("researcher", "query", 1)[0]
	if got.QueryID != sent.QueryID || got.Category != 2 || got.Detail != "main" {
		t.Errorf("researcher's query = %+v, want %s from main, Cat-2", got, sent.QueryID)
	}
	v := e.waitRecords("researcher", "verdict", 1)[0]
	wantDetail := fmt.Sprintf("Answered query %s from controller main (Cat-2, %d.0 bits)", sent.QueryID, bits)
	if !v.Success || v.QueryID != sent.QueryID || v.Detail != wantDetail {
		t.Errorf("verdict = %+v, want success %q", v, wantDetail)
	}

	applied := e.waitRecords("main", "applied", 1)[0]
	d := e.records("main", "delivery")[0]
	if d.QueryID != sent.QueryID || d.RequestID != "req-1" || d.SubscriptionID != "" || d.Category != 2 || d.Bits != bits ||
		d.Detail != "researcher" || d.Redelivered || d.Anomalies != 0 {
		t.Errorf("delivery = %+v", d)
	}
	const want = `{"topic":"Quantum error correction","finding":"A new surface code lowers errors.","relevance":"4"}`
	if string(applied.Response) != want {
		t.Errorf("delivered response\n got %s\nwant %s", applied.Response, want)
	}
	if s := fmt.Sprintf("the answer to your query %s (request req-1)", sent.QueryID); !strings.Contains(d.Prompt, s) {
		t.Errorf("prompt lacks %q:\n%s", s, d.Prompt)
	}

	stored := e.waitAllDelivered(1)[0]
	if stored.QueryID != sent.QueryID || stored.RequestID != "req-1" || stored.Controller != "main" || stored.Reader != "researcher" ||
		stored.ID != d.DeliveryID || string(stored.Response) != want {
		t.Errorf("stored delivery = %+v", stored)
	}
	qs := e.waitEvent("query_sent", "")
	if len(qs) != 1 || qs[0].Agent != "main" || qs[0].Peer != "researcher" || qs[0].Ref != sent.QueryID ||
		qs[0].Category != 2 || qs[0].Bits != bits || !strings.Contains(qs[0].Detail, "request req-1") {
		t.Errorf("query_sent events = %+v", qs)
	}
	acc := e.waitEvent("answer_accepted", "")
	if len(acc) != 1 || acc[0].Agent != "researcher" || acc[0].Peer != "main" || acc[0].Bits != bits ||
		acc[0].Category != 2 || acc[0].Detail != wantDetail || acc[0].Ref != d.DeliveryID {
		t.Errorf("answer_accepted events = %+v", acc)
	}
	if p := e.queryPending(sent.QueryID); p != nil {
		t.Errorf("answered query still pending: %+v", p)
	}
}

// A refused answer closes nothing: the Reader may answer again, and only
// the accepted answer is delivered.
func TestQueryRefusedAnswerLeavesQueryOpen(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", queriesOf(cat2Query("req-1", "researcher", 3)), map[string]string{
		"ANSWERS": `[{"q0": "one two three four"}, {"q0": "one two three"}]`,
	}), nil)
	e.prompt("main", "query")
	sent := e.waitRecords("main", "query_sent", 1)[0]
	vs := e.waitRecords("researcher", "verdict", 2)
	if vs[0].Success || vs[0].QueryID != sent.QueryID || !strings.HasPrefix(vs[0].Detail, "validation_failed: ") {
		t.Errorf("first verdict = %+v, want validation_failed", vs[0])
	}
	if !vs[1].Success || vs[1].QueryID != sent.QueryID || vs[1].Detail != fmt.Sprintf("Answered query %s from controller main (Cat-2, 33.0 bits)", sent.QueryID) {
		t.Errorf("second verdict = %+v, want success", vs[1])
	}
	ev := e.waitEventMatching("refused", "validation_failed", func(ev store.Event) bool { return ev.Agent == "researcher" })
	if ev.Peer != "main" || ev.Ref != sent.QueryID || !bytes.Contains(ev.Payload, []byte("one two three four")) {
		t.Errorf("refusal event = %+v", ev)
	}
	ds := e.waitAllDelivered(1)
	applied := e.waitRecords("main", "applied", 1)
	if len(ds) != 1 || string(ds[0].Response) != `{"q0":"one two three"}` || string(applied[0].Response) != `{"q0":"one two three"}` {
		t.Errorf("stored deliveries = %+v; applied = %+v", ds, applied)
	}
	if n := len(e.records("main", "delivery")); n != 1 {
		t.Errorf("main got %d deliveries, want 1", n)
	}
	if acc := e.waitEvent("answer_accepted", ""); len(acc) != 1 {
		t.Errorf("answer_accepted events = %+v, want 1", acc)
	}
}

// Every refusal a query request can get, as the Controller hears it
// (the SDK's *QueryRefused, logged as query_error) and as it is audited.
func TestQueryRefusals(t *testing.T) {
	readerWithChannel := func(maxCat int, tools ...string) agentSpec {
		return agentSpec{name: "researcher", front: agentFront(tools, testChannel{peer: "main", role: "reader", maxCategory: maxCat, budget: 100000})}
	}
	mainWithChannel := func(env map[string]string, maxCat int, tools ...string) agentSpec {
		return agentSpec{name: "main", env: env, front: agentFront(tools,
			testChannel{peer: "researcher", role: "controller", maxCategory: maxCat, budget: 100000, maxCat2: 5, maxCat3: 5})}
	}
	badCat := func(rid string, cat bcp.Category) runtime.QueryRequest {
		q := cat2Query(rid, "researcher", 10)
		q.Category = cat
		return q
	}
	noQuestions := cat2Query("r0", "researcher")
	noDirective := cat3Query("r0", "researcher", 10)
	noDirective.Spec.Directive = ""

	cases := []struct {
		name    string
		agents  []agentSpec
		asker   string // the agent prompted "query"; main if empty
		queries []runtime.QueryRequest
		refused int // the index of the one refused; the others are sent
		code    string
		detail  string // what follows the code
	}{
		{name: "unknown reader", queries: []runtime.QueryRequest{cat2Query("r0", "nobody", 10)},
			code: "no_channel", detail: "No channel from controller 'main' to reader 'nobody'"},
		{name: "query to itself", queries: []runtime.QueryRequest{cat2Query("r0", "main", 10)},
			code: "no_channel", detail: "No channel from controller 'main' to reader 'main'"},
		{name: "reader queries its controller", asker: "researcher",
			agents: []agentSpec{
				mainWithChannel(nil, 3, "BCPQuery"),
				{name: "researcher", env: queriesOf(cat2Query("r0", "main", 10)),
					front: agentFront([]string{"BCPRespond", "BCPQuery"}, testChannel{peer: "main", role: "reader", maxCategory: 3, budget: 100000})},
			},
			queries: []runtime.QueryRequest{cat2Query("r0", "main", 10)},
			code:    "no_channel", detail: "No channel from controller 'researcher' to reader 'main'"},
		{name: "category 4", queries: []runtime.QueryRequest{badCat("r0", 4)},
			code: "category_not_allowed", detail: "Category 4 is not allowed on the channel to 'researcher' (max_category 3)"},
		{name: "category 0", queries: []runtime.QueryRequest{badCat("r0", 0)},
			code: "category_not_allowed", detail: "Category 0 is not allowed on the channel to 'researcher' (max_category 3)"},
		{name: "beyond the controller's max_category",
			agents:  nil, // set below
			queries: []runtime.QueryRequest{cat1Query("r0", "researcher"), cat2Query("r1", "researcher", 10)}, refused: 1,
			code: "category_not_allowed", detail: "Category 2 is not allowed on the channel to 'researcher' (max_category 1)"},
		{name: "beyond the reader's max_category",
			agents:  nil, // set below
			queries: []runtime.QueryRequest{cat2Query("r0", "researcher", 10), cat3Query("r1", "researcher", 10)}, refused: 1,
			code: "category_not_allowed", detail: "Category 3 is not allowed on the channel to 'researcher' (max_category 2)"},
		{name: "Cat-2 without questions", queries: []runtime.QueryRequest{noQuestions},
			code: "validation_failed", detail: "Query spec is not valid: questions: category 2 needs at least one question"},
		{name: "Cat-3 without directive", queries: []runtime.QueryRequest{noDirective},
			code: "validation_failed", detail: "Query spec is not valid: directive: required in category 3 (the instruction for the summary)"},
		{name: "third Cat-2 query",
			// Cat-1 queries are not counted.
			queries: []runtime.QueryRequest{cat2Query("r0", "researcher", 1), cat1Query("r1", "researcher"), cat2Query("r2", "researcher", 1),
				cat1Query("r3", "researcher"), cat2Query("r4", "researcher", 1)},
			refused: 4, code: "query_limit", detail: "Cat-2 query limit reached for channel to 'researcher': 2 of 2 used this session"},
		{name: "second Cat-3 query", queries: []runtime.QueryRequest{cat3Query("r0", "researcher", 5), cat3Query("r1", "researcher", 5)},
			refused: 1, code: "query_limit", detail: "Cat-3 query limit reached for channel to 'researcher': 1 of 1 used this session"},
		{name: "budget",
			// 110 of 220 spent, 121 asked: refused, and charged nothing,
			// so the next 110 still fit exactly.
			agents: pair(220, 100000, "review", queriesOf(cat2Query("r0", "researcher", 10), cat2Query("r1", "researcher", 11),
				cat2Query("r2", "researcher", 10)), nil),
			queries: []runtime.QueryRequest{cat2Query("r0", "researcher", 10), cat2Query("r1", "researcher", 11), cat2Query("r2", "researcher", 10)},
			refused: 1, code: "budget_exhausted",
			detail: "Bandwidth budget exhausted for channel to 'researcher': the query costs 121.0 bits, this session has 110.0 bits left"},
		{name: "controller without BCPQuery",
			agents:  nil, // set below
			queries: []runtime.QueryRequest{cat2Query("r0", "researcher", 10)},
			code:    "tool_not_allowed", detail: "Agent 'main' does not have the BCPQuery tool"},
	}
	for i := range cases {
		c := &cases[i]
		switch c.name {
		case "beyond the controller's max_category":
			c.agents = []agentSpec{mainWithChannel(queriesOf(c.queries...), 1, "BCPQuery"), readerWithChannel(3, "BCPRespond")}
		case "beyond the reader's max_category":
			c.agents = []agentSpec{mainWithChannel(queriesOf(c.queries...), 3, "BCPQuery"), readerWithChannel(2, "BCPRespond")}
		case "controller without BCPQuery":
			c.agents = []agentSpec{mainWithChannel(queriesOf(c.queries...), 3, "Read"), readerWithChannel(3, "BCPRespond")}
		}
		if c.agents == nil {
			c.agents = pair(100000, 100000, "review", queriesOf(c.queries...), nil)
		}
		if c.asker == "" {
			c.asker = "main"
		}
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := startE2E(t, c.agents, nil)
			e.prompt(c.asker, "query")
			rid := c.queries[c.refused].RequestID
			n := len(c.queries)
			// The queries go out one after another: the refused one is
			// logged once all before it are.
			var errs, sent []rec
			if !testproc.CheckFor(testWait, pollStep, func() bool {
				errs, sent = e.records(c.asker, "query_error"), e.records(c.asker, "query_sent")
				return len(errs)+len(sent) >= n
			}) {
				t.Fatalf("%s logged %d query_error and %d query_sent records, want %d in all; log: %+v", c.asker, len(errs), len(sent), n, e.log(c.asker))
			}
			wantErr := "query refused: " + c.code + ": " + c.detail
			if len(errs) != 1 || errs[0].Index != c.refused || errs[0].RequestID != rid || errs[0].Detail != wantErr {
				t.Fatalf("query_error records = %+v\nwant one for query %d (%s): %q", errs, c.refused, rid, wantErr)
			}

			ev := e.waitEventMatching("refused", c.code, func(ev store.Event) bool { return ev.Agent == c.asker })
			// The router's refusals put the code before the detail too;
			// the session's own (tool_not_allowed) only in Code.
			if !strings.HasSuffix(ev.Detail, c.detail) || !bytes.Contains(ev.Payload, []byte(`"request_id":"`+rid+`"`)) {
				t.Errorf("refusal event = %+v (payload %s)", ev, ev.Payload)
			}
			if c.code != "tool_not_allowed" && ev.Ref != rid { // the session's own refusals do not name a ref
				t.Errorf("refusal event ref = %q, want %q", ev.Ref, rid)
			}
			if all := e.events("refused", ""); len(all) != 1 {
				t.Errorf("refused events = %+v, want 1", all)
			}

			// The others were sent, and only they reached the reader.
			if len(sent) != n-1 {
				t.Fatalf("query_sent records = %+v, want %d", sent, n-1)
			}
			if n == 1 {
				return
			}
			var ids []string
			for _, s := range sent {
				ids = append(ids, s.QueryID)
				if s.Index == c.refused {
					t.Errorf("refused query logged as sent: %+v", s)
				}
			}
			var got []string
			for _, r := range e.waitRecords("researcher", "query", n-1) {
				got = append(got, r.QueryID)
			}
			slices.Sort(ids)
			slices.Sort(got)
			if !slices.Equal(ids, got) {
				t.Errorf("researcher got queries %v, want %v", got, ids)
			}
			if !testproc.CheckFor(testWait, pollStep, func() bool { return len(e.events("query_sent", "")) == n-1 }) {
				t.Errorf("query_sent events = %+v, want %d", e.events("query_sent", ""), n-1)
			}
		})
	}
}

// A bcp_query_request without a request_id cannot come from the SDK (it
// fills one in), so the test writes it as a raw runtime would.
func TestQueryWithoutRequestIDIsAProtocolError(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", nil, nil), nil)
	q := cat2Query("", "researcher", 10)
	q.Type = runtime.TypeQueryRequest
	e.injectLine(e.sessionOf("main"), q)
	ev := e.waitEventMatching("refused", "protocol_error", func(ev store.Event) bool { return ev.Agent == "main" })
	if ev.Detail != "protocol_error: bcp_query_request needs a request_id" || len(ev.Payload) == 0 {
		t.Errorf("refusal event = %+v", ev)
	}
	// main hears it as a bcp_query_error for no request it made.
	f := e.waitRecords("main", "query_failed", 1)[0]
	if f.RequestID != "" || f.Detail != "protocol_error: bcp_query_request needs a request_id" {
		t.Errorf("query_failed = %+v", f)
	}
	if qs := e.events("query_sent", ""); len(qs) != 0 {
		t.Errorf("query_sent events = %+v", qs)
	}
	e.gw.mu.Lock()
	n := len(e.gw.queries)
	e.gw.mu.Unlock()
	if n != 0 {
		t.Errorf("%d queries pending, want 0", n)
	}
}

func TestQueryTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e := startE2E(t, pair(100000, 100000, "review", queriesOf(cat2Query("req-1", "researcher", 10)), map[string]string{"SILENT": "1"}),
		func(c *Config) { c.QueryTimeout = timeout })
	e.prompt("main", "query")
	sent := e.waitRecords("main", "query_sent", 1)[0]
	f := e.waitRecords("main", "query_failed", 1)[0]
	want := fmt.Sprintf("query_timeout: Reader 'researcher' did not answer query %s within %s", sent.QueryID, timeout)
	if f.RequestID != "req-1" || f.Detail != want {
		t.Errorf("query_failed = %+v, want request req-1 and %q", f, want)
	}
	ev := e.waitEvent("query_timeout", "query_timeout")
	if len(ev) != 1 || ev[0].Agent != "main" || ev[0].Peer != "researcher" || ev[0].Ref != sent.QueryID || ev[0].Detail != want {
		t.Errorf("query_timeout events = %+v", ev)
	}
	if p := e.queryPending(sent.QueryID); p != nil {
		t.Errorf("timed-out query still pending: %+v", p)
	}
	// An answer after the timeout finds no query.
	e.injectLine(e.sessionOf("researcher"), runtime.Response{Type: runtime.TypeResponse, QueryID: sent.QueryID, Response: json.RawMessage(`{"q0": "late"}`)})
	late := e.waitEventMatching("refused", "query_not_found", func(ev store.Event) bool { return ev.Agent == "researcher" })
	if late.Ref != sent.QueryID {
		t.Errorf("refusal of the late answer = %+v", late)
	}
	if ds, _ := e.store.Deliveries(context.Background()); len(ds) != 0 {
		t.Errorf("a late answer was stored: %+v", ds)
	}
}

// A second answer to an answered query finds nothing to answer.
func TestQueryAnsweredTwiceIsNotFound(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", queriesOf(cat2Query("req-1", "researcher", 5)), map[string]string{
		"ANSWERS":    `[{"q0": "first"}, {"q0": "second"}]`,
		"ANSWER_ALL": "1",
	}), nil)
	e.prompt("main", "query")
	sent := e.waitRecords("main", "query_sent", 1)[0]
	vs := e.waitRecords("researcher", "verdict", 2)
	if !vs[0].Success {
		t.Errorf("first verdict = %+v, want success", vs[0])
	}
	want := fmt.Sprintf("query_not_found: No pending query '%s' for agent 'researcher'", sent.QueryID)
	if vs[1].Success || vs[1].QueryID != sent.QueryID || vs[1].Detail != want {
		t.Errorf("second verdict = %+v, want %q", vs[1], want)
	}
	ev := e.waitEventMatching("refused", "query_not_found", func(ev store.Event) bool { return ev.Agent == "researcher" })
	if ev.Ref != sent.QueryID || !bytes.Contains(ev.Payload, []byte("second")) {
		t.Errorf("refusal event = %+v", ev)
	}
	ds := e.waitAllDelivered(1)
	if len(ds) != 1 || string(ds[0].Response) != `{"q0":"first"}` {
		t.Errorf("stored deliveries = %+v", ds)
	}
	if n := len(e.waitRecords("main", "applied", 1)); n != 1 {
		t.Errorf("main applied %d deliveries, want 1", n)
	}
}

// Identity comes from the pipe: a Reader cannot answer a query addressed
// to another Reader, even with its id, and the query stays open for the
// one it was sent to.
func TestQueryCannotBeAnsweredByAnotherReader(t *testing.T) {
	reader := func(name string) agentSpec {
		return agentSpec{name: name, env: map[string]string{"SILENT": "1"},
			front: agentFront([]string{"BCPRespond"}, testChannel{peer: "main", role: "reader", maxCategory: 3, budget: 100000})}
	}
	e := startE2E(t, []agentSpec{
		{name: "main", env: queriesOf(cat2Query("req-1", "researcher", 5)), front: agentFront([]string{"BCPQuery"},
			testChannel{peer: "researcher", role: "controller", maxCategory: 3, budget: 100000, maxCat2: 5},
			testChannel{peer: "r2", role: "controller", maxCategory: 3, budget: 100000, maxCat2: 5})},
		reader("researcher"),
		reader("r2"),
	}, nil)
	e.prompt("main", "query")
	id := e.waitRecords("researcher", "query", 1)[0].QueryID

	e.injectLine(e.sessionOf("r2"), runtime.Response{Type: runtime.TypeResponse, QueryID: id, Response: json.RawMessage(`{"q0": "forged"}`)})
	ev := e.waitEventMatching("refused", "query_not_found", func(ev store.Event) bool { return ev.Agent == "r2" })
	if want := fmt.Sprintf("query_not_found: No pending query '%s' for agent 'r2'", id); ev.Detail != want || ev.Ref != id || ev.Peer != "" {
		t.Errorf("refusal event = %+v, want detail %q", ev, want)
	}
	if p := e.queryPending(id); p == nil || p.reader != "researcher" {
		t.Fatalf("query after r2's answer: %+v, want still pending for researcher", p)
	}

	e.injectLine(e.sessionOf("researcher"), runtime.Response{Type: runtime.TypeResponse, QueryID: id, Response: json.RawMessage(`{"q0": "genuine"}`)})
	d := e.waitRecords("main", "applied", 1)[0]
	if string(d.Response) != `{"q0":"genuine"}` {
		t.Errorf("main applied %s", d.Response)
	}
	ds := e.waitAllDelivered(1)
	if len(ds) != 1 || ds[0].Reader != "researcher" || ds[0].QueryID != id {
		t.Errorf("stored deliveries = %+v", ds)
	}
}

// A Controller cannot publish: without BCPPublish its tool is refused;
// with it, there is no subscription naming it as the Reader.
func TestQueryControllerCannotPublish(t *testing.T) {
	forged := publishes(pub("research-findings", "main", seedFinding, 1), pub("research-findings", "researcher", seedFinding, 1))
	cases := []struct {
		name, tools string
		want        []string
	}{
		{"without BCPPublish", "tools: [BCPQuery]", []string{
			"tool_not_allowed: Agent 'main' does not have the BCPPublish tool",
			"tool_not_allowed: Agent 'main' does not have the BCPPublish tool",
		}},
		{"with BCPPublish", "tools: [BCPQuery, BCPPublish]", []string{
			"subscription_not_found: No active subscription 'research-findings' from controller 'main'",
			"subscription_not_found: No active subscription 'research-findings' from controller 'researcher'",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			specs := pair(100000, 100000, "review", map[string]string{"PUBLISH": forged}, nil)
			if !strings.HasPrefix(specs[0].front, "tools: [BCPQuery]\n") {
				t.Fatalf("pair's main no longer starts with its tools: %q", specs[0].front)
			}
			specs[0].front = c.tools + strings.TrimPrefix(specs[0].front, "tools: [BCPQuery]")
			e := startE2E(t, specs, nil)
			e.prompt("main", "publish")
			vs := e.waitRecords("main", "verdict", 2)
			for i, v := range vs {
				if v.Success || v.Detail != c.want[i] {
					t.Errorf("verdict %d = %+v, want %q", i, v, c.want[i])
				}
			}
			code, _, _ := strings.Cut(c.want[0], ":")
			if !testproc.CheckFor(testWait, pollStep, func() bool {
				return len(e.eventsMatching("refused", code, func(ev store.Event) bool { return ev.Agent == "main" })) == 2
			}) {
				t.Errorf("refused events = %+v, want 2 %s for main", e.events("refused", ""), code)
			}
			if ds, _ := e.store.Deliveries(context.Background()); len(ds) != 0 {
				t.Errorf("a controller's publish was stored: %+v", ds)
			}
			if l := e.log("researcher"); len(l) != 0 {
				t.Errorf("researcher was involved: %+v", l)
			}
		})
	}
}

// startCat3 runs main and researcher, has main ask a Cat-3 query of 20
// words that researcher answers, and returns the gateway, the query id
// and the approval item the answer became.
func startCat3(t *testing.T) (*e2e, string, store.Approval) {
	t.Helper()
	e := startE2E(t, pair(100000, 100000, "review", queriesOf(cat3Query("req-3", "researcher", 20)), map[string]string{
		"ANSWERS": `[{"summary": "  Quiet   day.\nNothing new. "}]`,
	}), nil)
	e.prompt("main", "query")
	sent := e.waitRecords("main", "query_sent", 1)[0]
	if sent.Bits != 220 {
		t.Errorf("query_sent = %+v, want 220 bits", sent)
	}
	item := e.pendingApprovals(1)[0]
	if item.QueryID != sent.QueryID || item.RequestID != "req-3" || item.SubscriptionID != "" || item.Category != 3 ||
		item.Controller != "main" || item.Reader != "researcher" || item.Bits != 220 || item.Directive != "Summarize what you found." ||
		string(item.Response) != `{"summary":"Quiet day.\nNothing new."}` {
		t.Errorf("approval item = %+v (response %s)", item, item.Response)
	}
	q := e.waitEvent("approval_queued", "")
	if len(q) != 1 || q[0].Ref != item.ID || q[0].Agent != "researcher" || !strings.Contains(q[0].Detail, "answer to query "+sent.QueryID) {
		t.Errorf("approval_queued events = %+v", q)
	}
	// The Reader waits for the operator; nothing is delivered meanwhile.
	if vs := e.records("researcher", "verdict"); len(vs) != 0 {
		t.Errorf("verdict before a decision: %+v", vs)
	}
	if ds, _ := e.store.Deliveries(context.Background()); len(ds) != 0 {
		t.Errorf("delivered before a decision: %+v", ds)
	}
	return e, sent.QueryID, item
}

func TestQueryCat3AnswerRejectedByOperator(t *testing.T) {
	e, id, item := startCat3(t)
	if _, err := e.gw.Reject(context.Background(), item.ID, "", tester, "no"); err != nil {
		t.Fatal(err)
	}
	const want = "approval_rejected: Answer rejected by reviewer: no"
	v := e.waitRecords("researcher", "verdict", 1)[0]
	if v.Success || v.QueryID != id || v.Detail != want {
		t.Errorf("verdict = %+v, want %q", v, want)
	}
	f := e.waitRecords("main", "query_failed", 1)[0]
	if f.RequestID != "req-3" || f.Detail != want {
		t.Errorf("query_failed = %+v, want request req-3 and %q", f, want)
	}
	a, err := e.gw.Approval(context.Background(), item.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != store.ApprovalRejected || a.DecidedBy.Name != "tester" || a.Reason != "no" {
		t.Errorf("decided item = %+v", a)
	}
	if ds, _ := e.store.Deliveries(context.Background()); len(ds) != 0 {
		t.Errorf("a rejected answer was stored for delivery: %+v", ds)
	}
	if ds := e.records("main", "delivery"); len(ds) != 0 {
		t.Errorf("a rejected answer was delivered: %+v", ds)
	}
}

func TestQueryCat3AnswerApprovedIsDelivered(t *testing.T) {
	e, id, item := startCat3(t)
	if _, err := e.gw.Approve(context.Background(), item.ID, store.ContentHash(item.Response), tester, "fine"); err != nil {
		t.Fatal(err)
	}
	v := e.waitRecords("researcher", "verdict", 1)[0]
	if want := fmt.Sprintf("Answered query %s from controller main (Cat-3, 220.0 bits)", id); !v.Success || v.QueryID != id || v.Detail != want {
		t.Errorf("verdict = %+v, want success %q", v, want)
	}
	applied := e.waitRecords("main", "applied", 1)[0]
	d := e.records("main", "delivery")[0]
	if d.QueryID != id || d.RequestID != "req-3" || d.Category != 3 || d.Bits != 220 || string(applied.Response) != `{"summary":"Quiet day.\nNothing new."}` {
		t.Errorf("delivery = %+v, applied %s", d, applied.Response)
	}
	if !strings.Contains(d.Prompt, "An operator reviewed and approved this content (item "+item.ID+")") {
		t.Errorf("prompt does not say it was approved:\n%s", d.Prompt)
	}
	if fs := e.records("main", "query_failed"); len(fs) != 0 {
		t.Errorf("query_failed after approval: %+v", fs)
	}
}
