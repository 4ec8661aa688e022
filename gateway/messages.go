package gateway

import (
	"errors"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// The BCP messages of runtimes, as the gateway first sees them: decoded,
// ids checked, and handed to the publish, answer (admit.go) or query
// (query.go) path; refusals are audited here.

// onMessage routes the BCP messages a session let through its rights
// check (the tool for the message type). It runs on the session's
// goroutine, so it never waits: the answers that depend on a commit are
// sent in order once it is durable (Session.ReplyLater).
func (g *Gateway) onMessage(s *Session, env runtime.Envelope) {
	switch env.Type {
	case runtime.TypeResponse:
		var r runtime.Response
		if err := env.Decode(&r); err != nil {
			s.refuse(bcp.ProtocolError, err.Error(), env.Raw)
			return
		}
		if field := badID(r.SubscriptionID, r.Controller, r.QueryID); field >= 0 {
			e := bcp.Errorf(bcp.ProtocolError, "%s is not a valid id: %s", []string{"subscription_id", "controller", "query_id"}[field], idRule)
			g.refused(s.Name(), "", e, env.Raw, "")
			s.Reply(runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: r.SubscriptionID, QueryID: r.QueryID, Detail: e.Error()})
			return
		}
		if r.SubscriptionID != "" {
			g.publish(s, env, r)
		} else {
			g.answer(s, env, r)
		}
	case runtime.TypeQueryRequest:
		// The spec is decoded strictly: a refused spec still names the
		// request, and is answered with bcp_query_error once the channel
		// and category checks have passed.
		q, err := runtime.DecodeQueryRequest(env.Raw)
		var specErr *runtime.SpecError
		if err != nil && !errors.As(err, &specErr) {
			s.refuse(bcp.ProtocolError, err.Error(), env.Raw)
			return
		}
		if field := badID(q.RequestID, q.To); field >= 0 {
			e := bcp.Errorf(bcp.ProtocolError, "%s is not a valid id: %s", []string{"request_id", "to"}[field], idRule)
			g.refused(s.Name(), "", e, env.Raw, "")
			g.replyQueryError(s, runtime.QueryError{Type: runtime.TypeQueryError, RequestID: q.RequestID, ToAgent: q.To, Reason: e.Error()})
			return
		}
		g.query(s, env, q, specErr)
	}
}

// idRule is what every id a runtime sends must look like. Agent names,
// subscription ids and the gateway's query ids all fit it; bounding ids
// at the boundary keeps a hostile runtime's megabyte "id" out of events,
// logs and replies.
const idRule = "at most 128 of A-Z, a-z, 0-9, '.', '_', ':' and '-'"

// badID returns the index of the first id that breaks idRule (an empty id
// is left to the later checks), or -1.
func badID(ids ...string) int {
	for i, id := range ids {
		if len(id) > 128 {
			return i
		}
		for _, c := range []byte(id) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
				return i
			}
		}
	}
	return -1
}

// refused audits a refusal, keeping the offending payload.
func (g *Gateway) refused(agent, peer string, e *bcp.Error, payload []byte, ref string) {
	g.event(store.Event{Kind: "refused", Agent: agent, Peer: peer, Code: string(e.Code), Detail: e.Error(), Ref: ref, Payload: truncatePayload(payload)})
}

// asBCPError returns err as a *bcp.Error; validation only returns those.
func asBCPError(err error) *bcp.Error {
	if e, ok := err.(*bcp.Error); ok {
		return e
	}
	return &bcp.Error{Code: bcp.ValidationFailed, Detail: err.Error()}
}
