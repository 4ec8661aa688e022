package bcpagent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/llm/llmtest"
	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

func i64(v int64) *int64 { return &v }

// researchSubs are two subscriptions like the bundled examples'.
var researchSubs = []runtime.ActiveSubscription{
	{SubscriptionID: "research-findings", Controller: "main", Category: bcp.Cat2, Questions: []bcp.Question{
		{ID: "topic", Question: "What is the topic?", MaxWords: 10, Format: bcp.ShortText},
		{ID: "relevance", Question: "How relevant, 1 to 5?", MaxWords: 1, Format: bcp.IntegerFmt, Min: i64(1), Max: i64(5)},
	}, BandwidthBits: 121},
	{SubscriptionID: "research-alerts", Controller: "main", Category: bcp.Cat1, Fields: []bcp.Field{
		{Name: "has_breaking_news", Type: bcp.Boolean},
		{Name: "priority", Type: bcp.Enum, Values: []string{"low", "medium", "high", "critical"}},
	}, BandwidthBits: 3},
}

// A Reader's model publishes: its malformed arguments, an unknown tool
// and a response the gateway refuses all come back to it as tool errors,
// and it corrects itself within the turn.
func TestReaderPublishCorrectsItself(t *testing.T) {
	forEachProvider(t, func(t *testing.T, api llmtest.API) {
		// What the model gets wrong first: OpenAI sends arguments as text,
		// which may be malformed; Anthropic sends an object, which may have
		// a key the schema does not know.
		bad := struct{ args, result, audit string }{
			`{"subscription_id": "research-alerts", `,
			"the arguments of BCPPublish are not a JSON object",
			`"input":"{\"subscription_id\": \"research-alerts\", "`,
		}
		if api == llmtest.Anthropic {
			bad.args = `{"subscription_id":"research-alerts","priority":"high"}`
			bad.result = `the arguments of BCPPublish do not match its schema: json: unknown field "priority"`
			bad.audit = `"input":{"subscription_id":"research-alerts","priority":"high"}`
		}
		srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
			switch r.N {
			case 1:
				return llmtest.ToolCalls(api, "", llmtest.Call{ID: "c1", Name: "BCPPublish", Args: bad.args})
			case 2:
				return llmtest.ToolCalls(api, "", llmtest.Call{ID: "c2", Name: "Bash", Args: `{"cmd":"ls"}`})
			case 3:
				return llmtest.ToolCalls(api, "Publishing.", llmtest.Call{ID: "c3", Name: "BCPPublish",
					Args: `{"subscription_id":"research-alerts","controller":"main","response":{"has_breaking_news":"yes","priority":"high"}}`})
			case 4:
				// The response as a JSON string holding the object, a common
				// slip of models: unwrapped.
				return llmtest.ToolCalls(api, "", llmtest.Call{ID: "c4", Name: "BCPPublish",
					Args: `{"subscription_id":"research-alerts","controller":"main","response":"{\"has_breaking_news\":true,\"priority\":\"high\"}"}`})
			}
			return llmtest.Text(api, "Done.")
		})
		g := startAgent(t, setup{model: string(api) + ":test-model", srv: srv, tools: []string{"BCPPublish", "BCPRespond"},
			env: map[string]string{"BCP_AGENT_USD_PER_MTOK_IN": "2", "BCP_AGENT_USD_PER_MTOK_OUT": "10"}})
		g.send(runtime.SubscriptionsActive{Type: runtime.TypeSubscriptionsActive, Subscriptions: researchSubs})
		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "Check your sources."})

		var pub runtime.Response
		g.expect(runtime.TypeResponse, &pub)
		if pub.SubscriptionID != "research-alerts" || pub.Controller != "main" || string(pub.Response) != `{"has_breaking_news":"yes","priority":"high"}` {
			t.Fatalf("first publish %+v", pub)
		}
		g.send(runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: "research-alerts", Detail: "validation_failed: has_breaking_news: must be true or false"})
		g.expect(runtime.TypeResponse, &pub)
		if string(pub.Response) != `{"has_breaking_news":true,"priority":"high"}` {
			t.Fatalf("second publish %s", pub.Response)
		}
		g.send(runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: "research-alerts", Success: true, Detail: "Published to controller main (Cat-1, 3.0 bits)"})
		res := g.result()
		if res.IsError || res.NumTurns != 5 || res.Usage == nil || res.Usage.InputTokens != 50 || res.Usage.OutputTokens != 25 {
			t.Errorf("result %+v usage %+v", res, res.Usage)
		}
		if want := (50*2.0 + 25*10.0) / 1e6; res.CostUSD != want {
			t.Errorf("cost %v, want %v", res.CostUSD, want)
		}

		reqs := srv.Requests()
		if len(reqs) != 5 {
			t.Fatalf("%d model calls, want 5", len(reqs))
		}
		if !reqs[0].Contains("You are a test agent.") || !reqs[0].Contains("Check your sources.") {
			t.Errorf("first request lacks the system prompt or the prompt: %s", reqs[0].Body)
		}
		if got := reqs[0].ToolNames(); !slices.Equal(got, []string{"BCPPublish"}) {
			t.Errorf("tools offered %v, want only BCPPublish (no query is open)", got)
		}
		results := reqs[4].ToolResults()
		containsAll(t, "tool results", strings.Join(results, "\n"),
			bad.result,
			`unknown tool "Bash": the tools you have are BCPPublish`,
			"the gateway refused the publish: validation_failed: has_breaking_news: must be true or false",
			"Published: Published to controller main (Cat-1, 3.0 bits)")
		// The audit trail: the model's text, its tool calls (malformed
		// arguments as a string) and the results.
		if uses := g.audited(runtime.TypeToolUse); len(uses) != 4 || !strings.Contains(uses[0], bad.audit) {
			t.Errorf("tool_use audit %v", uses)
		}
		if texts := g.audited(runtime.TypeText); len(texts) != 2 {
			t.Errorf("text audit %v", texts)
		}
		if errs := g.audited(runtime.TypeToolResult); len(errs) != 4 || !strings.Contains(errs[1], `"is_error":true`) {
			t.Errorf("tool_result audit %v", errs)
		}
	})
}

