package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/llm"
	"github.com/bcpgw/bcpgw/internal/llm/llmtest"
)

// sleeps records the waits of the retry loop instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func (s *sleeps) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

var now = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// noJitter waits the whole backoff, so that tests see exact waits.
func noJitter(d time.Duration) time.Duration { return d }

// client returns a client of api on srv, with recorded sleeps.
func client(t *testing.T, api llmtest.API, srv *llmtest.Server, key string) (llm.Client, *sleeps) {
	t.Helper()
	s := &sleeps{}
	opts := llm.Options{Retry: llm.Retry{Sleep: s.sleep, Now: func() time.Time { return now }, Jitter: noJitter}}
	env := map[string]string{"OPENAI_BASE_URL": srv.BaseURL(), "ANTHROPIC_BASE_URL": srv.BaseURL(), "OPENAI_API_KEY": key, "ANTHROPIC_API_KEY": key}
	c, err := llm.New(string(api)+":test-model", func(k string) (string, bool) { v, ok := env[k]; return v, ok }, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// conversation has every kind of message: text, tool calls (one with
// malformed arguments), tool results (one an error).
func conversation() llm.Request {
	return llm.Request{
		System: "You are a test.",
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: "hello"},
			{Role: llm.RoleAssistant, Content: "calling", ToolCalls: []llm.ToolCall{
				{ID: "c1", Name: "ReadFile", Arguments: `{"path":"a.txt"}`},
				{ID: "c2", Name: "ReadFile", Arguments: `{"path":`},
			}},
			{Role: llm.RoleTool, ToolCallID: "c1", Content: "file text"},
			{Role: llm.RoleTool, ToolCallID: "c2", Content: "arguments are not valid JSON", IsError: true},
		},
		Tools: []llm.Tool{{Name: "ReadFile", Description: "Read a file.", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}},
	}
}

func TestOpenAIRequestAndResponse(t *testing.T) {
	srv := llmtest.New(t, llmtest.OpenAI, func(r llmtest.Request) llmtest.Reply {
		return llmtest.ToolCalls(llmtest.OpenAI, "thinking", llmtest.Call{ID: "x1", Name: "BCPPublish", Args: `{"subscription_id":`})
	})
	c, _ := client(t, llmtest.OpenAI, srv, "sk-test")
	resp, err := c.Complete(context.Background(), conversation())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Content != "thinking" || len(resp.Message.ToolCalls) != 1 {
		t.Fatalf("response %+v", resp)
	}
	// Malformed arguments come back exactly as the model wrote them.
	if tc := resp.Message.ToolCalls[0]; tc.ID != "x1" || tc.Name != "BCPPublish" || tc.Arguments != `{"subscription_id":` {
		t.Errorf("tool call %+v", tc)
	}
	if resp.Usage != (llm.Usage{InputTokens: 10, OutputTokens: 5}) || resp.StopReason != "tool_calls" {
		t.Errorf("usage %+v stop %q", resp.Usage, resp.StopReason)
	}
	req := srv.Requests()[0]
	if got := req.Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization = %q", got)
	}
	var body struct {
		Model    string           `json:"model"`
		Messages []map[string]any `json:"messages"`
		Tools    []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "test-model" || len(body.Messages) != 5 || len(body.Tools) != 1 {
		t.Fatalf("body %s", req.Body)
	}
	if body.Messages[0]["role"] != "system" || body.Messages[0]["content"] != "You are a test." {
		t.Errorf("system message %v", body.Messages[0])
	}
	calls := body.Messages[2]["tool_calls"].([]any)
	if args := calls[1].(map[string]any)["function"].(map[string]any)["arguments"]; args != `{"path":` {
		t.Errorf("malformed arguments replayed as %v", args)
	}
	if got := req.ToolResults(); len(got) != 2 || got[0] != "file text" || got[1] != "Error: arguments are not valid JSON" {
		t.Errorf("tool results %q", got)
	}
}

