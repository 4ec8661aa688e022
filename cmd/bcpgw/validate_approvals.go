package main

import (
	"fmt"
	"io"

	"github.com/bcpgw/bcpgw/agents"
)

// printApprovals writes the approval policies of a channel's items, as
// bcpgw validate's summary shows them under the channel, when its
// Controller set any (approvals:): one line for the answers to queries
// and one per subscription, each with what applies after inheritance
// ("    approvals of digest: 2 operators (distinct uids), ttl 4h"). Nothing when all
// are the gateway's defaults.
func printApprovals(w io.Writer, l *agents.Link) {
	if !hasApprovals(l) {
		return
	}
	fmt.Fprintf(w, "    approvals of answers: %s\n", approvalsText(l.Approvals("")))
	for _, s := range l.ControllerSide.Subscriptions {
		fmt.Fprintf(w, "    approvals of %s: %s\n", s.ID, approvalsText(l.Approvals(s.ID)))
	}
}

// approvalsText is a policy in words, defaults named: "2 operators
// (distinct uids), ttl 4h", "1 operator, ttl --approval-ttl".
func approvalsText(p agents.ApprovalPolicy) string {
	n := max(p.Required, 1)
	who := "1 operator"
	if n > 1 {
		who = fmt.Sprintf("%d operators (distinct uids)", n)
	}
	ttl := "--approval-ttl"
	if p.TTL > 0 {
		ttl = agents.ShortDuration(p.TTL)
	}
	return who + ", ttl " + ttl
}

// hasApprovals reports whether l's Controller set an approval policy on
// the channel or on any of its subscriptions.
func hasApprovals(l *agents.Link) bool {
	set := l.ControllerSide.Approvals != (agents.ApprovalPolicy{})
	for _, s := range l.ControllerSide.Subscriptions {
		set = set || s.Approvals != (agents.ApprovalPolicy{})
	}
	return set
}

// jsonApprovals is an approval policy in validate --json: required, and
// ttl as a Go duration ("4h0m0s"); no ttl means --approval-ttl.
type jsonApprovals struct {
	Required int    `json:"required"`
	TTL      string `json:"ttl,omitempty"`
}

// approvalsReport is the policy of l's answers (subID empty) or of
// subscription subID, after inheritance, when l's Controller set any;
// nil otherwise, as the text summary prints nothing then.
func approvalsReport(l *agents.Link, subID string) *jsonApprovals {
	if l == nil || !hasApprovals(l) {
		return nil
	}
	p := l.Approvals(subID)
	r := &jsonApprovals{Required: max(p.Required, 1)}
	if p.TTL > 0 {
		r.TTL = p.TTL.String()
	}
	return r
}