// A Controller's model queries through BCPQuery; a timeout of the query
// and then the delivery reach it as its next turns, with the conversation
// kept; a redelivery is not shown to it twice.
func TestControllerQueryAndDelivery(t *testing.T) {
	forEachProvider(t, func(t *testing.T, api llmtest.API) {
		srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
			if r.N == 1 {
				return llmtest.ToolCalls(api, "I will ask.", llmtest.Call{ID: "toolu_1", Name: "BCPQuery",
					Args: `{"to":"researcher","category":1,"fields":[{"name":"urgent","type":"boolean"}],"context":"Is anything urgent?"}`})
			}
			return llmtest.Text(api, "Noted.")
		})
		g := startAgent(t, setup{model: string(api) + ":test-model", srv: srv, tools: []string{"BCPQuery", "WebFetch"}})
		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "Ask the researcher."})
		var q runtime.QueryRequest
		g.expect(runtime.TypeQueryRequest, &q)
		if q.To != "researcher" || q.Category != bcp.Cat1 || len(q.Spec.Fields) != 1 || q.Spec.Fields[0].Name != "urgent" || q.Spec.Context != "Is anything urgent?" || q.RequestID == "" {
			t.Fatalf("query %+v", q)
		}
		g.send(runtime.QuerySent{Type: runtime.TypeQuerySent, RequestID: q.RequestID, QueryID: "q-7", ToAgent: "researcher", BandwidthBits: 1})
		if res := g.result(); res.IsError || res.NumTurns != 2 {
			t.Errorf("result %+v", res)
		}
		reqs := srv.Requests()
		if got := reqs[0].ToolNames(); !slices.Equal(got, []string{"BCPQuery"}) {
			t.Errorf("tools %v: a Controller (BCPQuery) must not be offered WebFetch", got)
		}
		containsAll(t, "tool result", strings.Join(reqs[1].ToolResults(), ""), "Query q-7 sent to researcher", "1.0 bits charged")

		// The query times out after it was sent: a note for the next turn.
		g.send(runtime.QueryError{Type: runtime.TypeQueryError, RequestID: q.RequestID, ToAgent: "researcher", Reason: "query_timeout: no answer from researcher within 10m0s"})
		testproc.Eventually(t, "the timeout noted", func() bool { g.agent.mu.Lock(); defer g.agent.mu.Unlock(); return len(g.agent.notes) == 1 })
		d := runtime.ResponseDelivery{Type: runtime.TypeResponseDelivery, SubscriptionID: "alerts", Category: bcp.Cat1, FromAgent: "researcher",
			Response: json.RawMessage(`{"urgent":true}`), BandwidthBits: 1, DeliveryID: "d-1",
			Prompt: "BCP delivery d-1: a push on subscription alerts from Reader agent \"researcher\" (Cat-1, 1.0 bits).\nurgent: true\n"}
		g.send(d)
		if res := g.result(); res.IsError || res.NumTurns != 1 {
			t.Errorf("delivery result %+v", res)
		}
		last := srv.Requests()[2]
		containsAll(t, "the delivery turn", string(last.Body),
			"query_timeout: no answer from researcher", "BCP delivery d-1", `urgent: true`,
			"Ask the researcher.", "I will ask.") // the earlier turn is kept
		d.Redelivered = true
		g.send(d)
		g.result()
		if n := len(srv.Requests()); n != 3 {
			t.Errorf("%d model calls: a redelivery was shown to the model again", n)
		}
	})
}

