// Package llmtest plays the two model APIs of package llm on a local
// httptest server, for tests: each request is recorded and answered by a
// script the test supplies, so a test can make a "model" call tools, write
// malformed arguments, fail, rate-limit, or refuse a key.
//
// Like the real APIs, the server refuses (400, without asking the script)
// a conversation the real API would refuse: see checkAnthropic and
// checkOpenAI for the rules. A test whose client breaks one of them sees
// the request refused, as it would be in production.
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// API is which API a Server plays.
type API string

// The APIs.
const (
	OpenAI    API = "openai"
	Anthropic API = "anthropic"
)

// Request is one recorded request.
type Request struct {
	N      int // 1 for the first request the server got
	Path   string
	Header http.Header
	Body   []byte
	// Refused is why the server refused the request as the real API
	// would (answering 400 without asking the script), or "".
	Refused string
	api     API
}

// Reply is a scripted answer.
type Reply struct {
	Status int               // default 200
	Header map[string]string // e.g. Retry-After
	Body   string
}

// Script answers a request.
type Script func(r Request) Reply

// Server is a fake model API.
type Server struct {
	api    API
	srv    *httptest.Server
	script Script

	mu       sync.Mutex
	requests []Request
	changed  chan struct{} // closed and replaced on each request
}

// New starts a server playing api, answering with script. It stops at
// the end of the test.
func New(t testing.TB, api API, script Script) *Server {
	s := &Server{api: api, script: script, changed: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// BaseURL is the value for OPENAI_BASE_URL (with /v1) or
// ANTHROPIC_BASE_URL (without).
func (s *Server) BaseURL() string {
	if s.api == OpenAI {
		return s.srv.URL + "/v1"
	}
	return s.srv.URL
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	want := "/v1/chat/completions"
	if s.api == Anthropic {
		want = "/v1/messages"
	}
	s.mu.Lock()
	r := Request{N: len(s.requests) + 1, Path: req.URL.Path, Header: req.Header.Clone(), Body: body, api: s.api}
	s.requests = append(s.requests, r)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	if req.Method != http.MethodPost || req.URL.Path != want {
		http.Error(w, `{"error":{"message":"no such endpoint"}}`, http.StatusNotFound)
		return
	}
	check := checkOpenAI
	if s.api == Anthropic {
		check = checkAnthropic
	}
	var reply Reply
	if why := check(body); why != "" {
		s.mu.Lock()
		s.requests[r.N-1].Refused = why
		s.mu.Unlock()
		reply = Error(s.api, http.StatusBadRequest, "invalid_request_error", why)
	} else {
		reply = s.script(r)
	}
	for k, v := range reply.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	if reply.Status == 0 {
		reply.Status = http.StatusOK
	}
	w.WriteHeader(reply.Status)
	_, _ = io.WriteString(w, reply.Body)
}

// Requests returns the requests so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// WaitFor waits until cond holds for the requests so far, checking on
// each new request, and fails the test after timeout.
func (s *Server) WaitFor(t testing.TB, timeout time.Duration, what string, cond func([]Request) bool) []Request {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		reqs := append([]Request(nil), s.requests...)
		changed := s.changed
		s.mu.Unlock()
		if cond(reqs) {
			return reqs
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%s: not seen within %s in %d requests", what, timeout, len(reqs))
			return nil
		}
	}
}

// Contains reports whether the request body holds s, as JSON would quote
// it (so a test can look for text with quotes or newlines).
func (r Request) Contains(s string) bool {
	q, _ := json.Marshal(s)
	return strings.Contains(string(r.Body), strings.Trim(string(q), `"`))
}

// ToolResults returns the contents of the tool results in the request, in
// order.
func (r Request) ToolResults() []string {
	var out []string
	if r.api == OpenAI {
		var body struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(r.Body, &body)
		for _, m := range body.Messages {
			if m.Role == "tool" {
				out = append(out, m.Content)
			}
		}
		return out
	}
	var body struct {
		Messages []struct {
			Content []struct {
				Type    string `json:"type"`
				Content string `json:"content"`
			} `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(r.Body, &body)
	for _, m := range body.Messages {
		for _, b := range m.Content {
			if b.Type == "tool_result" {
				out = append(out, b.Content)
			}
		}
	}
	return out
}

// ToolNames returns the names of the tools offered in the request.
func (r Request) ToolNames() []string {
	var body struct {
		Tools []struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(r.Body, &body)
	var out []string
	for _, t := range body.Tools {
		if t.Function.Name != "" {
			out = append(out, t.Function.Name)
		} else {
			out = append(out, t.Name)
		}
	}
	return out
}

// Tool returns the JSON Schema of the named tool's arguments, or nil.
func (r Request) Tool(name string) json.RawMessage {
	var body struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
			Function    struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(r.Body, &body)
	for _, t := range body.Tools {
		if t.Function.Name == name {
			return t.Function.Parameters
		}
		if t.Name == name {
			return t.InputSchema
		}
	}
	return nil
}

// Call is one scripted tool call. Args is the raw argument text: for
// OpenAI it is sent as the arguments string, malformed or not; for
// Anthropic it must be JSON (the API sends an object).
type Call struct {
	ID, Name, Args string
}

// Text is an answer with text and no tool calls.
func Text(api API, text string) Reply {
	return ToolCalls(api, text)
}

// ToolCalls is an answer with optional text and the given tool calls, with
// usage of 10 input and 5 output tokens.
func ToolCalls(api API, text string, calls ...Call) Reply {
	return answer(api, false, text, calls)
}

// CutOff is like ToolCalls, but the model was stopped by its token limit
// (stop_reason max_tokens, finish_reason length): the text, or the last
// call, is incomplete.
func CutOff(api API, text string, calls ...Call) Reply {
	return answer(api, true, text, calls)
}

func answer(api API, cut bool, text string, calls []Call) Reply {
	if api == OpenAI {
		msg := map[string]any{"role": "assistant", "content": text}
		finish := "stop"
		if len(calls) > 0 {
			var tcs []any
			for _, c := range calls {
				tcs = append(tcs, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}})
			}
			msg["tool_calls"] = tcs
			finish = "tool_calls"
		}
		if cut {
			finish = "length"
		}
		return jsonReply(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
		})
	}
	var content []any
	if text != "" {
		content = append(content, map[string]any{"type": "text", "text": text})
	}
	stop := "end_turn"
	for _, c := range calls {
		content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": json.RawMessage(c.Args)})
		stop = "tool_use"
	}
	if cut {
		stop = "max_tokens"
	}
	return jsonReply(map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": "fake",
		"content": content, "stop_reason": stop,
		"usage": map[string]any{"input_tokens": 10, "output_tokens": 5},
	})
}

// Error is an API error answer in the API's own format.
func Error(api API, status int, typ, message string) Reply {
	if api == OpenAI {
		return Reply{Status: status, Body: mustJSON(map[string]any{"error": map[string]any{"message": message, "type": typ, "code": typ}})}
	}
	return Reply{Status: status, Body: mustJSON(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": message}})}
}

func jsonReply(v any) Reply { return Reply{Body: mustJSON(v)} }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("llmtest: %v", err))
	}
	return string(b)
}