func TestOpenAIWithoutKeySendsNoAuthorization(t *testing.T) {
	srv := llmtest.New(t, llmtest.OpenAI, func(llmtest.Request) llmtest.Reply { return llmtest.Text(llmtest.OpenAI, "hi") })
	c, _ := client(t, llmtest.OpenAI, srv, "")
	if _, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}}); err != nil {
		t.Fatal(err)
	}
	if h, ok := srv.Requests()[0].Header["Authorization"]; ok {
		t.Errorf("Authorization sent without a key: %q", h)
	}
}

func TestAnthropicRequestAndResponse(t *testing.T) {
	srv := llmtest.New(t, llmtest.Anthropic, func(r llmtest.Request) llmtest.Reply {
		return llmtest.ToolCalls(llmtest.Anthropic, "ok", llmtest.Call{ID: "toolu_1", Name: "BCPQuery", Args: `{"to":"researcher"}`})
	})
	c, _ := client(t, llmtest.Anthropic, srv, "ak-test")
	resp, err := c.Complete(context.Background(), conversation())
	if err != nil {
		t.Fatal(err)
	}
	if tc := resp.Message.ToolCalls; len(tc) != 1 || tc[0].ID != "toolu_1" || tc[0].Arguments != `{"to":"researcher"}` || resp.Message.Content != "ok" {
		t.Errorf("response %+v", resp)
	}
	req := srv.Requests()[0]
	if req.Header.Get("x-api-key") != "ak-test" || req.Header.Get("anthropic-version") != "2023-06-01" || req.Header.Get("Authorization") != "" {
		t.Errorf("headers %v", req.Header)
	}
	var body struct {
		System    string `json:"system"`
		MaxTokens int    `json:"max_tokens"`
		Messages  []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
		Tools []map[string]any `json:"tools"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatal(err)
	}
	// user, assistant (text + 2 tool_use), user (2 tool_result merged).
	if body.System != "You are a test." || body.MaxTokens != llm.DefaultMaxTokens || len(body.Messages) != 3 {
		t.Fatalf("body %s", req.Body)
	}
	if roles := body.Messages[0].Role + body.Messages[1].Role + body.Messages[2].Role; roles != "userassistantuser" {
		t.Errorf("roles %s", roles)
	}
	// The malformed arguments are replayed as an empty object: the API
	// takes nothing else.
	if in := body.Messages[1].Content[2]["input"]; len(in.(map[string]any)) != 0 {
		t.Errorf("malformed input replayed as %v", in)
	}
	if res := body.Messages[2].Content; len(res) != 2 || res[1]["is_error"] != true || res[0]["tool_use_id"] != "c1" {
		t.Errorf("tool results %v", res)
	}
	if _, ok := body.Tools[0]["input_schema"]; !ok {
		t.Errorf("tools %v", body.Tools)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name     string
		api      llmtest.API
		reply    llmtest.Reply
		kind     llm.Kind
		contains []string
	}{
		{"openai bad key", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 401, "invalid_api_key", "Incorrect API key provided"), llm.KindAuth,
			[]string{"openai: authentication failed (HTTP 401, invalid_api_key): Incorrect API key provided", "check OPENAI_API_KEY"}},
		{"anthropic bad key", llmtest.Anthropic, llmtest.Error(llmtest.Anthropic, 401, "authentication_error", "invalid x-api-key"), llm.KindAuth,
			[]string{"anthropic: authentication failed (HTTP 401, authentication_error): invalid x-api-key", "check ANTHROPIC_API_KEY"}},
		{"forbidden", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 403, "forbidden", "no access"), llm.KindAuth, []string{"HTTP 403"}},
		{"openai unknown model", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 404, "model_not_found", "The model `nope` does not exist"), llm.KindModelNotFound,
			[]string{"model not found (HTTP 404", `check the model name "test-model"`}},
		{"anthropic unknown model", llmtest.Anthropic, llmtest.Error(llmtest.Anthropic, 404, "not_found_error", "model: nope"), llm.KindModelNotFound,
			[]string{"anthropic: model not found (HTTP 404, not_found_error): model: nope"}},
		{"unknown model as 400", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 400, "invalid_request_error", `model "test-model" not found, try pulling it first`), llm.KindModelNotFound,
			[]string{"try pulling it first"}},
		{"model_not_found code", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 400, "model_not_found", "no such thing"), llm.KindModelNotFound, []string{"no such thing"}},
		{"error in a 200", llmtest.OpenAI, llmtest.Reply{Body: `{"error":"model 'test-model' not found"}`}, llm.KindModelNotFound, []string{"model 'test-model' not found"}},
		// "model" and "not found" in a message about something else.
		{"other thing not found", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 400, "invalid_request_error", "model context: tool 'lookup' not found"), llm.KindBadRequest,
			[]string{"request refused (HTTP 400", "tool 'lookup' not found"}},
		{"another model not found", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 400, "invalid_request_error", "draft model 'tiny' not found"), llm.KindBadRequest,
			[]string{"request refused"}},
		{"bad request", llmtest.Anthropic, llmtest.Error(llmtest.Anthropic, 400, "invalid_request_error", "prompt is too long"), llm.KindBadRequest, []string{"request refused", "prompt is too long"}},
		{"openai not JSON", llmtest.OpenAI, llmtest.Reply{Body: `<html>gateway</html>`}, llm.KindBadResponse, []string{"openai: malformed response"}},
		{"anthropic not JSON", llmtest.Anthropic, llmtest.Reply{Body: `{"type":"message","content":[`}, llm.KindBadResponse, []string{"anthropic: malformed response"}},
		{"no choices", llmtest.OpenAI, llmtest.Reply{Body: `{"choices":[]}`}, llm.KindBadResponse, []string{"no choices"}},
		{"error body without JSON", llmtest.OpenAI, llmtest.Reply{Status: 418, Body: "short and stout"}, llm.KindBadRequest, []string{"HTTP 418", "short and stout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, tt.api, func(llmtest.Request) llmtest.Reply { return tt.reply })
			c, s := client(t, tt.api, srv, "key")
			_, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
			var apiErr *llm.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v, want *APIError", err)
			}
			if apiErr.Kind != tt.kind {
				t.Errorf("kind %s, want %s (%v)", apiErr.Kind, tt.kind, err)
			}
			for _, want := range tt.contains {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if n := len(srv.Requests()); n != 1 || len(s.got()) != 0 {
				t.Errorf("%d requests, sleeps %v: a non-retryable error was retried", n, s.got())
			}
		})
	}
}

func TestRetries(t *testing.T) {
	date := now.Add(7 * time.Second).Format(http.TimeFormat)
	tests := []struct {
		name    string
		api     llmtest.API
		fails   []llmtest.Reply // answered in order, then success
		sleeps  []time.Duration
		kind    llm.Kind // "" when the call succeeds in the end
		message string
	}{
		{"429 with Retry-After seconds", llmtest.OpenAI,
			[]llmtest.Reply{withHeader(llmtest.Error(llmtest.OpenAI, 429, "rate_limit_exceeded", "slow down"), "Retry-After", "3")},
			[]time.Duration{3 * time.Second}, "", ""},
		{"503 with Retry-After date", llmtest.Anthropic,
			[]llmtest.Reply{withHeader(llmtest.Error(llmtest.Anthropic, 503, "api_error", "busy"), "Retry-After", date)},
			[]time.Duration{7 * time.Second}, "", ""},
		{"backoff doubles without Retry-After", llmtest.Anthropic,
			[]llmtest.Reply{llmtest.Error(llmtest.Anthropic, 529, "overloaded_error", "Overloaded"), llmtest.Error(llmtest.Anthropic, 500, "api_error", "oops"), {Status: 502, Body: "bad gateway"}},
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, "", ""},
		{"unreadable Retry-After falls back to backoff", llmtest.OpenAI,
			[]llmtest.Reply{withHeader(llmtest.Error(llmtest.OpenAI, 429, "", "slow"), "Retry-After", "soon")},
			[]time.Duration{time.Second}, "", ""},
		{"retries are bounded", llmtest.OpenAI,
			[]llmtest.Reply{
				llmtest.Error(llmtest.OpenAI, 429, "", "slow"), llmtest.Error(llmtest.OpenAI, 429, "", "slow"),
				llmtest.Error(llmtest.OpenAI, 429, "", "slow"), llmtest.Error(llmtest.OpenAI, 429, "", "slow"),
				llmtest.Error(llmtest.OpenAI, 429, "", "still slow"),
			},
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}, llm.KindRateLimited, "still slow (after 5 attempts)"},
		{"408 is retried, then reported as a timeout", llmtest.Anthropic,
			[]llmtest.Reply{
				llmtest.Error(llmtest.Anthropic, 408, "timeout_error", "slow"), llmtest.Error(llmtest.Anthropic, 408, "timeout_error", "slow"),
				llmtest.Error(llmtest.Anthropic, 408, "timeout_error", "slow"), llmtest.Error(llmtest.Anthropic, 408, "timeout_error", "slow"),
				llmtest.Error(llmtest.Anthropic, 408, "timeout_error", "Request timed out"),
			},
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}, llm.KindTimeout, "anthropic: timed out (HTTP 408, timeout_error): Request timed out (after 5 attempts)"},
		{"a Retry-After too long is not waited for", llmtest.OpenAI,
			[]llmtest.Reply{withHeader(llmtest.Error(llmtest.OpenAI, 429, "insufficient_quota", "quota spent"), "Retry-After", "86400")},
			nil, llm.KindRateLimited, "asks to retry after 24h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, tt.api, func(r llmtest.Request) llmtest.Reply {
				if r.N <= len(tt.fails) {
					return tt.fails[r.N-1]
				}
				return llmtest.Text(tt.api, "finally")
			})
			c, s := client(t, tt.api, srv, "key")
			resp, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
			if got := s.got(); !equalDurations(got, tt.sleeps) {
				t.Errorf("sleeps %v, want %v", got, tt.sleeps)
			}
			if tt.kind == "" {
				if err != nil || resp.Message.Content != "finally" {
					t.Fatalf("resp %+v, err %v", resp, err)
				}
				return
			}
			var apiErr *llm.APIError
			if !errors.As(err, &apiErr) || apiErr.Kind != tt.kind || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("error %v, want kind %s with %q", err, tt.kind, tt.message)
			}
		})
	}
}

func TestRetryStopsWhenContextEnds(t *testing.T) {
	srv := llmtest.New(t, llmtest.OpenAI, func(llmtest.Request) llmtest.Reply { return llmtest.Error(llmtest.OpenAI, 503, "", "down") })
	ctx, cancel := context.WithCancel(context.Background())
	opts := llm.Options{Retry: llm.Retry{Sleep: func(ctx context.Context, _ time.Duration) error { cancel(); <-ctx.Done(); return ctx.Err() }}}
	c := llm.NewOpenAI(srv.BaseURL(), "k", "m", opts)
	_, err := c.Complete(ctx, llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests after cancel, want 1", n)
	}
}

// A refused connection may pass (a local server restarting): it is
// retried, then reported with the base URL to check.
func TestNetworkFailureIsRetriedThenReported(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // nothing listens on its address any more
	s := &sleeps{}
	c := llm.NewAnthropic(closed.URL, "k", "m", llm.Options{Retry: llm.Retry{MaxRetries: 2, Sleep: s.sleep, Jitter: noJitter}})
	_, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.Kind != llm.KindNetwork || apiErr.Attempts != 3 {
		t.Fatalf("error %v", err)
	}
	for _, want := range []string{"anthropic: connection failed: ", "connection refused", "(after 3 attempts)", "check ANTHROPIC_BASE_URL " + closed.URL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if got := s.got(); !equalDurations(got, []time.Duration{time.Second, 2 * time.Second}) {
		t.Errorf("sleeps %v, want [1s 2s]", got)
	}
}

// failingDial is a transport whose every connection fails with err.
func failingDial(err error) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return nil, err }}}
}

// Failures that another attempt cannot fix are reported at once, with
// the base URL to check when there was no HTTP answer.
func TestNetworkFailuresThatAreNotRetried(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler()) // its certificate is trusted by no one
	defer tlsSrv.Close()
	plain := llmtest.New(t, llmtest.Anthropic, func(llmtest.Request) llmtest.Reply { return llmtest.Text(llmtest.Anthropic, "hi") })
	huge := llmtest.New(t, llmtest.Anthropic, func(llmtest.Request) llmtest.Reply {
		return llmtest.Reply{Body: `{"type":"message","content":[{"type":"text","text":"` + strings.Repeat("x", 16<<20) + `"}]}`}
	})
	tests := []struct {
		name    string
		baseURL string
		client  *http.Client
		kind    llm.Kind
		want    []string
	}{
		{"unknown host", "http://api.example.invalid", failingDial(&net.DNSError{Err: "no such host", Name: "api.example.invalid", IsNotFound: true}),
			llm.KindNetwork, []string{"connection failed", "no such host", "check ANTHROPIC_BASE_URL http://api.example.invalid"}},
		{"untrusted certificate", tlsSrv.URL, nil, llm.KindNetwork, []string{"certificate", "check ANTHROPIC_BASE_URL " + tlsSrv.URL}},
		{"https to a plain HTTP server", strings.Replace(plain.BaseURL(), "http://", "https://", 1), nil, llm.KindNetwork, []string{"connection failed", "check ANTHROPIC_BASE_URL"}},
		{"malformed URL", "http://bad host", nil, llm.KindNetwork, []string{"connection failed", "invalid character"}},
		{"body too large", huge.BaseURL(), nil, llm.KindBadResponse, []string{"malformed response (HTTP 200): response body over 16 MiB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &sleeps{}
			c := llm.NewAnthropic(tt.baseURL, "k", "m", llm.Options{HTTPClient: tt.client, Retry: llm.Retry{Sleep: s.sleep}})
			_, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
			var apiErr *llm.APIError
			if !errors.As(err, &apiErr) || apiErr.Kind != tt.kind || apiErr.Attempts != 1 {
				t.Fatalf("error %v, want kind %s after 1 attempt", err, tt.kind)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if len(s.got()) != 0 {
				t.Errorf("retried after %v", s.got())
			}
		})
	}
}

// A server that does not answer in time is given up on per attempt, and
// the attempt is retried.
func TestResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := llmtest.New(t, llmtest.OpenAI, func(llmtest.Request) llmtest.Reply {
		<-release
		return llmtest.Text(llmtest.OpenAI, "too late")
	})
	t.Cleanup(func() { close(release) }) // before the server closes: cleanups run last first
	s := &sleeps{}
	c := llm.NewOpenAI(srv.BaseURL(), "k", "m", llm.Options{ResponseHeaderTimeout: 10 * time.Millisecond, Retry: llm.Retry{MaxRetries: 1, Sleep: s.sleep, Jitter: noJitter}})
	_, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || apiErr.Kind != llm.KindTimeout || apiErr.Attempts != 2 {
		t.Fatalf("error %v, want a timeout after 2 attempts", err)
	}
	for _, want := range []string{"openai: timed out: ", "timeout awaiting response headers", "check OPENAI_BASE_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// Backoff waits are drawn with full jitter: each is Jitter of the
// exponential backoff; Retry-After is waited as the server says.
func TestBackoffJitter(t *testing.T) {
	srv := llmtest.New(t, llmtest.OpenAI, func(r llmtest.Request) llmtest.Reply {
		switch r.N {
		case 1, 2:
			return llmtest.Error(llmtest.OpenAI, 503, "", "busy")
		case 3:
			return withHeader(llmtest.Error(llmtest.OpenAI, 429, "", "slow"), "Retry-After", "3")
		}
		return llmtest.Text(llmtest.OpenAI, "ok")
	})
	s := &sleeps{}
	var asked []time.Duration
	half := func(d time.Duration) time.Duration { asked = append(asked, d); return d / 2 }
	c := llm.NewOpenAI(srv.BaseURL(), "k", "m", llm.Options{Retry: llm.Retry{Sleep: s.sleep, Jitter: half}})
	if _, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}}); err != nil {
		t.Fatal(err)
	}
	if got := s.got(); !equalDurations(got, []time.Duration{500 * time.Millisecond, time.Second, 3 * time.Second}) {
		t.Errorf("sleeps %v, want [500ms 1s 3s]", got)
	}
	if !equalDurations(asked[:2], []time.Duration{time.Second, 2 * time.Second}) {
		t.Errorf("jitter asked for %v", asked)
	}
}

// The configured key never appears in an error, wherever the server
// echoed it: the provider's message, a raw body, the error type.
func TestErrorsRedactTheKey(t *testing.T) {
	const key = "sk-secret-0123456789"
	tests := []struct {
		name  string
		api   llmtest.API
		reply llmtest.Reply
	}{
		{"openai message", llmtest.OpenAI, llmtest.Error(llmtest.OpenAI, 401, "invalid_api_key", "Incorrect API key provided: "+key)},
		{"proxy echoing the header", llmtest.OpenAI, llmtest.Reply{Status: 403, Body: "forbidden: Authorization: Bearer " + key}},
		{"anthropic message", llmtest.Anthropic, llmtest.Error(llmtest.Anthropic, 400, "invalid_request_error", "bad x-api-key "+key+" for this org")},
		{"error in a 200", llmtest.OpenAI, llmtest.Reply{Body: `{"error":{"message":"key ` + key + ` is disabled","code":"` + key + `"}}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, tt.api, func(llmtest.Request) llmtest.Reply { return tt.reply })
			c, _ := client(t, tt.api, srv, key)
			_, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "0123456789") {
				t.Errorf("error %q holds the key", err)
			}
			if !strings.Contains(err.Error(), "[redacted]") {
				t.Errorf("error %q does not say what was redacted", err)
			}
		})
	}
}