// A Reader's query turn offers BCPRespond with the query's shape, reminds
// a model that ends without answering, and closes once answered. After
// that BCPRespond stays listed, as a stub that says no query is open: the
// conversation holds calls of it, and Anthropic refuses a request with
// tool calls in it but no tools.
func TestReaderAnswersQuery(t *testing.T) {
	forEachProvider(t, func(t *testing.T, api llmtest.API) {
		srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
			switch r.N {
			case 1:
				return llmtest.Text(api, "Let me think.")
			case 2:
				return llmtest.ToolCalls(api, "", llmtest.Call{ID: "c1", Name: "BCPRespond", Args: `{"query_id":"q-1","response":{"who":"Ada Lovelace"}}`})
			case 4:
				// In a later turn, the model answers the closed query again.
				return llmtest.ToolCalls(api, "", llmtest.Call{ID: "c2", Name: "BCPRespond", Args: `{"query_id":"q-1","response":{"who":"Ada"}}`})
			}
			return llmtest.Text(api, "Answered.")
		})
		g := startAgent(t, setup{model: string(api) + ":test-model", srv: srv, tools: []string{"BCPRespond"}})
		g.send(runtime.Query{Type: runtime.TypeQuery, QueryID: "q-1", Category: bcp.Cat2, FromAgent: "main", Context: "We need a name.",
			Questions: []bcp.Question{{ID: "who", Question: "Who wrote it?", MaxWords: 3, Format: bcp.PersonName}}})
		var resp runtime.Response
		g.expect(runtime.TypeResponse, &resp)
		if resp.QueryID != "q-1" || string(resp.Response) != `{"who":"Ada Lovelace"}` {
			t.Fatalf("response %+v", resp)
		}
		g.send(runtime.ValidationResult{Type: runtime.TypeValidationResult, QueryID: "q-1", Success: true, Detail: "Answer to q-1 accepted (Cat-2, 33.0 bits)"})
		if res := g.result(); res.IsError || res.NumTurns != 3 {
			t.Errorf("result %+v (errors %v)", res, g.errors())
		}
		reqs := srv.Requests()
		containsAll(t, "the query turn", string(reqs[0].Body), "BCP query q-1 from Controller agent \\\"main\\\"", "We need a name.", "who (at most 3 words, person_name): Who wrote it?")
		var schema struct {
			Properties struct {
				QueryID struct {
					Enum []string `json:"enum"`
				} `json:"query_id"`
				Response struct {
					Required []string `json:"required"`
				} `json:"response"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(reqs[0].Tool("BCPRespond"), &schema); err != nil || !slices.Equal(schema.Properties.QueryID.Enum, []string{"q-1"}) || !slices.Equal(schema.Properties.Response.Required, []string{"who"}) {
			t.Errorf("BCPRespond schema %s (%v)", reqs[0].Tool("BCPRespond"), err)
		}
		if !reqs[1].Contains("You have not answered query q-1 yet") {
			t.Errorf("no reminder in %s", reqs[1].Body)
		}
		closed := func(r llmtest.Request) {
			t.Helper()
			if got := r.ToolNames(); !slices.Equal(got, []string{"BCPRespond"}) {
				t.Errorf("tools %v, want the BCPRespond stub", got)
			}
			if s := string(r.Tool("BCPRespond")); strings.Contains(s, "q-1") {
				t.Errorf("the stub still offers the closed query: %s", s)
			}
			if !r.Contains("Not usable now (no open query") {
				t.Errorf("the stub does not say it is unusable: %s", r.Body)
			}
		}
		closed(reqs[2]) // after the answer was accepted

		// A later prompt: the stub answers a call with an error, and
		// nothing reaches the gateway but the result.
		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "Anything else?"})
		if res := g.result(); res.IsError {
			t.Errorf("later turn %+v (errors %v)", res, g.errors())
		}
		reqs = srv.Requests()
		if len(reqs) != 5 {
			t.Fatalf("%d model calls, want 5", len(reqs))
		}
		closed(reqs[3])
		containsAll(t, "the stub's result", strings.Join(reqs[4].ToolResults(), ""), "no open query: BCPRespond can only be used while a bcp_query is open")
		for _, r := range reqs {
			if r.Refused != "" {
				t.Errorf("request %d refused: %s", r.N, r.Refused)
			}
		}
	})
}

// Provider failures fail the turn with a clear error message to the
// gateway, without the key; the session lives on and the next turn works.
func TestProviderErrorsReachTheGateway(t *testing.T) {
	tests := []struct {
		name  string
		api   llmtest.API
		reply llmtest.Reply
		want  []string
	}{
		{"openai bad key", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 401, "invalid_api_key", "Incorrect API key provided: sk-test"),
			[]string{"bcp-agent: openai: authentication failed (HTTP 401, invalid_api_key): Incorrect API key provided: [redacted]", "check OPENAI_API_KEY"}},
		{"anthropic forbidden", llmtest.Anthropic, llmtest.Error(llmtest.Anthropic, 403, "permission_error", "not allowed"),
			[]string{"anthropic: authentication failed (HTTP 403", "check ANTHROPIC_API_KEY"}},
		{"anthropic unknown model", llmtest.Anthropic, llmtest.Error(llmtest.Anthropic, 404, "not_found_error", "model: test-model"),
			[]string{"anthropic: model not found (HTTP 404, not_found_error): model: test-model", `check the model name "test-model"`}},
		{"openai malformed answer", llmtest.OpenAI, llmtest.Reply{Body: `{"choices":[{"message":{"content":42}}]}`},
			[]string{"openai: malformed response"}},
		{"anthropic proxy echoing the key", llmtest.Anthropic, llmtest.Reply{Status: 502, Body: "upstream refused x-api-key: ak-test"},
			[]string{"anthropic: server error (HTTP 502): upstream refused x-api-key: [redacted]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, tt.api, func(r llmtest.Request) llmtest.Reply {
				if r.N == 1 {
					return tt.reply
				}
				return llmtest.Text(tt.api, "Fine now.")
			})
			g := startAgent(t, setup{model: string(tt.api) + ":test-model", srv: srv, tune: func(c *Config) { c.LLM.Retry.MaxRetries = -1 }})
			g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "hello"})
			if res := g.result(); !res.IsError || res.NumTurns != 1 {
				t.Errorf("result %+v, want is_error", res)
			}
			errs := g.errors()
			if len(errs) != 1 {
				t.Fatalf("error messages %v", errs)
			}
			containsAll(t, "error message", errs[0], tt.want...)
			for _, key := range []string{"sk-test", "ak-test"} {
				if strings.Contains(errs[0], key) || strings.Contains(g.log.String(), key) {
					t.Errorf("the key %s is in the error %q or the log:\n%s", key, errs[0], g.log)
				}
			}
			g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "again"})
			if res := g.result(); res.IsError {
				t.Errorf("second turn %+v", res)
			}
		})
	}
}

// A 429 with Retry-After is waited out and retried; the turn succeeds.
func TestRateLimitIsRetried(t *testing.T) {
	forEachProvider(t, func(t *testing.T, api llmtest.API) {
		srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
			if r.N == 1 {
				rep := llmtest.Error(api, 429, "rate_limit_exceeded", "slow down")
				rep.Header = map[string]string{"Retry-After": "2"}
				return rep
			}
			return llmtest.Text(api, "ok")
		})
		var waited []time.Duration
		g := startAgent(t, setup{model: string(api) + ":test-model", srv: srv, tune: func(c *Config) {
			c.LLM.Retry.Sleep = func(_ context.Context, d time.Duration) error { waited = append(waited, d); return nil }
		}})
		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "hello"})
		if res := g.result(); res.IsError || res.NumTurns != 1 {
			t.Errorf("result %+v", res)
		}
		if !slices.Equal(waited, []time.Duration{2 * time.Second}) {
			t.Errorf("waited %v, want [2s]", waited)
		}
	})
}

// max_turns bounds the model calls of one turn.
func TestMaxTurns(t *testing.T) {
	forEachProvider(t, func(t *testing.T, api llmtest.API) {
		srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
			return llmtest.ToolCalls(api, "", llmtest.Call{ID: fmt.Sprintf("toolu_%d", r.N), Name: "ReadFile", Args: `{"path":"."}`})
		})
		g := startAgent(t, setup{model: string(api) + ":m", srv: srv, tools: []string{"ReadFile"}, maxTurns: 3, cwd: t.TempDir()})
		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "loop"})
		if res := g.result(); !res.IsError || res.NumTurns != 3 {
			t.Errorf("result %+v", res)
		}
		containsAll(t, "error", strings.Join(g.errors(), ""), "max_turns (3) reached")
		if n := len(srv.Requests()); n != 3 {
			t.Errorf("%d model calls, want 3", n)
		}
		// The next turn starts after the last tool results: still a
		// conversation both APIs take.
		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "again"})
		g.result()
		if r := srv.Requests()[3]; r.Refused != "" {
			t.Errorf("next turn refused: %s", r.Refused)
		}
	})
}

// Configuration mistakes end the session before ready, with an error
// message that says what to fix.
func TestStartFailures(t *testing.T) {
	tests := []struct {
		setup setup
		want  string
	}{
		{setup{noModel: true}, "no model: set model: openai:MODEL or anthropic:MODEL"},
		{setup{model: "gpt-4o"}, "want PROVIDER:MODEL"},
		{setup{model: "anthropic:m", env: map[string]string{"ANTHROPIC_API_KEY": ""}}, "ANTHROPIC_API_KEY is not set"},
		{setup{model: "openai:m", env: map[string]string{"OPENAI_API_KEY": ""}}, "OPENAI_API_KEY is not set"},
		{setup{env: map[string]string{"BCP_AGENT_USD_PER_MTOK_IN": "cheap"}}, "BCP_AGENT_USD_PER_MTOK_IN"},
		{setup{env: map[string]string{"BCP_AGENT_MAX_TOKENS": "-1"}}, "BCP_AGENT_MAX_TOKENS"},
		{setup{env: map[string]string{"HTTPS_PROXY": "ftp://127.0.0.1:3128"}}, `HTTPS_PROXY "ftp://127.0.0.1:3128": scheme "ftp"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			g := runAgent(t, tt.setup)
			msgs := g.rest()
			if len(msgs) != 1 || msgs[0].Type != runtime.TypeError {
				t.Fatalf("messages %v, want one error and no ready", msgs)
			}
			var e runtime.Error
			if err := msgs[0].Decode(&e); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(e.Message, "bcp-agent: ") {
				t.Errorf("error %q does not name bcp-agent", e.Message)
			}
			containsAll(t, "error", e.Message, tt.want)
			if err := g.wait(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run returned %v", err)
			}
		})
	}
}

