package bcpagent

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/llm/llmtest"
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
	api := llmtest.OpenAI
	srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
		switch r.N {
		case 1:
			return llmtest.ToolCalls(api, "", llmtest.Call{ID: "c1", Name: "BCPPublish", Args: `{"subscription_id": "research-alerts", `})
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
	g := startAgent(t, setup{srv: srv, tools: []string{"BCPPublish", "BCPRespond"},
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
		"the arguments of BCPPublish are not a JSON object",
		`unknown tool "Bash": the tools you have are BCPPublish`,
		"the gateway refused the publish: validation_failed: has_breaking_news: must be true or false",
		"Published: Published to controller main (Cat-1, 3.0 bits)")
	// The audit trail: the model's text, its tool calls (the malformed
	// arguments as a string) and the results.
	if uses := g.audited(runtime.TypeToolUse); len(uses) != 4 || !strings.Contains(uses[0], `"input":"{\"subscription_id\": \"research-alerts\", "`) {
		t.Errorf("tool_use audit %v", uses)
	}
	if texts := g.audited(runtime.TypeText); len(texts) != 2 {
		t.Errorf("text audit %v", texts)
	}
	if errs := g.audited(runtime.TypeToolResult); len(errs) != 4 || !strings.Contains(errs[1], `"is_error":true`) {
		t.Errorf("tool_result audit %v", errs)
	}
}

// A Controller's model queries through BCPQuery; a timeout of the query
// and then the delivery reach it as its next turns, with the conversation
// kept; a redelivery is not shown to it twice.
func TestControllerQueryAndDelivery(t *testing.T) {
	api := llmtest.Anthropic
	srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
		if r.N == 1 {
			return llmtest.ToolCalls(api, "I will ask.", llmtest.Call{ID: "toolu_1", Name: "BCPQuery",
				Args: `{"to":"researcher","category":1,"fields":[{"name":"urgent","type":"boolean"}],"context":"Is anything urgent?"}`})
		}
		return llmtest.Text(api, "Noted.")
	})
	g := startAgent(t, setup{model: "anthropic:test-model", srv: srv, tools: []string{"BCPQuery", "WebFetch"}})
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
	waitFor(t, "the timeout noted", func() bool { g.agent.mu.Lock(); defer g.agent.mu.Unlock(); return len(g.agent.notes) == 1 })
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
}

// A Reader's query turn offers BCPRespond with the query's shape, reminds
// a model that ends without answering, and closes once answered.
func TestReaderAnswersQuery(t *testing.T) {
	api := llmtest.OpenAI
	srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
		switch r.N {
		case 1:
			return llmtest.Text(api, "Let me think.")
		case 2:
			return llmtest.ToolCalls(api, "", llmtest.Call{ID: "c1", Name: "BCPRespond", Args: `{"query_id":"q-1","response":{"who":"Ada Lovelace"}}`})
		}
		return llmtest.Text(api, "Answered.")
	})
	g := startAgent(t, setup{srv: srv, tools: []string{"BCPRespond"}})
	g.send(runtime.Query{Type: runtime.TypeQuery, QueryID: "q-1", Category: bcp.Cat2, FromAgent: "main", Context: "We need a name.",
		Questions: []bcp.Question{{ID: "who", Question: "Who wrote it?", MaxWords: 3, Format: bcp.PersonName}}})
	var resp runtime.Response
	g.expect(runtime.TypeResponse, &resp)
	if resp.QueryID != "q-1" || string(resp.Response) != `{"who":"Ada Lovelace"}` {
		t.Fatalf("response %+v", resp)
	}
	g.send(runtime.ValidationResult{Type: runtime.TypeValidationResult, QueryID: "q-1", Success: true, Detail: "Answer to q-1 accepted (Cat-2, 33.0 bits)"})
	if res := g.result(); res.IsError || res.NumTurns != 3 {
		t.Errorf("result %+v", res)
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
	if got := reqs[2].ToolNames(); len(got) != 0 {
		t.Errorf("tools after the answer was accepted: %v", got)
	}
	// A later prompt offers no BCPRespond: the query is closed.
	g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "Anything else?"})
	g.result()
	if got := srv.Requests()[3].ToolNames(); len(got) != 0 {
		t.Errorf("tools in a later turn: %v", got)
	}
}