// rewrite sends every request to target, whatever its URL: to play
// api.openai.com locally.
type rewrite struct{ target *url.URL }

func (r rewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = r.target.Scheme, r.target.Host
	return http.DefaultTransport.RoundTrip(req)
}

// OpenAI's own API gets max_completion_tokens (its o-series and gpt-5
// models refuse max_tokens); compatible servers get max_tokens.
func TestOpenAITokenCap(t *testing.T) {
	srv := llmtest.New(t, llmtest.OpenAI, func(llmtest.Request) llmtest.Reply { return llmtest.Text(llmtest.OpenAI, "hi") })
	target, err := url.Parse(srv.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		baseURL   string
		maxTokens int
		want      string // the key sent, or "" for none
	}{
		{"https://api.openai.com/v1", 300, "max_completion_tokens"},
		{"https://API.OpenAI.com:443/v1", 300, "max_completion_tokens"},
		{"http://localhost:11434/v1", 300, "max_tokens"},
		{"https://api.openai.com.example.net/v1", 300, "max_tokens"},
		{"https://api.openai.com/v1", 0, ""},
	}
	for _, tt := range tests {
		c := llm.NewOpenAI(tt.baseURL, "k", "m", llm.Options{MaxTokens: tt.maxTokens, HTTPClient: &http.Client{Transport: rewrite{target}}})
		if _, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}}); err != nil {
			t.Fatal(err)
		}
		reqs := srv.Requests()
		var body map[string]any
		if err := json.Unmarshal(reqs[len(reqs)-1].Body, &body); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"max_tokens", "max_completion_tokens"} {
			if v, ok := body[k]; ok != (k == tt.want) || (ok && v != float64(tt.maxTokens)) {
				t.Errorf("%s, cap %d: %s = %v, want only %q", tt.baseURL, tt.maxTokens, k, v, tt.want)
			}
		}
	}
}