// With both prices wrong, the error names the first, every time.
func TestReadPricesIsDeterministic(t *testing.T) {
	env := map[string]string{"BCP_AGENT_USD_PER_MTOK_IN": "x", "BCP_AGENT_USD_PER_MTOK_OUT": "y"}
	for range 50 {
		_, err := readPrices(func(k string) string { return env[k] })
		if err == nil || !strings.HasPrefix(err.Error(), "BCP_AGENT_USD_PER_MTOK_IN ") {
			t.Fatalf("error %v, want one about BCP_AGENT_USD_PER_MTOK_IN", err)
		}
	}
}

// At start, the log warns of a Reader that can both read files and fetch
// URLs, and says once that cost_usd stays 0 without prices.
func TestStartLogs(t *testing.T) {
	const exfil = "[WARN] this agent holds both ReadFile and WebFetch"
	const noPrices = "[INFO] no prices configured"
	tests := []struct {
		tools []string
		env   map[string]string
		want  []string
		not   []string
	}{
		{[]string{"ReadFile", "WebFetch", "BCPPublish"}, nil, []string{exfil, noPrices}, nil},
		{[]string{"ReadFile"}, map[string]string{"BCP_AGENT_USD_PER_MTOK_IN": "1"}, nil, []string{exfil, noPrices}},
		// WebFetch is not offered to a Controller: nothing to warn of.
		{[]string{"ReadFile", "WebFetch", "BCPQuery"}, map[string]string{"BCP_AGENT_USD_PER_MTOK_OUT": "1"}, nil, []string{exfil}},
		// The proxy is said once; NO_PROXY is said to be ignored.
		{[]string{"ReadFile"}, map[string]string{"HTTPS_PROXY": "http://127.0.0.1:3128", "HTTP_PROXY": "http://127.0.0.1:3128", "no_proxy": "localhost"},
			[]string{"[INFO] network: every request through the proxy (https via http://127.0.0.1:3128, http via http://127.0.0.1:3128), loopback destinations included",
				"[WARN] no_proxy is ignored"}, nil},
		{[]string{"ReadFile"}, nil, nil, []string{"[INFO] network:"}},
	}
	for _, tt := range tests {
		g := startAgent(t, setup{tools: tt.tools, env: tt.env, cwd: t.TempDir()})
		log := g.log.String()
		for _, w := range tt.want {
			if strings.Count(log, w) != 1 {
				t.Errorf("%v: log lacks %q once:\n%s", tt.tools, w, log)
			}
		}
		for _, w := range tt.not {
			if strings.Contains(log, w) {
				t.Errorf("%v: log has %q:\n%s", tt.tools, w, log)
			}
		}
	}
}

