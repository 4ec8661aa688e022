package runtime

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
)

// Message types, gateway to runtime.
const (
	TypeStart               = "start"
	TypeSubscriptionsActive = "bcp_subscriptions_active"
	TypePrompt              = "prompt"
	TypeQuery               = "bcp_query"
	TypeQuerySent           = "bcp_query_sent"
	TypeQueryError          = "bcp_query_error"
	TypeValidationResult    = "bcp_validation_result"
	TypeResponseDelivery    = "bcp_response_delivery"
	TypeSubscribeResult     = "bcp_subscribe_result"
	TypeInterrupt           = "interrupt"
	TypeShutdown            = "shutdown"
)

// Message types, runtime to gateway. TypeError goes both ways: the gateway
// answers a line it cannot accept with one.
const (
	TypeReady        = "ready"
	TypeResult       = "result"
	TypeText         = "text"
	TypeToolUse      = "tool_use"
	TypeToolResult   = "tool_result"
	TypeLog          = "log"
	TypeError        = "error"
	TypeInterrupted  = "interrupted"
	TypeQueryRequest = "bcp_query_request"
	TypeResponse     = "bcp_response"
	// TypeSubscribeRequest is a Controller asking for a subscription at
	// run time (needs BCPSubscribe); the gateway answers it with
	// bcp_subscribe_result.
	TypeSubscribeRequest = "bcp_subscribe_request"
)

// Start is the first message to a runtime.
type Start struct {
	Type  string     `json:"type"`
	Agent StartAgent `json:"agent"`
}

// StartAgent describes the agent a runtime is to be.
type StartAgent struct {
	Name         string   `json:"name"`
	Tools        []string `json:"tools"`
	Model        string   `json:"model,omitempty"`
	SystemPrompt string   `json:"system_prompt"`
	MaxTurns     int      `json:"max_turns,omitempty"`
	Cwd          string   `json:"cwd"`
}

// SubscriptionsActive tells a Reader which subscriptions it may publish
// to. It is sent right after ready when the Reader has at least one
// subscription and the BCPPublish tool.
type SubscriptionsActive struct {
	Type          string               `json:"type"`
	Subscriptions []ActiveSubscription `json:"subscriptions"`
}

// ActiveSubscription is one publish target.
type ActiveSubscription struct {
	SubscriptionID string         `json:"subscription_id"`
	Controller     string         `json:"controller"`
	Category       bcp.Category   `json:"category"`
	Fields         []bcp.Field    `json:"fields,omitempty"`
	Questions      []bcp.Question `json:"questions,omitempty"`
	Directive      string         `json:"directive,omitempty"`
	MaxWords       int            `json:"max_words,omitempty"`
	BandwidthBits  float64        `json:"bandwidth_bits"` // new
	// RateLimit (new) is the subscription's rate limit, if it has one:
	// a push beyond it is refused with rate_limited. Nil: no limit. The
	// subscription's filter, debounce and batch are not announced.
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
}

// RateLimit is a subscription's rate limit as announced to its Reader
// (new): the gateway accepts at most Max pushes on the subscription in any
// window of WindowMS milliseconds (the window slides) and refuses the
// others with rate_limited. A refused push does not count. The window is
// in whole milliseconds, as duration_ms is; a window with a fraction of a
// millisecond is rounded up, so a Reader that waits it out is never early.
type RateLimit struct {
	Max      int   `json:"max"`
	WindowMS int64 `json:"window_ms"`
}

// NewRateLimit returns the announcement of a limit of n pushes in any
// window, with the window rounded up to a whole millisecond.
func NewRateLimit(n int, window time.Duration) *RateLimit {
	ms := window / time.Millisecond
	if window%time.Millisecond > 0 {
		ms++
	}
	return &RateLimit{Max: n, WindowMS: int64(ms)}
}

// Window returns the limit's window.
func (r RateLimit) Window() time.Duration { return time.Duration(r.WindowMS) * time.Millisecond }