// Tool-call ids made up for servers that send none do not repeat across
// answers: the conversation sends them all back.
func TestSynthesizedToolCallIDsAreUnique(t *testing.T) {
	srv := llmtest.New(t, llmtest.OpenAI, func(llmtest.Request) llmtest.Reply {
		return llmtest.ToolCalls(llmtest.OpenAI, "", llmtest.Call{Name: "ReadFile", Args: `{}`}, llmtest.Call{Name: "ReadFile", Args: `{}`})
	})
	c := llm.NewOpenAI(srv.BaseURL(), "", "m", llm.Options{})
	seen := map[string]bool{}
	for range 2 {
		resp, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range resp.Message.ToolCalls {
			if tc.ID == "" || seen[tc.ID] {
				t.Errorf("id %q repeated or empty (seen %v)", tc.ID, seen)
			}
			seen[tc.ID] = true
		}
	}
}

// An answer cut off by the token limit says so, in both APIs.
func TestTruncatedAnswer(t *testing.T) {
	for _, api := range []llmtest.API{llmtest.OpenAI, llmtest.Anthropic} {
		t.Run(string(api), func(t *testing.T) {
			srv := llmtest.New(t, api, func(r llmtest.Request) llmtest.Reply {
				if r.N == 1 {
					return llmtest.CutOff(api, "I will rea", llmtest.Call{ID: "c1", Name: "ReadFile", Args: `{"path":"a"}`})
				}
				return llmtest.ToolCalls(api, "done", llmtest.Call{ID: "c2", Name: "ReadFile", Args: `{"path":"a"}`})
			})
			c, _ := client(t, api, srv, "key")
			req := llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}}
			resp, err := c.Complete(context.Background(), req)
			if err != nil || !resp.Truncated || resp.StopReason == "" {
				t.Fatalf("resp %+v, err %v: want truncated", resp, err)
			}
			resp, err = c.Complete(context.Background(), req)
			if err != nil || resp.Truncated {
				t.Fatalf("resp %+v, err %v: want not truncated", resp, err)
			}
		})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		model    string
		env      map[string]string
		provider string
		name     string
		err      string
	}{
		{"openai:gpt-4o-mini", map[string]string{"OPENAI_API_KEY": "k"}, "openai", "gpt-4o-mini", ""},
		{"openai:llama3.1:8b", map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1"}, "openai", "llama3.1:8b", ""},
		{"anthropic:claude-x", map[string]string{"ANTHROPIC_API_KEY": "k"}, "anthropic", "claude-x", ""},
		{"", nil, "", "", "no model"},
		{"gpt-4o", nil, "", "", "want PROVIDER:MODEL"},
		{"openai:", nil, "", "", "want PROVIDER:MODEL"},
		{"gemini:pro", nil, "", "", `unknown provider "gemini"`},
		{"openai:gpt-4o", nil, "", "", "OPENAI_API_KEY is not set"},
		{"anthropic:claude-x", map[string]string{"ANTHROPIC_BASE_URL": "http://localhost:1"}, "", "", "ANTHROPIC_API_KEY is not set"},
		{"openai:m", map[string]string{"OPENAI_BASE_URL": "localhost:11434"}, "", "", "want an http:// or https:// URL"},
	}
	for _, tt := range tests {
		c, err := llm.New(tt.model, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }, llm.Options{})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("New(%q) error %v, want %q", tt.model, err, tt.err)
			}
			continue
		}
		if err != nil || c.Provider() != tt.provider || c.Model() != tt.name {
			t.Errorf("New(%q) = %v, %v", tt.model, c, err)
		}
	}
}

func withHeader(r llmtest.Reply, k, v string) llmtest.Reply {
	r.Header = map[string]string{k: v}
	return r
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