// A Cat-3 publish waits for a person: the tool call does not wait for
// the verdict, a second publish to the same subscription meanwhile is
// refused to the model, and the verdict, when it comes, is put at the
// head of the model's next turn.
func TestLateVerdictBecomesANote(t *testing.T) {
	forEachProvider(t, func(t *testing.T, api llmtest.API) {
		digest := runtime.ActiveSubscription{SubscriptionID: "digest", Controller: "main", Category: bcp.Cat3, Directive: "Summarize today.", MaxWords: 50}
		publish := `{"subscription_id":"digest","controller":"main","response":{"summary":"Nothing changed."}}`
		srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
			switch r.N {
			case 1:
				return llmtest.ToolCalls(api, "", llmtest.Call{ID: "c1", Name: "BCPPublish", Args: publish})
			case 2:
				return llmtest.ToolCalls(api, "", llmtest.Call{ID: "c2", Name: "BCPPublish", Args: publish})
			}
			return llmtest.Text(api, "ok")
		})
		g := startAgent(t, setup{model: string(api) + ":test-model", srv: srv, tools: []string{"BCPPublish"}, tune: func(c *Config) { c.VerdictWait = time.Millisecond }})
		g.send(runtime.SubscriptionsActive{Type: runtime.TypeSubscriptionsActive, Subscriptions: []runtime.ActiveSubscription{digest}})
		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "digest time"})
		g.expect(runtime.TypeResponse) // one publish only: the second is refused before it is sent
		if res := g.result(); res.IsError || res.NumTurns != 3 {
			t.Errorf("result %+v", res)
		}
		results := srv.Requests()[2].ToolResults()
		if len(results) != 2 {
			t.Fatalf("tool results %q", results)
		}
		containsAll(t, "first tool result", results[0], "has not given its verdict", "wait for an operator's review")
		containsAll(t, "second tool result", results[1], "publish to digest of main: an earlier one is still waiting for the verdict")

		g.send(runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: "digest", Success: true, Detail: "Published to controller main (Cat-3, 550.0 bits)"})
		testproc.Eventually(t, "the verdict noted", func() bool { g.agent.mu.Lock(); defer g.agent.mu.Unlock(); return len(g.agent.notes) == 1 })
		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "next"})
		g.result()
		if r := srv.Requests()[3]; !r.Contains("The verdict on your earlier publish to digest of main: accepted: Published to controller main (Cat-3, 550.0 bits)") {
			t.Errorf("next turn lacks the verdict: %s", r.Body)
		}
	})
}

