package agents

import (
	"time"

	"gopkg.in/yaml.v3"
)

// ApprovalPolicy is how the approval items of a subscription, or of the
// answers on a channel, are decided (the approvals key):
//
//	approvals: {required: 2, ttl: 2h}
//
// Only items that go to the approval queue at all (Cat-3, and Cat-2 whose
// anomalies route them to review) are affected. The gateway fixes an
// item's policy when it queues it, as it fixes its content hash: a reload
// that changes the policy applies to items queued after it.
type ApprovalPolicy struct {
	// Required is how many operators (distinct uids) must approve an item
	// before it is delivered; a rejection by any one of them ends it.
	// 0 means unset: one approval, or the channel's Required for a
	// subscription.
	Required int
	// TTL is how long an item waits for its approvals before it expires
	// (approval_expired). 0 means unset: the gateway's --approval-ttl, or
	// the channel's TTL for a subscription.
	TTL time.Duration
}

// or fills the unset fields of p from q.
func (p ApprovalPolicy) or(q ApprovalPolicy) ApprovalPolicy {
	if p.Required == 0 {
		p.Required = q.Required
	}
	if p.TTL == 0 {
		p.TTL = q.TTL
	}
	return p
}

// Approvals is the approval policy of the channel's items: of pushes on
// subscription subID, or of answers to queries when subID is empty. A
// subscription's approvals key overrides the channel's field by field;
// the channel's (on its Controller side) covers answers and every
// subscription that leaves a field unset. Zero fields remain unset: the
// gateway's defaults apply (one approval, --approval-ttl).
func (l *Link) Approvals(subID string) ApprovalPolicy {
	p := l.ControllerSide.Approvals
	if subID == "" {
		return p
	}
	for _, s := range l.ControllerSide.Subscriptions {
		if s.ID == subID {
			return s.Approvals.or(p)
		}
	}
	return p
}

// minApprovalTTL bounds ttl from below: an item must be on screen long
// enough for someone to read it.
const minApprovalTTL = time.Second

// approvals decodes an approvals map: {required: N, ttl: DURATION}.
func (d *decoder) approvals(n *yaml.Node, path string) ApprovalPolicy {
	var p ApprovalPolicy
	d.mapping(n, path, fields{
		"required": func(n *yaml.Node, p2 string) {
			if v, ok := d.atLeast(n, p2, 1); ok {
				p.Required = v
			}
		},
		"ttl": func(n *yaml.Node, p2 string) {
			s, ok := d.str(n, p2)
			if !ok {
				return
			}
			v, err := time.ParseDuration(s)
			switch {
			case err != nil:
				d.fail(n, p2, "%q is not a duration (examples: 30m, 2h, 72h)", s)
			case v < minApprovalTTL:
				d.fail(n, p2, "must be at least %s, got %q: there is no \"never\"; an item waits at most its ttl", minApprovalTTL, s)
			default:
				p.TTL = v
			}
		},
	})
	return p
}

// channelApprovals decodes a channel's approvals into c: only the
// Controller's side of a channel has a queue to decide.
func (d *decoder) channelApprovals(n *yaml.Node, path string, c *Channel) {
	p := d.approvals(n, path)
	if c.Role == RoleReader {
		d.fail(n, path, "only the controller side of a channel sets approvals (this side is the reader; set it in the controller's definition)")
		return
	}
	c.Approvals = p
}
