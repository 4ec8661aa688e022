package control

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
)

// The methods. Names are stable: clients of other versions rely on them.
const (
	MethodStatus           = "status"
	MethodAgentsList       = "agents.list"
	MethodAgentsStart      = "agents.start"
	MethodAgentsStop       = "agents.stop"
	MethodAgentsPrompt     = "agents.prompt"
	MethodApprovalsList    = "approvals.list"
	MethodApprovalsGet     = "approvals.get"
	MethodApprovalsApprove = "approvals.approve"
	MethodApprovalsReject  = "approvals.reject"
	MethodEventsList       = "events.list"
	MethodSubscribe        = "subscribe"
	MethodUnsubscribe      = "unsubscribe"
	MethodReload           = "reload"
	MethodReport           = "report"
)

// NotificationEvent is the method of the notifications (requests without
// an id) that carry subscribed events; the params are an EventNotification.
const NotificationEvent = "event"

// SocketName is the control socket's file name in the state directory.
const SocketName = "control.sock"

// Status is the result of status.
type Status struct {
	Version   string    `json:"version"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	Socket    string    `json:"socket"`
	// The gateway's side, from the Backend.
	AgentsDir         string         `json:"agents_dir"`
	StateFile         string         `json:"state_file"`
	Agents            map[string]int `json:"agents"` // agents by state
	PendingApprovals  int            `json:"pending_approvals"`
	PendingDeliveries int            `json:"pending_deliveries"`
	ParkedDeliveries  int            `json:"parked_deliveries"` // set aside for an operator (deliveries.list)
	LastEventSeq      int64          `json:"last_event_seq"`
}

// Agent is one agent in agents.list.
type Agent struct {
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	Roles       []string  `json:"roles"` // "controller", "reader"
	State       string    `json:"state"` // stopped, starting, running, backoff, failed
	Autostart   bool      `json:"autostart"`
	Held        bool      `json:"held,omitempty"` // stopped by an operator
	Session     string    `json:"session,omitempty"`
	PID         int       `json:"pid,omitempty"`
	Since       time.Time `json:"since,omitzero"`
	Crashes     int       `json:"crashes,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	RetryAt     time.Time `json:"retry_at,omitzero"` // when a failed agent is tried again on its own
	Channels    []Channel `json:"channels"`
}

// Channel is one side of a link, as seen from the agent that holds it.
type Channel struct {
	Peer        string  `json:"peer"`
	Role        string  `json:"role"` // this agent's side: controller (the peer is its Reader) or reader
	MaxCategory int     `json:"max_category"`
	BudgetBits  float64 `json:"budget_bits,omitempty"`
}

// AgentParams names an agent (agents.start, agents.stop).
type AgentParams struct {
	Name string `json:"name"`
}

// PromptParams are the params of agents.prompt.
type PromptParams struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// ApprovalsParams are the params of approvals.list, which answers a page
// of items (ApprovalsPage), oldest first.
type ApprovalsParams struct {
	// Status filters by status; empty means pending, "all" means every
	// item.
	Status string `json:"status,omitempty"`
	// Limit bounds the items of the page: DefaultApprovalsPage when 0,
	// at most MaxApprovalsPage. A page may hold fewer (see
	// ApprovalsPage).
	Limit int `json:"limit,omitempty"`
	// Cursor continues a listing: only items with a seq greater than it,
	// i.e. the Next of the previous page. 0 starts from the oldest.
	Cursor int64 `json:"cursor,omitempty"`
}

// The sizes of an approvals.list page, in items.
const (
	DefaultApprovalsPage = 100
	MaxApprovalsPage     = 1000
)

// ApprovalsPage is the result of approvals.list. Next is set when more
// items follow (when the page was read): pass it as Cursor for the next
// page. It is 0 on the last page.
//
// A page is also cut by size, so that no answer reaches the client's line
// limit (maxResponseLine, 64 MiB) however large the items are: items are
// added while their JSON stays within maxApprovalsPageBytes (8 MiB), and
// the first one always, so a page is at most 8 MiB or one item. One item
// is far below 64 MiB: its response is at most bcp.MaxResponseBytes (1
// MiB) before normalization (NFC at most triples it), its directive at
// most a runtime line (1 MiB), its anomalies one short excerpt per
// detector and field, and JSON escaping at most multiplies text by six
// ("<" becomes "\u003c"): about 25 MiB in the very worst case. A page
// holds fewer than Limit items only when more follow, and Next says so.
//
// Before paging, approvals.list answered a bare array of every item: a
// client of that version reads this object as an error.
type ApprovalsPage struct {
	Items []Approval `json:"items"`
	Next  int64      `json:"next,omitempty"`
}

