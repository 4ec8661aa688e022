package gateway

import (
	"fmt"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
)

// Publish is a Reader's bcp_response against a subscription. Reader comes
// from the pipe the message arrived on, never from the message itself.
type Publish struct {
	Reader         string
	Controller     string
	SubscriptionID string
	Response       []byte // raw JSON, exactly as the Reader sent it
}

// Remaining is what is left of the two budgets a push is charged against:
// the Controller's session pool and the Reader's per-session cap on the
// channel.
type Remaining struct {
	Controller float64
	Reader     float64
}

// FreshBudgets returns the budgets of new sessions on both ends of l.
func FreshBudgets(l *agents.Link) Remaining {
	return Remaining{
		Controller: float64(l.ControllerSide.BudgetBits),
		Reader:     float64(l.ReaderSide.BudgetBits),
	}
}

// Verdict is the decision on one publish.
type Verdict struct {
	// Subscription is the subscription published to; nil if none matched.
	Subscription *agents.Subscription
	// Result holds the normalized response, anomalies and route.
	Result bcp.Result
	// Err is the refusal, or nil when the publish is accepted (Route
	// deliver or review).
	Err *bcp.Error
	// Filtered is set on an accepted publish that the subscription's
	// filter kept from the Controller: it is recorded, not delivered and
	// not charged. FilterErr is why, when the filter failed rather than
	// said no (a failure never delivers).
	Filtered  bool
	FilterErr error
}

// Accepted reports whether the publish goes on to delivery or review.
func (v Verdict) Accepted() bool { return v.Err == nil }

// Charged returns the bits the publish costs: the subscription's bits
// (computed once, at load) when accepted, nothing when refused.
func (v Verdict) Charged() float64 {
	if v.Err != nil || v.Filtered {
		return 0
	}
	return v.Subscription.Bits
}

// Detail describes the verdict: the refusal with its code, or where the
// push goes next. A refusal or a delivery is what the Reader's
// bcp_validation_result says; a push routed to review is answered only
// once the operator has decided.
func (v Verdict) Detail() string {
	if v.Err != nil {
		return v.Err.Error()
	}
	s := v.Subscription
	if v.Filtered {
		return filteredDetail(v)
	}
	if v.Result.Route == bcp.RouteReview {
		return fmt.Sprintf("Queued for operator review before delivery to controller %s (Cat-%d, %s)", s.Controller, s.Spec.Category, bcp.FormatBits(s.Bits))
	}
	return successDetail(s.Controller, "", s.Spec.Category, s.Bits)
}

// JudgePublish runs every check the gateway applies to a publish, in
// order: the Reader's BCPPublish right, the subscription, validation, the
// subscription's filter, then the budgets left(link) reports. The
// subscription's rate limit, which depends on the pushes before, is not
// among them. It does not charge anything: the caller
// charges Verdict.Charged() when it accepts the verdict. bcpgw check uses
// it with FreshBudgets; the gateway runs the same two steps, the second
// under its budget lock together with the charge (budgets.admitPush).
func JudgePublish(set *agents.Set, p Publish, left func(*agents.Link) Remaining) Verdict {
	v := ValidatePublish(set, p)
	if v.Accepted() {
		v.Afford(left(set.Link(p.Controller, p.Reader)))
	}
	return v
}

// ValidatePublish runs the checks of a publish that need no budget: the
// Reader's BCPPublish right, the subscription, validation and the
// subscription's filter, the costly part, which the gateway runs without
// holding any lock.
func ValidatePublish(set *agents.Set, p Publish) Verdict {
	refuse := func(code bcp.Code, format string, args ...any) Verdict {
		return Verdict{Result: bcp.Result{Route: bcp.RouteReject}, Err: bcp.Errorf(code, format, args...)}
	}
	reader := set.Agent(p.Reader)
	if reader == nil || !reader.HasTool(agents.ToolPublish) {
		return refuse(bcp.ToolNotAllowed, "Agent '%s' does not have the %s tool", p.Reader, agents.ToolPublish)
	}
	sub := set.Subscription(p.Controller, p.Reader, p.SubscriptionID)
	if sub == nil {
		return refuse(bcp.SubscriptionNotFound, "No active subscription '%s' from controller '%s'", p.SubscriptionID, p.Controller)
	}
	res, err := bcp.Validate(sub.Spec, p.Response)
	v := Verdict{Subscription: sub, Result: res}
	if err != nil {
		v.Err = asBCPError(err)
	}
	v.filter() // subscription_policy.go
	return v
}

// Afford refuses an accepted verdict with budget_exhausted when either
// budget in left is short of the subscription's bits. A refused or
// filtered verdict is left as it is: it costs nothing.
func (v *Verdict) Afford(left Remaining) {
	if !v.Accepted() || v.Filtered {
		return
	}
	sub := v.Subscription
	for _, side := range []struct {
		name string
		left float64
	}{{sub.Controller + "'s session pool", left.Controller}, {"this " + sub.Reader + " session", left.Reader}} {
		if sub.Bits > side.left {
			v.Result.Route, v.Result.Response = bcp.RouteReject, nil
			v.Err = bcp.Errorf(bcp.BudgetExhausted, "Bandwidth budget exhausted for channel to '%s': %s costs %s, %s has %s left",
				sub.Controller, sub.ID, bcp.FormatBits(sub.Bits), side.name, bcp.FormatBits(side.left))
			return
		}
	}
}
