package gateway

import (
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// The BCP messages of runtimes, as the gateway first sees them: decoded,
// ids checked, and handed to the publish, answer (admit.go), query
// (query.go) or subscription request (subscribe.go) path; refusals are
// audited here.

// onMessage routes the BCP messages a session let through its rights
// check (the tool for the message type), decoded once by the session. It
// runs on the session's goroutine, so it never waits: the answers that
// depend on a commit are sent in order once it is durable
// (Session.ReplyLater).
func (g *Gateway) onMessage(s *session.Session, m session.Message) {
	switch m := m.(type) {
	case session.Publish:
		if g.validIDs(s, m.Line(), m.Response) {
			g.publish(s, m.Line(), m.Response)
		}
	case session.Answer:
		if g.validIDs(s, m.Line(), m.Response) {
			g.answer(s, m.Line(), m.Response)
		}
	case session.QueryRequest:
		q := m.Request
		if field := badID(q.RequestID, q.To); field >= 0 {
			e := bcp.Errorf(bcp.ProtocolError, "%s is not a valid id: %s", []string{"request_id", "to"}[field], runtime.IDRule)
			g.refused(s.Name(), "", e, m.Line(), "")
			g.replyQueryError(s, runtime.QueryError{Type: runtime.TypeQueryError, RequestID: q.RequestID, ToAgent: q.To, Reason: e.Error()})
			return
		}
		g.query(s, m.Line(), q, m.SpecErr)
	case session.SubscribeRequest:
		g.subscribeRequest(s, m)
	}
}

// validIDs checks the ids of a bcp_response, and refuses it if one is
// not valid.
func (g *Gateway) validIDs(s *session.Session, line []byte, r runtime.Response) bool {
	field := badID(r.SubscriptionID, r.Controller, r.QueryID)
	if field < 0 {
		return true
	}
	e := bcp.Errorf(bcp.ProtocolError, "%s is not a valid id: %s", []string{"subscription_id", "controller", "query_id"}[field], runtime.IDRule)
	g.refused(s.Name(), "", e, line, "")
	s.Reply(runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: r.SubscriptionID, QueryID: r.QueryID, Detail: e.Error()})
	return false
}

// badID returns the index of the first id that breaks runtime.IDRule (an
// empty id is left to the later checks), or -1.
func badID(ids ...string) int {
	for i, id := range ids {
		if id != "" && !runtime.ValidID(id) {
			return i
		}
	}
	return -1
}

// refused audits a refusal, keeping the offending payload.
func (g *Gateway) refused(agent, peer string, e *bcp.Error, payload []byte, ref string) {
	g.event(store.Event{Kind: "refused", Agent: agent, Peer: peer, Code: string(e.Code), Detail: e.Error(), Ref: ref, Payload: store.ClipPayload(payload)})
}

// asBCPError returns err as a *bcp.Error; validation only returns those.
func asBCPError(err error) *bcp.Error {
	if e, ok := err.(*bcp.Error); ok {
		return e
	}
	return &bcp.Error{Code: bcp.ValidationFailed, Detail: err.Error()}
}