// IDParams name one approval item (approvals.get).
type IDParams struct {
	ID string `json:"id"`
}

// Approval is one approval item. Response is the exact normalized content
// that approving delivers; SHA256 is its hash, which a decision must
// name.
type Approval struct {
	Seq            int64           `json:"seq"` // the item's place in the queue: approvals.list's cursor
	ID             string          `json:"id"`
	Status         string          `json:"status"`
	Controller     string          `json:"controller"`
	Reader         string          `json:"reader"`
	SubscriptionID string          `json:"subscription_id,omitempty"`
	QueryID        string          `json:"query_id,omitempty"`
	Category       int             `json:"category"`
	Directive      string          `json:"directive,omitempty"`
	Response       json.RawMessage `json:"response"`
	SHA256         string          `json:"sha256"`
	Anomalies      []bcp.Anomaly   `json:"anomalies"`
	BandwidthBits  float64         `json:"bandwidth_bits"`
	CreatedAt      time.Time       `json:"created_at"`
	ExpiresAt      time.Time       `json:"expires_at"`
	DecidedAt      time.Time       `json:"decided_at,omitzero"`
	DecidedBy      string          `json:"decided_by,omitempty"`
	DecidedUID     *int            `json:"decided_uid,omitempty"` // set with DecidedPID (uid 0 is root)
	DecidedPID     int             `json:"decided_pid,omitempty"` // 0 when not known (the gateway's own decisions)
	Reason         string          `json:"reason,omitempty"`
	Note           string          `json:"note,omitempty"`
	// Kind is "subscription" for a Controller's request for a
	// subscription (BCPSubscribe): Response is then the spec it asks
	// for, SubscriptionID the id it gets once approved, BandwidthBits its
	// cost per push, and approving it adds the subscription instead of
	// delivering anything. Empty for a push or an answer.
	Kind      string `json:"kind,omitempty"`
	RequestID string `json:"request_id,omitempty"` // the Controller's request (Kind subscription)
	// Required is how many approvals from distinct operators (uids)
	// release the item, fixed when it was queued; absent means 1.
	Required int `json:"required,omitempty"`
	// Approvals are those counted so far, oldest first: fewer than
	// Required while the item is pending. approvals.approve answers the
	// item still pending when the approval it counted was not the last
	// one needed.
	Approvals []Approver `json:"approvals,omitempty"`
}

// KindSubscription is the Kind of an approval item that is a
// Controller's request for a subscription.
const KindSubscription = "subscription"

// Approver is one operator's approval of an item, counted towards its
// Required: who (as Peer has it, from the socket's peer credentials),
// when, and the note they gave.
type Approver struct {
	User string    `json:"user"`
	UID  int       `json:"uid"`
	PID  int       `json:"pid"`
	At   time.Time `json:"at"`
	Note string    `json:"note,omitempty"`
}

// Progress is the "1 of 2 approvals" of an item that needs more than one
// approval; empty for one that needs one.
func (a Approval) Progress() string {
	if a.Required <= 1 {
		return ""
	}
	return fmt.Sprintf("%d of %d approvals", len(a.Approvals), a.Required)
}

// ApproveParams are the params of approvals.approve. SHA256 is the hash
// of the content the reviewer was shown (Approval.SHA256).
type ApproveParams struct {
	ID     string `json:"id"`
	SHA256 string `json:"sha256"`
	Note   string `json:"note,omitempty"`
}

// RejectParams are the params of approvals.reject. SHA256 is optional for
// a rejection; when given it must match.
type RejectParams struct {
	ID     string `json:"id"`
	SHA256 string `json:"sha256,omitempty"`
	Reason string `json:"reason"`
}

// Peer is who is on the other end of a control connection, from the
// socket's peer credentials. Decisions record it.
type Peer struct {
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	PID  int    `json:"pid"`
	User string `json:"user"` // the uid's user name, or the uid as text
}

// EventsParams are the params of events.list.
type EventsParams struct {
	Since int64    `json:"since"`           // return events with seq > since
	Limit int      `json:"limit,omitempty"` // at most this many; default and cap MaxEventsPage
	Types []string `json:"types,omitempty"` // event kinds; "approval_*" matches a prefix
	// Agent keeps only the events whose Agent is this one (the sender of
	// a message, the Controller of a delivery, the agent of a session;
	// not the Peer).
	Agent string `json:"agent,omitempty"`
}

// MaxEventsPage caps one page of events.list.
const MaxEventsPage = 1000