// An interrupt stops the turn between tool calls: the calls after the
// running one are not run (no further publish or query reaches the
// gateway), yet each gets a result, so the next turn's conversation is one
// both APIs take.
func TestInterruptSkipsTheRemainingToolCalls(t *testing.T) {
	tests := []struct {
		name  string
		tools []string
		calls []llmtest.Call
		first string // the message the first call sends to the gateway
	}{
		{"publish", []string{"BCPPublish"}, []llmtest.Call{
			{ID: "c1", Name: "BCPPublish", Args: `{"subscription_id":"research-alerts","controller":"main","response":{"has_breaking_news":true,"priority":"high"}}`},
			{ID: "c2", Name: "BCPPublish", Args: `{"subscription_id":"research-findings","controller":"main","response":{"topic":"x","relevance":"3"}}`},
		}, runtime.TypeResponse},
		{"query", []string{"BCPQuery"}, []llmtest.Call{
			{ID: "c1", Name: "BCPQuery", Args: `{"to":"researcher","category":1,"fields":[{"name":"urgent","type":"boolean"}]}`},
			{ID: "c2", Name: "BCPQuery", Args: `{"to":"researcher","category":1,"fields":[{"name":"late","type":"boolean"}]}`},
		}, runtime.TypeQueryRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachProvider(t, func(t *testing.T, api llmtest.API) {
				srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
					if r.N == 1 {
						return llmtest.ToolCalls(api, "", tt.calls...)
					}
					return llmtest.Text(api, "ok")
				})
				g := startAgent(t, setup{model: string(api) + ":test-model", srv: srv, tools: tt.tools})
				g.send(runtime.SubscriptionsActive{Type: runtime.TypeSubscriptionsActive, Subscriptions: researchSubs})
				g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "go"})
				g.expect(tt.first)
				g.send(runtime.Interrupt{Type: runtime.TypeInterrupt, Reason: "operator"})
				// A second call that ran would send its message before the
				// result, and expect would fail on it.
				if res := g.result(); !res.IsError {
					t.Errorf("interrupted turn %+v, want is_error", res)
				}
				g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "next"})
				if res := g.result(); res.IsError {
					t.Errorf("next turn %+v (errors %v)", res, g.errors())
				}
				reqs := srv.Requests()
				if len(reqs) != 2 || reqs[1].Refused != "" {
					t.Fatalf("%d requests; the second refused: %q", len(reqs), reqs[len(reqs)-1].Refused)
				}
				results := reqs[1].ToolResults()
				if len(results) != 2 || !strings.Contains(results[1], "not run: turn interrupted") {
					t.Errorf("tool results %q", results)
				}
			})
		})
	}
}

