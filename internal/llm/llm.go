package llm

import (
	"context"
	"encoding/json"
)

// Role is who a message is from.
type Role string

// The roles of a conversation. The system prompt is not a message: it is
// Request.System.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool" // the result of one tool call
)

// Message is one entry of a conversation.
type Message struct {
	Role Role
	// Content is the text: the user's, the assistant's, or a tool result.
	Content string
	// ToolCalls are the assistant's tool calls, in order.
	ToolCalls []ToolCall
	// ToolCallID names the call a RoleTool message answers.
	ToolCallID string
	// IsError marks a tool result that reports a failure.
	IsError bool
}

// ToolCall is one tool call by the model.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the JSON text the model wrote, unchecked: it may be
	// malformed, or not an object.
	Arguments string
}

// Tool is a tool offered to the model.
type Tool struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the arguments; its root must be an
	// object schema without oneOf/anyOf/allOf (both APIs refuse those
	// there; anyOf is accepted in nested positions).
	Schema json.RawMessage
}

// Request is one call to a model.
type Request struct {
	System   string
	Messages []Message
	Tools    []Tool
}

// Usage is the tokens one call consumed, as the provider reported them.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Response is the model's answer: an assistant message, possibly with
// tool calls.
type Response struct {
	Message Message
	// StopReason is the provider's word for why the model stopped
	// (end_turn, tool_use, stop, tool_calls, max_tokens, length, ...).
	StopReason string
	// Truncated is true when the answer was cut off by a token limit
	// (max_tokens, length): its text is incomplete, and so may be the
	// arguments of its last tool call.
	Truncated bool
	Usage     Usage
}

// Client is a model behind an API.
type Client interface {
	// Complete sends req and returns the model's answer. Errors from the
	// API are *APIError.
	Complete(ctx context.Context, req Request) (Response, error)
	// Provider names the API ("openai" or "anthropic"), for messages.
	Provider() string
	// Model is the model name sent to the API.
	Model() string
}
