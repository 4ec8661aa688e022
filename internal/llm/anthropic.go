package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// anthropicVersion is the API version header every request carries.
const anthropicVersion = "2023-06-01"

// DefaultMaxTokens is the Anthropic max_tokens when none is configured:
// the API requires one.
const DefaultMaxTokens = 4096

// Anthropic is a model behind the Messages API.
type Anthropic struct {
	baseURL   string // without /v1, like the official SDKs
	key       string
	model     string
	maxTokens int
	t         transport
}

// NewAnthropic returns a client for model at baseURL (for example
// https://api.anthropic.com).
func NewAnthropic(baseURL, key, model string, opts Options) *Anthropic {
	maxTokens := opts.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	return &Anthropic{
		baseURL:   strings.TrimRight(baseURL, "/"),
		key:       key,
		model:     model,
		maxTokens: maxTokens,
		t: transport{
			provider:   "anthropic",
			client:     opts.httpClient(),
			retry:      opts.Retry,
			model:      model,
			key:        key,
			keyVar:     "ANTHROPIC_API_KEY",
			baseURL:    baseURL,
			urlVar:     "ANTHROPIC_BASE_URL",
			parseError: anthropicError,
		},
	}
}

// Provider returns "anthropic".
func (c *Anthropic) Provider() string { return "anthropic" }

// Model returns the model name.
func (c *Anthropic) Model() string { return c.model }

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

type anMessage struct {
	Role    string    `json:"role"`
	Content []anBlock `json:"content"`
}

type anTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anRequest struct {
	Model     string      `json:"model"`
	MaxTokens int         `json:"max_tokens"`
	System    string      `json:"system,omitempty"`
	Messages  []anMessage `json:"messages"`
	Tools     []anTool    `json:"tools,omitempty"`
}

type anResponse struct {
	Type       string    `json:"type"`
	Content    []anBlock `json:"content"`
	StopReason string    `json:"stop_reason"`
	Usage      *struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

// Complete sends req to /v1/messages.
func (c *Anthropic) Complete(ctx context.Context, req Request) (Response, error) {
	body, err := json.Marshal(c.request(req))
	if err != nil {
		return Response{}, fmt.Errorf("anthropic: encode request: %w", err)
	}
	header := http.Header{}
	header.Set("x-api-key", c.key)
	header.Set("anthropic-version", anthropicVersion)
	data, err := c.t.post(ctx, c.baseURL+"/v1/messages", header, body)
	if err != nil {
		return Response{}, err
	}
	return c.response(data)
}

// request converts the conversation: tool results become tool_result
// blocks of a user message, and consecutive messages of one role are
// merged, since the API wants the roles to alternate.
func (c *Anthropic) request(req Request) anRequest {
	out := anRequest{Model: c.model, MaxTokens: c.maxTokens, System: req.System}
	add := func(role string, blocks ...anBlock) {
		if len(blocks) == 0 {
			return
		}
		if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == role {
			out.Messages[n-1].Content = append(out.Messages[n-1].Content, blocks...)
			return
		}
		out.Messages = append(out.Messages, anMessage{Role: role, Content: blocks})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			if hasText(m.Content) {
				add("user", anBlock{Type: "text", Text: m.Content})
			}
		case RoleAssistant:
			var blocks []anBlock
			if hasText(m.Content) {
				blocks = append(blocks, anBlock{Type: "text", Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, anBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: objectOrEmpty(tc.Arguments)})
			}
			add("assistant", blocks...)
		case RoleTool:
			content := m.Content
			if content == "" {
				content = "(no output)"
			}
			add("user", anBlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: content, IsError: m.IsError})
		}
	}
	for _, t := range req.Tools {
		out.Tools = append(out.Tools, anTool{Name: t.Name, Description: t.Description, InputSchema: t.Schema})
	}
	return out
}

// hasText reports whether s is worth a text block: the API refuses empty
// and white-space-only ones.
func hasText(s string) bool { return strings.TrimSpace(s) != "" }

// objectOrEmpty returns args if it is a JSON object, else {}: the API
// takes only objects as tool input, and a model's malformed arguments
// were already answered with an error.
func objectOrEmpty(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}

func (c *Anthropic) response(data []byte) (Response, error) {
	bad := func(format string, args ...any) (Response, error) {
		return Response{}, c.t.finish(&APIError{Kind: KindBadResponse, Status: 200, Message: fmt.Sprintf(format, args...)})
	}
	var r anResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return bad("%v", err)
	}
	if r.Type == "error" {
		typ, msg := anthropicError(data)
		return Response{}, c.t.finish(&APIError{Kind: kindOf(200, typ, msg, c.model), Status: 200, Type: typ, Message: msg})
	}
	if r.Type != "message" {
		return bad("type %q, want message", r.Type)
	}
	out := Response{Message: Message{Role: RoleAssistant}, StopReason: r.StopReason,
		Truncated: r.StopReason == "max_tokens" || r.StopReason == "model_context_window_exceeded"}
	var texts []string
	for _, b := range r.Content {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "tool_use":
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			out.Message.ToolCalls = append(out.Message.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	out.Message.Content = strings.Join(texts, "\n")
	if u := r.Usage; u != nil {
		out.Usage = Usage{InputTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, OutputTokens: u.OutputTokens}
	}
	return out, nil
}

// anthropicError reads {"type": "error", "error": {"type", "message"}}.
func anthropicError(body []byte) (typ, msg string) {
	var r struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &r) != nil {
		return "", ""
	}
	return r.Error.Type, r.Error.Message
}