// EventsPage is the result of events.list. Next is the cursor to pass as
// since for the following page (the last seq returned, or since if none).
//
// Events older than the gateway's retention (bcpgw run --retain) are
// pruned, oldest first. When some after Since were, PrunedBefore is the
// seq before which none is left (the oldest kept; Events start there),
// and Notice says so: "events before N were pruned ...".
type EventsPage struct {
	Events       []Event `json:"events"`
	Next         int64   `json:"next"`
	PrunedBefore int64   `json:"pruned_before,omitempty"`
	Notice       string  `json:"notice,omitempty"`
}

// Event is one audit event (PROTOCOL.md section 7).
type Event struct {
	Seq      int64     `json:"seq"`
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Agent    string    `json:"agent,omitempty"`
	Peer     string    `json:"peer,omitempty"`
	Code     string    `json:"code,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	Category int       `json:"category,omitempty"`
	Bits     float64   `json:"bits,omitempty"`
	Ref      string    `json:"ref,omitempty"`
	// Payload is the (truncated) rejected input kept for forensics.
	Payload string `json:"payload,omitempty"`
}

// SubscribeParams are the params of subscribe. Events of the given types
// (all when empty) with seq > Since are sent as notifications, then every
// new one as it is stored. Without Since, only events stored after the
// subscription.
type SubscribeParams struct {
	Types []string `json:"types,omitempty"`
	Since *int64   `json:"since,omitempty"`
	Agent string   `json:"agent,omitempty"` // only events about this agent, as in EventsParams
}

// SubscribeResult is the result of subscribe. Cursor is the seq after
// which notifications start.
type SubscribeResult struct {
	Subscription string `json:"subscription"`
	Cursor       int64  `json:"cursor"`
	// PrunedBefore and Notice are set when events after Since were
	// pruned, as in EventsPage.
	PrunedBefore int64  `json:"pruned_before,omitempty"`
	Notice       string `json:"notice,omitempty"`
}

// UnsubscribeParams are the params of unsubscribe.
type UnsubscribeParams struct {
	Subscription string `json:"subscription"`
}

// EventNotification is the params of an event notification.
type EventNotification struct {
	Subscription string `json:"subscription"`
	Event        Event  `json:"event"`
}

// MaxSubscriptions bounds the subscriptions of one connection.
const MaxSubscriptions = 16

// ReloadResult is the result of reload.
type ReloadResult struct {
	Changed bool     `json:"changed"`
	Agents  int      `json:"agents"`
	Summary []string `json:"summary,omitempty"` // what changed, one line each
}

// ReportParams are the params of report.
type ReportParams struct {
	Agent string `json:"agent,omitempty"` // one Controller; all when empty
}

// Report is the exposure report: for each Controller session, the bits of
// Reader-originated information that reached it.
type Report struct {
	Sessions []SessionExposure `json:"sessions"`
	// Subscriptions is what each subscription carried, by outcome.
	Subscriptions []SubscriptionFigures `json:"subscriptions"`
}

// SubscriptionFigures is what one subscription carried since the figures
// began: pushes by outcome, refusals by code, and the bits charged.
type SubscriptionFigures struct {
	Controller string  `json:"controller"`
	Reader     string  `json:"reader"`
	ID         string  `json:"id"`
	Accepted   int64   `json:"accepted"`   // stored for delivery or held for review
	Held       int64   `json:"held"`       // of those, held for an operator
	Filtered   int64   `json:"filtered"`   // accepted but kept from the Controller by its filter
	Superseded int64   `json:"superseded"` // accepted, then replaced by a newer push (debounce)
	Refused    int64   `json:"refused"`
	Delivered  int64   `json:"delivered"` // acknowledged by the Controller (a batch is one delivery)
	Bits       float64 `json:"bits"`      // charged for the accepted pushes, less the superseded ones
	// RefusedBy counts the refusals by error code.
	RefusedBy map[string]int64 `json:"refused_by"`
}

// SessionExposure is what one Controller session was exposed to. A
// delivery counts once for every session it was sent to: a session that
// crashed before acknowledging a delivery may still have read it.
type SessionExposure struct {
	Agent     string            `json:"agent"`
	Session   string            `json:"session"`
	StartedAt time.Time         `json:"started_at"`
	EndedAt   time.Time         `json:"ended_at,omitzero"`
	Bits      float64           `json:"bits"`
	ByCat     map[int]float64   `json:"by_category"` // bits by category (keys "1", "2", "3" in JSON)
	Channels  []ChannelExposure `json:"channels"`
}

// ChannelExposure is the exposure through one channel in one category.
type ChannelExposure struct {
	Reader     string  `json:"reader"`
	Category   int     `json:"category"`
	Deliveries int     `json:"deliveries"`
	Bits       float64 `json:"bits"`
}
