package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// OpenAI is a model behind the Chat Completions API: OpenAI's, or a
// compatible server (Ollama, vLLM, llama.cpp) at another base URL.
type OpenAI struct {
	baseURL   string // up to and including /v1
	key       string // may be empty for a local server
	model     string
	maxTokens int // 0: none sent
	// completionTokens sends the cap as max_completion_tokens, which
	// OpenAI's own API wants (its o-series and gpt-5 models refuse
	// max_tokens) but compatible servers may not know.
	completionTokens bool
	t                transport
	// synthesized numbers the tool-call ids made up for servers that send
	// none: ids must be unique across the conversation.
	synthesized atomic.Int64
}

// NewOpenAI returns a client for model at baseURL (for example
// https://api.openai.com/v1 or http://localhost:11434/v1). An empty key
// sends no Authorization header, as local servers expect.
func NewOpenAI(baseURL, key, model string, opts Options) *OpenAI {
	return &OpenAI{
		baseURL:          strings.TrimRight(baseURL, "/"),
		key:              key,
		model:            model,
		maxTokens:        max(opts.MaxTokens, 0),
		completionTokens: isOpenAIHost(baseURL),
		t: transport{
			provider:   "openai",
			client:     opts.httpClient(),
			retry:      opts.Retry,
			model:      model,
			key:        key,
			keyVar:     "OPENAI_API_KEY",
			baseURL:    baseURL,
			urlVar:     "OPENAI_BASE_URL",
			parseError: openAIError,
		},
	}
}

// isOpenAIHost reports whether baseURL is OpenAI's own API.
func isOpenAIHost(baseURL string) bool {
	u, err := url.Parse(baseURL)
	return err == nil && strings.EqualFold(u.Hostname(), "api.openai.com")
}

// Provider returns "openai".
func (c *OpenAI) Provider() string { return "openai" }

// Model returns the model name.
func (c *OpenAI) Model() string { return c.model }

type oaMessage struct {
	Role       string       `json:"role"`
	Content    *string      `json:"content"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

type oaToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type oaRequest struct {
	Model               string      `json:"model"`
	Messages            []oaMessage `json:"messages"`
	Tools               []oaTool    `json:"tools,omitempty"`
	MaxTokens           int         `json:"max_tokens,omitempty"`
	MaxCompletionTokens int         `json:"max_completion_tokens,omitempty"`
}

// oaResponse is decoded loosely: compatible servers differ in details.
type oaResponse struct {
	Choices []struct {
		Message struct {
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// Complete sends req to /chat/completions.
func (c *OpenAI) Complete(ctx context.Context, req Request) (Response, error) {
	body, err := json.Marshal(c.request(req))
	if err != nil {
		return Response{}, fmt.Errorf("openai: encode request: %w", err)
	}
	header := http.Header{}
	if c.key != "" {
		header.Set("Authorization", "Bearer "+c.key)
	}
	data, err := c.t.post(ctx, c.baseURL+"/chat/completions", header, body)
	if err != nil {
		return Response{}, err
	}
	return c.response(data)
}

func (c *OpenAI) request(req Request) oaRequest {
	out := oaRequest{Model: c.model}
	if c.completionTokens {
		out.MaxCompletionTokens = c.maxTokens
	} else {
		out.MaxTokens = c.maxTokens
	}
	if req.System != "" {
		out.Messages = append(out.Messages, oaMessage{Role: "system", Content: ptr(req.System)})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			out.Messages = append(out.Messages, oaMessage{Role: "user", Content: ptr(m.Content)})
		case RoleAssistant:
			msg := oaMessage{Role: "assistant"}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				msg.Content = ptr(m.Content)
			}
			for _, tc := range m.ToolCalls {
				call := oaToolCall{ID: tc.ID, Type: "function"}
				call.Function.Name = tc.Name
				call.Function.Arguments = tc.Arguments
				msg.ToolCalls = append(msg.ToolCalls, call)
			}
			out.Messages = append(out.Messages, msg)
		case RoleTool:
			content := m.Content
			if m.IsError {
				// The API has no error flag on tool results.
				content = "Error: " + content
			}
			out.Messages = append(out.Messages, oaMessage{Role: "tool", ToolCallID: m.ToolCallID, Content: ptr(content)})
		}
	}
	for _, t := range req.Tools {
		tool := oaTool{Type: "function"}
		tool.Function.Name = t.Name
		tool.Function.Description = t.Description
		tool.Function.Parameters = t.Schema
		out.Tools = append(out.Tools, tool)
	}
	return out
}

func (c *OpenAI) response(data []byte) (Response, error) {
	bad := func(format string, args ...any) (Response, error) {
		return Response{}, c.t.finish(&APIError{Kind: KindBadResponse, Status: 200, Message: fmt.Sprintf(format, args...)})
	}
	var r oaResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return bad("%v", err)
	}
	if len(r.Choices) == 0 {
		// Some compatible servers answer an error with 200.
		if typ, msg := openAIError(data); msg != "" {
			return Response{}, c.t.finish(&APIError{Kind: kindOf(200, typ, msg, c.model), Status: 200, Type: typ, Message: msg})
		}
		return bad("no choices in the answer")
	}
	choice := r.Choices[0]
	text, err := openAIContent(choice.Message.Content)
	if err != nil {
		return bad("message content: %v", err)
	}
	out := Response{Message: Message{Role: RoleAssistant, Content: text}, StopReason: choice.FinishReason, Truncated: choice.FinishReason == "length"}
	for _, tc := range choice.Message.ToolCalls {
		args := string(tc.Function.Arguments)
		// Arguments are a JSON string holding JSON; a server that sends
		// the object itself is taken as it is.
		var s string
		if json.Unmarshal(tc.Function.Arguments, &s) == nil {
			args = s
		}
		id := tc.ID
		if id == "" {
			// Some local servers send none; the id is sent back with the
			// result and must not repeat one of an earlier answer.
			id = fmt.Sprintf("call_bcp_%d", c.synthesized.Add(1))
		}
		out.Message.ToolCalls = append(out.Message.ToolCalls, ToolCall{ID: id, Name: tc.Function.Name, Arguments: args})
	}
	if r.Usage != nil {
		out.Usage = Usage{InputTokens: r.Usage.PromptTokens, OutputTokens: r.Usage.CompletionTokens}
	}
	return out, nil
}

// openAIContent reads message content: a string, null, or an array of
// parts of which the text parts are kept.
func openAIContent(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// openAIError reads {"error": {"message", "type", "code"}} or
// {"error": "message"}.
func openAIError(body []byte) (typ, msg string) {
	var r struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &r) != nil || len(r.Error) == 0 || string(r.Error) == "null" {
		return "", ""
	}
	if json.Unmarshal(r.Error, &msg) == nil {
		return "", msg
	}
	var e struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	}
	if json.Unmarshal(r.Error, &e) != nil {
		return "", ""
	}
	typ = e.Type
	if code, ok := e.Code.(string); ok && code != "" {
		typ = code
	}
	return typ, e.Message
}

func ptr[T any](v T) *T { return &v }