// Provider failures fail the turn with a clear error message to the
// gateway; the session lives on and the next turn works.
func TestProviderErrorsReachTheGateway(t *testing.T) {
	tests := []struct {
		name  string
		api   llmtest.API
		reply llmtest.Reply
		want  []string
	}{
		{"openai bad key", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 401, "invalid_api_key", "Incorrect API key provided: sk-test"),
			[]string{"bcp-agent: openai: authentication failed (HTTP 401, invalid_api_key)", "check OPENAI_API_KEY"}},
		{"anthropic forbidden", llmtest.Anthropic, llmtest.Error(llmtest.Anthropic, 403, "permission_error", "not allowed"),
			[]string{"anthropic: authentication failed (HTTP 403", "check ANTHROPIC_API_KEY"}},
		{"anthropic unknown model", llmtest.Anthropic, llmtest.Error(llmtest.Anthropic, 404, "not_found_error", "model: test-model"),
			[]string{"anthropic: model not found (HTTP 404, not_found_error): model: test-model", `check the model name "test-model"`}},
		{"openai malformed answer", llmtest.OpenAI, llmtest.Reply{Body: `{"choices":[{"message":{"content":42}}]}`},
			[]string{"openai: malformed response"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, tt.api, func(r llmtest.Request) llmtest.Reply {
				if r.N == 1 {
					return tt.reply
				}
				return llmtest.Text(tt.api, "Fine now.")
			})
			g := startAgent(t, setup{model: string(tt.api) + ":test-model", srv: srv})
			g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "hello"})
			if res := g.result(); !res.IsError || res.NumTurns != 1 {
				t.Errorf("result %+v, want is_error", res)
			}
			errs := g.errors()
			if len(errs) != 1 {
				t.Fatalf("error messages %v", errs)
			}
			containsAll(t, "error message", errs[0], tt.want...)
			g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "again"})
			if res := g.result(); res.IsError {
				t.Errorf("second turn %+v", res)
			}
		})
	}
}

// A 429 with Retry-After is waited out and retried; the turn succeeds.
func TestRateLimitIsRetried(t *testing.T) {
	api := llmtest.OpenAI
	srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
		if r.N == 1 {
			rep := llmtest.Error(api, 429, "rate_limit_exceeded", "slow down")
			rep.Header = map[string]string{"Retry-After": "2"}
			return rep
		}
		return llmtest.Text(api, "ok")
	})
	var waited []time.Duration
	g := startAgent(t, setup{srv: srv, tune: func(c *Config) {
		c.LLM.Retry.Sleep = func(_ context.Context, d time.Duration) error { waited = append(waited, d); return nil }
	}})
	g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "hello"})
	if res := g.result(); res.IsError || res.NumTurns != 1 {
		t.Errorf("result %+v", res)
	}
	if !slices.Equal(waited, []time.Duration{2 * time.Second}) {
		t.Errorf("waited %v, want [2s]", waited)
	}
}

// max_turns bounds the model calls of one turn.
func TestMaxTurns(t *testing.T) {
	api := llmtest.Anthropic
	srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
		return llmtest.ToolCalls(api, "", llmtest.Call{ID: "toolu_" + string(rune('a'+r.N)), Name: "ReadFile", Args: `{"path":"."}`})
	})
	g := startAgent(t, setup{model: "anthropic:m", srv: srv, tools: []string{"ReadFile"}, maxTurns: 3, cwd: t.TempDir()})
	g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "loop"})
	if res := g.result(); !res.IsError || res.NumTurns != 3 {
		t.Errorf("result %+v", res)
	}
	containsAll(t, "error", strings.Join(g.errors(), ""), "max_turns (3) reached")
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d model calls, want 3", n)
	}
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

// A Cat-3 publish waits for a person: the tool call does not wait for
// the verdict, a second publish to the same subscription meanwhile is
// refused to the model, and the verdict, when it comes, opens the model's
// next turn.
func TestLateVerdictBecomesANote(t *testing.T) {
	api := llmtest.OpenAI
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
	g := startAgent(t, setup{srv: srv, tools: []string{"BCPPublish"}, tune: func(c *Config) { c.VerdictWait = time.Millisecond }})
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
	waitFor(t, "the verdict noted", func() bool { g.agent.mu.Lock(); defer g.agent.mu.Unlock(); return len(g.agent.notes) == 1 })
	g.send(runtime.Prompt{Type: runtime.TypePrompt, Content: "next"})
	g.result()
	if r := srv.Requests()[3]; !r.Contains("The verdict on your earlier publish to digest of main: accepted: Published to controller main (Cat-3, 550.0 bits)") {
		t.Errorf("next turn lacks the verdict: %s", r.Body)
	}
}