// An answer cut off by the token limit: its last tool call, which may be
// incomplete, is not run but sent back to the model as an error, with a
// warning in the log; a cut-off final answer fails the turn.
func TestTruncatedAnswer(t *testing.T) {
	forEachProvider(t, func(t *testing.T, api llmtest.API) {
		cutArgs := `{"path":"no` // cut off midway, as OpenAI sends it
		if api == llmtest.Anthropic {
			cutArgs = `{"path":"no"}` // Anthropic sends what it parsed
		}
		srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
			switch r.N {
			case 1:
				return llmtest.CutOff(api, "", llmtest.Call{ID: "c1", Name: "ReadFile", Args: `{"path":"."}`}, llmtest.Call{ID: "c2", Name: "ReadFile", Args: cutArgs})
			case 2:
				return llmtest.Text(api, "Done.")
			}
			return llmtest.CutOff(api, "The answer is that the")
		})
		dir := t.TempDir()
		g := startAgent(t, setup{model: string(api) + ":test-model", srv: srv, tools: []string{"ReadFile"}, cwd: dir})
		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "read"})
		if res := g.result(); res.IsError || res.NumTurns != 2 {
			t.Errorf("result %+v (errors %v)", res, g.errors())
		}
		results := srv.Requests()[1].ToolResults()
		if len(results) != 2 || !strings.HasPrefix(results[0], "Directory .:") {
			t.Fatalf("tool results %q", results)
		}
		containsAll(t, "the cut-off call's result", results[1], "not run: your answer was cut off by the token limit")
		containsAll(t, "log", g.log.String(), "[WARN] the model's answer was cut off by its token limit", "its last tool call (ReadFile) is not run")

		g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "answer"})
		if res := g.result(); !res.IsError {
			t.Errorf("a turn whose final answer is cut off: %+v, want is_error", res)
		}
		containsAll(t, "error", strings.Join(g.errors(), ""), "cut off by its token limit", "raise BCP_AGENT_MAX_TOKENS")
	})
}

