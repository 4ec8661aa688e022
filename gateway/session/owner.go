package session

import (
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// Owner is what a session reports to: in bcpgw, the gateway, which routes
// the BCP messages of every session and keeps the audit log. Its methods
// are called on the session's own goroutine, in the order of the lines
// the runtime wrote, so they must not block.
type Owner interface {
	// Audit records one of the session's events.
	Audit(store.Event)
	// Holds reports whether agent holds tool under the definitions in
	// force now. A session may use a BCP tool only while both its own
	// definition (the one it was started with) and the current one grant
	// it: a reload that takes a tool away takes it from running sessions
	// at once.
	Holds(agent, tool string) bool
	// Message receives a BCP message that passed the session's rights
	// check (the tool its type needs), decoded once. The owner answers it
	// with s.Reply or s.ReplyLater.
	Message(s *Session, m Message)
}

// SupervisorOwner is what a Supervisor reports to, beyond what its
// sessions do: each session that became ready, each crash and each
// restart.
type SupervisorOwner interface {
	Owner
	// Started is told about every session that became ready, before
	// anyone else can use it.
	Started(s *Session)
	// Crashed is told each time an agent's runtime ended without being
	// asked to, or failed to start.
	Crashed(agent string)
	// Restarted is told each time an agent's session is started again,
	// and why: "crash", "reload" or "retry".
	Restarted(agent, cause string)
}

// Message is a runtime's BCP message as the session decoded it: a
// Publish, an Answer, a QueryRequest or a SubscribeRequest. The set is
// closed.
type Message interface {
	// Line is the line as the runtime wrote it, for the audit log.
	Line() []byte
	message()
}

// Publish is a bcp_response to a subscription (needs BCPPublish).
type Publish struct {
	runtime.Response
	line []byte
}

// Answer is a bcp_response to a query (needs BCPRespond).
type Answer struct {
	runtime.Response
	line []byte
}

// QueryRequest is a bcp_query_request (needs BCPQuery). Its spec is
// decoded strictly: when that fails, SpecErr says why and Request still
// names the request, so that the refusal can answer it.
type QueryRequest struct {
	Request runtime.QueryRequest
	SpecErr *runtime.SpecError
	line    []byte
}

// SubscribeRequest is a bcp_subscribe_request (needs BCPSubscribe),
// decoded like a QueryRequest: SpecErr says why its spec was refused.
type SubscribeRequest struct {
	Request runtime.SubscribeRequest
	SpecErr *runtime.SpecError
	line    []byte
}

func (m Publish) Line() []byte          { return m.line }
func (m Answer) Line() []byte           { return m.line }
func (m QueryRequest) Line() []byte     { return m.line }
func (m SubscribeRequest) Line() []byte { return m.line }
func (Publish) message()                {}
func (Answer) message()                 {}
func (QueryRequest) message()           {}
func (SubscribeRequest) message()       {}

// NewPublish, NewAnswer and NewQueryRequest make the messages a session
// would hand its owner, for owners' tests: the fields that carry the line
// are unexported so that only a session (or a test that says so) makes
// one.
func NewPublish(r runtime.Response, line []byte) Publish { return Publish{Response: r, line: line} }
func NewAnswer(r runtime.Response, line []byte) Answer   { return Answer{Response: r, line: line} }
func NewQueryRequest(q runtime.QueryRequest, specErr *runtime.SpecError, line []byte) QueryRequest {
	return QueryRequest{Request: q, SpecErr: specErr, line: line}
}

// logOwner is the owner of sessions started without one (tests, tools):
// it logs their events, lets the definition alone decide rights, and
// refuses BCP messages as not routed.
type logOwner struct{ log hclog.Logger }

func (o logOwner) Audit(e store.Event) {
	o.log.Info("event", "agent", e.Agent, "kind", e.Kind, "code", e.Code, "detail", e.Detail)
}

func (logOwner) Holds(string, string) bool { return true }

func (logOwner) Message(s *Session, m Message) {
	typ := runtime.TypeResponse
	switch m.(type) {
	case QueryRequest:
		typ = runtime.TypeQueryRequest
	case SubscribeRequest:
		typ = runtime.TypeSubscribeRequest
	}
	s.refuse(bcp.ProtocolError, fmt.Sprintf("%s is not routed by this gateway", typ), m.Line())
}

func (logOwner) Started(*Session)         {}
func (logOwner) Crashed(string)           {}
func (logOwner) Restarted(string, string) {}
