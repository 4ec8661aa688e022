package gateway

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// A subscription's delivery policy (agents.Subscription: filter,
// rate_limit) applies to a push that validated, in this order:
//
//  1. the filter, on the normalized values (Verdict.filter, part of
//     ValidatePublish, so that bcpgw check sees it too). A push it does
//     not let through is accepted and recorded as a push_filtered event
//     (recordFiltered), then the Reader is told; it is not delivered, not
//     charged, and not counted by the rate limit: the limit is on what
//     reaches the Controller, and a stream of pushes the Controller does
//     not want must not use up the room of the one it does;
//  2. the rate limit (subscriptionRate): at most Limit accepted pushes in
//     any Window, counted in the gateway's rateLimiter beside the channel
//     rates, on the gateway's clock. A push over it is refused with
//     rate_limited, through the ordinary refusal path (audited with its
//     payload, nothing charged);
//  3. then the budgets, as for every push. A push they refuse gives its
//     rate slot back.
//
// The counts live in memory: a reload applies a changed limit at once to
// what was counted, a restart starts with empty windows (as the channel
// rates do).

// replier is a pending answer to a Reader (the session's PendingReply).
type replier interface{ Send(msg any) }

// filter applies the subscription's filter to an accepted verdict.
func (v *Verdict) filter() {
	if !v.Accepted() || v.Subscription.Filter == nil {
		return
	}
	ok, err := v.Subscription.Filter.Match(v.Result.Response)
	if !ok {
		v.Filtered, v.FilterErr = true, err
	}
}

// filteredDetail is what the Reader hears about a filtered push.
func filteredDetail(v Verdict) string {
	s := v.Subscription
	why := "it does not match the delivery filter"
	if v.FilterErr != nil {
		why = "the delivery filter could not be evaluated on it, which counts as no match"
	}
	return fmt.Sprintf("Accepted but not delivered to controller %s: %s of subscription '%s'; nothing was charged", s.Controller, why, s.ID)
}

// subscriptionRate reserves a place for an accepted, unfiltered verdict
// in its subscription's rate limit at now, or refuses it (rate_limited).
// The zero slot when the subscription has no limit or v is not admitted.
func (rl *rateLimiter) subscriptionRate(v *Verdict, now time.Time) rateSlot {
	sub := v.Subscription
	if !v.Accepted() || v.Filtered || sub.RateLimit == nil {
		return rateSlot{}
	}
	k := rateKey{controller: sub.Controller, reader: sub.Reader, sub: sub.ID}
	slot, full, wait := rl.take(now, []window{{k, *sub.RateLimit}})
	if full >= 0 {
		v.Result.Route, v.Result.Response = bcp.RouteReject, nil
		v.Err = bcp.Errorf(bcp.RateLimited, "Rate limit of subscription '%s' from controller '%s' reached (%s); nothing was charged; the next push is allowed in %s",
			sub.ID, sub.Controller, sub.RateLimit, wait)
	}
	return slot
}

// recordFiltered records a filtered push durably, as a push_filtered
// event with its normalized values, and then tells the Reader: accepted,
// not delivered. If the store cannot keep the record, the Reader hears
// the push refused (controller_unavailable), as for any push the gateway
// could not keep.
func (g *Gateway) recordFiltered(reader string, v Verdict, reply replier) {
	sub := v.Subscription
	detail := v.Detail()
	if v.FilterErr != nil {
		g.log.Warn("a subscription's filter failed on a push; it was not delivered", "reader", reader, "controller", sub.Controller,
			"subscription", sub.ID, "error", v.FilterErr)
		detail += fmt.Sprintf(" (filter error: %v)", v.FilterErr)
	}
	values, _ := json.Marshal(v.Result.Response) // a normalized response holds JSON values only
	ev := store.Event{
		Time: g.now(), Kind: "push_filtered", Agent: reader, Peer: sub.Controller, Ref: sub.ID, Subscription: sub.ID,
		Category: int(sub.Spec.Category), Detail: detail, Payload: values,
	}
	answer := runtime.ValidationResult{Type: runtime.TypeValidationResult, SubscriptionID: sub.ID}
	g.cfg.Store.AppendThen([]store.Event{ev}, func(err error) {
		if err != nil {
			g.log.Error("could not record a filtered push; refusing it", "reader", reader, "controller", sub.Controller, "error", err)
			e := bcp.Errorf(bcp.ControllerUnavailable, "The gateway could not record this push for '%s' (%v); nothing was delivered", sub.Controller, err)
			g.metrics.publish("refused", e)
			answer.Detail = e.Error()
			reply.Send(answer)
			return
		}
		g.metrics.publish("filtered", nil)
		g.metrics.subscriptionFigure(ev)
		answer.Success, answer.Filtered, answer.Detail = true, true, v.Detail()
		reply.Send(answer)
	})
}