// In a sandbox, HTTPS_PROXY and HTTP_PROXY lead to the gateway's egress
// proxy: the model's requests (to a loopback base URL, as a local Ollama)
// and WebFetch's go through it, and nowhere else.
func TestModelAndWebFetchThroughProxy(t *testing.T) {
	srv := llmtest.New(t, llmtest.OpenAI, func(r llmtest.Request) llmtest.Reply {
		if r.N == 1 {
			return llmtest.ToolCalls(llmtest.OpenAI, "", llmtest.Call{ID: "call_1", Name: ToolWebFetch, Args: `{"url":"http://news.example.com/page"}`})
		}
		return llmtest.Text(llmtest.OpenAI, "done")
	})
	model := strings.TrimSuffix(srv.BaseURL(), "/v1")
	proxy := newWebProxy(t, map[string]http.HandlerFunc{
		"/page": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "the news of the day")
		},
		// The model's API, wherever the base URL points.
		"/v1/chat/completions": func(w http.ResponseWriter, r *http.Request) {
			req, _ := http.NewRequestWithContext(r.Context(), r.Method, model+r.URL.Path, r.Body)
			req.Header = r.Header.Clone()
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
		},
	})
	g := startAgent(t, setup{srv: srv, tools: []string{ToolWebFetch}, env: map[string]string{
		"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", // nothing listens there: only the proxy can answer
		"HTTPS_PROXY":     proxy.srv.URL,
		"HTTP_PROXY":      proxy.srv.URL,
	}})
	g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "read the news"})
	if res := g.result(); res.IsError || res.NumTurns != 2 {
		t.Fatalf("result %+v", res)
	}
	if got := srv.Requests()[1].ToolResults(); len(got) != 1 || !strings.Contains(got[0], "the news of the day") {
		t.Errorf("tool results %q", got)
	}
	want := []string{"POST http://127.0.0.1:1/v1/chat/completions", "GET http://news.example.com/page", "POST http://127.0.0.1:1/v1/chat/completions"}
	if got := proxy.requests(); !slices.Equal(got, want) {
		t.Errorf("the proxy was asked %q, want %q", got, want)
	}
}