// Prompt is a trigger (cron, operator) for one turn.
type Prompt struct {
	Type     string         `json:"type"`
	Content  string         `json:"content"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Query asks a Reader to answer a Controller's query.
type Query struct {
	Type      string         `json:"type"`
	QueryID   string         `json:"query_id"`
	Category  bcp.Category   `json:"category"`
	FromAgent string         `json:"from_agent"`
	Context   string         `json:"context,omitempty"`
	Fields    []bcp.Field    `json:"fields,omitempty"`
	Questions []bcp.Question `json:"questions,omitempty"`
	Directive string         `json:"directive,omitempty"`
	MaxWords  int            `json:"max_words,omitempty"`
}

// QuerySent tells a Controller its query was accepted and routed (new).
type QuerySent struct {
	Type          string  `json:"type"`
	RequestID     string  `json:"request_id"`
	QueryID       string  `json:"query_id"`
	ToAgent       string  `json:"to_agent"`
	BandwidthBits float64 `json:"bandwidth_bits"`
}

// QueryError tells a Controller its query was refused or timed out.
// Reason starts with an error code. RequestID echoes the Controller's
// request; QueryID is set once the gateway had assigned one (a timeout,
// a rejected or undeliverable answer), so either can match it (new).
type QueryError struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	QueryID   string `json:"query_id,omitempty"` // new
	ToAgent   string `json:"to_agent"`
	Reason    string `json:"reason"`
}

// ValidationResult answers a Reader's bcp_response. Exactly one of QueryID
// and SubscriptionID is set, echoing the response.
type ValidationResult struct {
	Type           string `json:"type"`
	QueryID        string `json:"query_id,omitempty"`
	SubscriptionID string `json:"subscription_id,omitempty"`
	Success        bool   `json:"success"`
	Detail         string `json:"detail"`
	// Filtered (new) is set, with Success, when a push was accepted but
	// its subscription's filter kept it from the Controller: it was
	// recorded, not delivered and not charged.
	Filtered bool `json:"filtered,omitempty"`
	// Superseded (new) names the earlier push of the same debounce key
	// that this accepted push replaced before it reached the Controller:
	// that one will not be delivered, and its charge was given back.
	Superseded string `json:"superseded,omitempty"`
	// Batch (new) is the batch delivery an accepted push of a batched
	// subscription waits in: it reaches the Controller with the others.
	Batch string `json:"batch,omitempty"`
}

// ResponseDelivery brings validated data to a Controller as its next turn.
// A runtime that sees a DeliveryID twice drops the second (the gateway
// redelivers after a crash).
type ResponseDelivery struct {
	Type           string          `json:"type"`
	QueryID        string          `json:"query_id,omitempty"`
	SubscriptionID string          `json:"subscription_id,omitempty"`
	Category       bcp.Category    `json:"category"`
	FromAgent      string          `json:"from_agent"`
	Response       json.RawMessage `json:"response"`
	BandwidthBits  float64         `json:"bandwidth_bits"`
	DeliveryID     string          `json:"delivery_id,omitempty"` // new
	RequestID      string          `json:"request_id,omitempty"`  // new
	Anomalies      []bcp.Anomaly   `json:"anomalies,omitempty"`   // new
	Redelivered    bool            `json:"redelivered,omitempty"` // new
	Prompt         string          `json:"prompt,omitempty"`      // new
	// Items (new) is set on a batch: the pushes it holds, in the order
	// they were accepted. Response is then the list of their responses,
	// BandwidthBits their sum, Anomalies theirs with the item's index in
	// Field ("[2].topic"), DeliveryID the batch's own.
	Items []DeliveryItem `json:"items,omitempty"`
}

// DeliveryItem is one push of a batch delivery (new).
type DeliveryItem struct {
	DeliveryID    string          `json:"delivery_id"`
	Response      json.RawMessage `json:"response"`
	BandwidthBits float64         `json:"bandwidth_bits"`
	Anomalies     []bcp.Anomaly   `json:"anomalies,omitempty"`
}

// Interrupt asks a runtime to stop its current turn.
type Interrupt struct {
	Type   string `json:"type"`
	Reason string `json:"reason,omitempty"`
}

// Shutdown asks a runtime to exit.
type Shutdown struct {
	Type   string `json:"type"`
	Reason string `json:"reason,omitempty"`
}

// Ready tells the gateway the runtime has processed start.
type Ready struct {
	Type string `json:"type"`
}

// Result ends the current prompt, query or delivery. Token counts may
// come as usage{} or, as TriOnyx's runtime writes them, at the top level
// (input_tokens, output_tokens, cache_creation_input_tokens,
// cache_read_input_tokens); decoding reads either into Usage, usage{}
// first. Encoding writes usage{}.
type Result struct {
	Type       string  `json:"type"`
	DurationMS int64   `json:"duration_ms"`
	NumTurns   int     `json:"num_turns"`
	CostUSD    float64 `json:"cost_usd"`
	IsError    bool    `json:"is_error"`
	Usage      *Usage  `json:"usage,omitempty"` // new
}

// Usage is the model tokens a turn consumed, for runtimes that drive a
// model and whose provider reports them (new; the gateway audits it).
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// The prompt-cache counts of providers that report them (Anthropic),
	// apart from InputTokens (new).
	CacheCreationInputTokens int `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens,omitempty"`
}

