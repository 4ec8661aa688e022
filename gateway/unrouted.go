package gateway

import (
	"fmt"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/runtime"
)

// Unrouted answers the BCP messages of a gateway that does not route yet
// (push delivery and queries arrive with the router). A publish is judged
// exactly as the router will judge it, so a Reader learns about
// validation problems, but even a valid one is refused with
// controller_unavailable: it is never reported as delivered when it was
// not. Queries are refused the same way.
func Unrouted(set *agents.Set, audit Auditor) func(*Session, runtime.Envelope) {
	return func(s *Session, env runtime.Envelope) {
		switch env.Type {
		case runtime.TypeResponse:
			var r runtime.Response
			if err := env.Decode(&r); err != nil {
				return
			}
			res := runtime.ValidationResult{Type: runtime.TypeValidationResult, QueryID: r.QueryID, SubscriptionID: r.SubscriptionID}
			code := bcp.QueryNotFound
			res.Detail = fmt.Sprintf("%s: No pending query '%s'", code, r.QueryID)
			if r.SubscriptionID != "" {
				v := JudgePublish(set, Publish{Reader: s.Name(), Controller: r.Controller, SubscriptionID: r.SubscriptionID, Response: r.Response}, FreshBudgets)
				code = bcp.ControllerUnavailable
				res.Detail = fmt.Sprintf("%s: Controller '%s' is unavailable: this gateway validates publishes but does not deliver them yet", code, r.Controller)
				if v.Err != nil {
					code, res.Detail = v.Err.Code, v.Err.Error()
				}
			}
			audit.Audit(Event{Agent: s.Name(), Kind: "refused", Code: string(code), Detail: res.Detail, Payload: truncatePayload(env.Raw)})
			_ = s.Reply(res)
		case runtime.TypeQueryRequest:
			var q runtime.QueryRequest
			if err := env.Decode(&q); err != nil {
				return
			}
			reason := fmt.Sprintf("%s: queries are not routed by this gateway yet", bcp.ControllerUnavailable)
			audit.Audit(Event{Agent: s.Name(), Kind: "refused", Code: string(bcp.ControllerUnavailable), Detail: reason, Payload: truncatePayload(env.Raw)})
			_ = s.Reply(runtime.QueryError{Type: runtime.TypeQueryError, RequestID: q.RequestID, ToAgent: q.To, Reason: reason})
		}
	}
}
