package agents

import (
	"fmt"
	"slices"

	"github.com/bcpgw/bcpgw/bcp"
)

// A Controller holding BCPSubscribe may ask at run time for a subscription
// of its own; an operator approves it, and the gateway keeps it in its
// store, never in a definition file. The gateway then routes with the
// definitions plus the approved subscriptions (WithSubscriptions), so an
// approved subscription is looked up, announced, validated, charged and
// revoked exactly like a declared one, and is held to the same rules
// (CheckSubscription): the Controller asks, the operator's approval
// decides, the Reader only decides when to push.

// RefusedSubscription is an approved subscription that WithSubscriptions
// left out, and why (a section-6 code and a detail).
type RefusedSubscription struct {
	Sub *Subscription
	Err *bcp.Error
}

// CheckSubscription reports why sub, asked for at run time, cannot join
// s, or nil. It applies the rules of a declared subscription: a valid id
// that no subscription of the channel already has (declared or
// approved), a channel from sub.Controller to sub.Reader, a category
// within the channel's effective max_category, a valid spec, and bits per
// push within both sides' budget_bits (a declared subscription over a
// budget is only warned about; one asked for at run time is refused,
// since it could never be delivered). The code says which rule failed.
func (s *Set) CheckSubscription(sub *Subscription) *bcp.Error {
	return s.checkSubscription(sub, nil)
}

// checkSubscription is CheckSubscription, with also the subscriptions
// accepted so far by WithSubscriptions counted as taken ids.
func (s *Set) checkSubscription(sub *Subscription, also []*Subscription) *bcp.Error {
	if !subscriptionID.MatchString(sub.ID) {
		return bcp.Errorf(bcp.ProtocolError, "subscription id %q must match %s", sub.ID, subscriptionID)
	}
	link := s.Link(sub.Controller, sub.Reader)
	if link == nil {
		return bcp.Errorf(bcp.NoChannel, "No channel from controller '%s' to reader '%s'", sub.Controller, sub.Reader)
	}
	if eff := link.MaxCategory(); !sub.Spec.Category.Valid() || sub.Spec.Category > eff {
		return bcp.Errorf(bcp.CategoryNotAllowed, "Category %d is not allowed on the channel to '%s' (max_category %d)", sub.Spec.Category, sub.Reader, eff)
	}
	if problems := sub.Spec.Problems(); len(problems) > 0 {
		msgs := make([]string, 0, len(problems))
		for _, p := range problems {
			msgs = append(msgs, p.String())
		}
		return bcp.Errorf(bcp.ValidationFailed, "Subscription spec is not valid: %s", joinProblems(msgs))
	}
	bits := bcp.Bits(sub.Spec)
	for _, side := range []*Channel{link.ControllerSide, link.ReaderSide} {
		if side.BudgetBits > 0 && bits > float64(side.BudgetBits) {
			return bcp.Errorf(bcp.BudgetExhausted, "Subscription costs %s per push, more than the channel's budget_bits %d: it could never be delivered",
				bcp.FormatBits(bits), side.BudgetBits)
		}
	}
	taken := func(o *Subscription) bool {
		return o.ID == sub.ID && o.Controller == sub.Controller && o.Reader == sub.Reader
	}
	if s.Subscription(sub.Controller, sub.Reader, sub.ID) != nil || slices.ContainsFunc(also, taken) {
		return bcp.Errorf(bcp.ProtocolError, "Subscription '%s' already exists on the channel from '%s' to '%s'", sub.ID, sub.Controller, sub.Reader)
	}
	return nil
}

// joinProblems lists at most eight problems of a spec.
func joinProblems(msgs []string) string {
	const most = 8
	out := ""
	for i, m := range msgs {
		if i == most {
			return out + fmt.Sprintf("; and %d more", len(msgs)-most)
		}
		if i > 0 {
			out += "; "
		}
		out += m
	}
	return out
}

// WithSubscriptions returns a copy of s to which the approved
// subscriptions extra are added, each checked as CheckSubscription does
// (against the definitions and the subscriptions added before it), and
// those refused, with why. s itself is not changed: the definitions and
// channels that gain a subscription are copied, the others shared. Each
// added subscription is a copy with Approved set, its Bits computed and
// its spec completed. Without extra, s itself is returned.
func (s *Set) WithSubscriptions(extra []*Subscription) (*Set, []RefusedSubscription) {
	var refused []RefusedSubscription
	var added []*Subscription
	for _, sub := range extra {
		if e := s.checkSubscription(sub, added); e != nil {
			refused = append(refused, RefusedSubscription{Sub: sub, Err: e})
			continue
		}
		c := *sub
		c.Approved = true
		c.Spec = c.Spec.Complete()
		c.Bits = bcp.Bits(c.Spec)
		c.RateLimit, c.Filter, c.Debounce, c.Batch = nil, nil, nil, nil
		added = append(added, &c)
	}
	if len(added) == 0 {
		return s, refused
	}
	out := *s
	// The controllers that gain subscriptions, copied with their channels.
	copies := map[string]*Definition{}
	for _, sub := range added {
		d := copies[sub.Controller]
		if d == nil {
			cp := *s.Agent(sub.Controller)
			cp.Channels = slices.Clone(cp.Channels)
			d = &cp
			copies[sub.Controller] = d
		}
		for i, ch := range d.Channels {
			if ch.Peer == sub.Reader && ch.Role == RoleController {
				c := *ch
				c.Subscriptions = append(slices.Clip(c.Subscriptions), sub)
				d.Channels[i] = &c
				break
			}
		}
	}
	out.byName = make(map[string]*Definition, len(s.byName))
	for name, d := range s.byName {
		out.byName[name] = d
	}
	out.Agents = slices.Clone(s.Agents)
	for i, d := range out.Agents {
		if cp := copies[d.Name]; cp != nil {
			cp.indexChannels()
			out.Agents[i] = cp
			out.byName[d.Name] = cp
		}
	}
	out.Links = make([]*Link, len(s.Links))
	for i, l := range s.Links {
		// Every link is copied: index sets each one's lookup map, and s's
		// links are being read by others.
		c, r := copies[l.Controller.Name], copies[l.Reader.Name]
		cp := *l
		if c != nil {
			cp.Controller, cp.ControllerSide = c, c.Channel(l.Reader.Name)
		}
		if r != nil {
			cp.Reader = r // its channels are copied, not changed: ReaderSide stays
		}
		out.Links[i] = &cp
	}
	out.index()
	return &out, refused
}