// UnmarshalJSON reads usage{} or, without it, the top-level counts.
func (r *Result) UnmarshalJSON(data []byte) error {
	type plain Result
	var w struct {
		plain
		InputTokens              *int `json:"input_tokens"`
		OutputTokens             *int `json:"output_tokens"`
		CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*r = Result(w.plain)
	if r.Usage != nil {
		return nil
	}
	top := []*int{w.InputTokens, w.OutputTokens, w.CacheCreationInputTokens, w.CacheReadInputTokens}
	if !slices.ContainsFunc(top, func(p *int) bool { return p != nil }) {
		return nil
	}
	val := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	r.Usage = &Usage{InputTokens: val(w.InputTokens), OutputTokens: val(w.OutputTokens),
		CacheCreationInputTokens: val(w.CacheCreationInputTokens), CacheReadInputTokens: val(w.CacheReadInputTokens)}
	return nil
}

// Text is something the runtime's model said, for the audit log.
type Text struct {
	Type    string `json:"type"`
	Content string `json:"content"`
}

// ToolUse is a tool call the runtime's model made, for the audit log.
type ToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
}

// ToolResult is what a tool call returned to the model, for the audit log.
type ToolResult struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
}

// Log is a structured log line from a runtime.
type Log struct {
	Type    string `json:"type"`
	Level   string `json:"level"`
	Message string `json:"message"`
}

// Error reports a problem, in either direction.
type Error struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// QueryRequest is a Controller's query to a Reader (needs BCPQuery).
type QueryRequest struct {
	Type      string       `json:"type"`
	RequestID string       `json:"request_id"`
	To        string       `json:"to"`
	Category  bcp.Category `json:"category"`
	Spec      QuerySpec    `json:"spec"`
}

// Response is a Reader's answer to a query (QueryID set, needs
// BCPRespond) or a publish to a subscription (SubscriptionID and
// Controller set, needs BCPPublish). Response is kept raw: the gateway
// validates the exact bytes.
type Response struct {
	Type           string          `json:"type"`
	QueryID        string          `json:"query_id,omitempty"`
	SubscriptionID string          `json:"subscription_id,omitempty"`
	Controller     string          `json:"controller,omitempty"`
	Response       json.RawMessage `json:"response"`
}

// SubscribeRequest is a Controller's request for a new subscription at
// run time (new; needs BCPSubscribe): what its Reader To may push, in
// Category, shaped by Spec (fields | questions | directive, max_words; a
// query's context has no place here). The gateway chooses the
// subscription's id; an operator decides.
type SubscribeRequest struct {
	Type      string       `json:"type"`
	RequestID string       `json:"request_id"`
	To        string       `json:"to"`
	Category  bcp.Category `json:"category"`
	Spec      QuerySpec    `json:"spec"`
}

// The statuses of a bcp_subscribe_result.
const (
	// SubscribePending: the request waits for an operator (ApprovalID);
	// a second result follows when it is decided.
	SubscribePending = "pending"
	// SubscribeApproved: the subscription SubscriptionID is active; its
	// Reader has been told.
	SubscribeApproved = "approved"
	// SubscribeRejected: refused by the gateway at once, rejected by an
	// operator, or expired; Reason starts with an error code.
	SubscribeRejected = "rejected"
	// SubscribeRevoked: an approved subscription was withdrawn (by an
	// operator, or by a reload whose definitions it no longer fits).
	SubscribeRevoked = "revoked"
)

// SubscribeResult tells a Controller what became of its
// bcp_subscribe_request (new): at once pending or rejected, later
// approved, rejected, and, for an approved one, revoked. RequestID echoes
// the request; SubscriptionID is the gateway's id of the subscription
// (set from pending on), the one its deliveries carry.
type SubscribeResult struct {
	Type           string       `json:"type"`
	RequestID      string       `json:"request_id"`
	Status         string       `json:"status"`
	SubscriptionID string       `json:"subscription_id,omitempty"`
	ApprovalID     string       `json:"approval_id,omitempty"`
	ToAgent        string       `json:"to_agent"`
	Category       bcp.Category `json:"category,omitempty"`
	BandwidthBits  float64      `json:"bandwidth_bits,omitempty"`
	Reason         string       `json:"reason,omitempty"`
}

// IDRule is what every id a runtime sends must look like. Agent names,
// subscription ids and the gateway's query ids all fit it; bounding ids at
// the boundary keeps a hostile runtime's megabyte "id" out of events, logs
// and replies.
const IDRule = "at most 128 of A-Z, a-z, 0-9, '.', '_', ':' and '-'"

// ValidID reports whether id is non-empty and follows IDRule.
func ValidID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}
