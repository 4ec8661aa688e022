package gateway

import (
	"fmt"
	"sync"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/runtime"
)

// rateLimiter enforces channel rates (agents.Rates, from TriOnyx
// definitions): per channel and category, queries and pushes together, at
// most Limit in any Window, for each side's rates. It keeps the time of
// every message admitted within the window (a sliding log: exact, with no
// burst at a window's edge), so memory is bounded by the limits, which
// agents.MaxRateLimit bounds.
//
// Admission reserves a slot before the other checks and releases it when
// they refuse: a refused message is not counted. The zero value is ready
// to use; it is safe for concurrent use.
type rateLimiter struct {
	mu   sync.Mutex
	logs map[rateKey][]time.Time // oldest first
}

// rateKey is one side's count of one category on one channel, or (sub
// set) one subscription's count (rate_limit, subscription_policy.go).
type rateKey struct {
	controller, reader string
	cat                bcp.Category
	side               agents.Role
	sub                string
}

// window is a count a message must fit in: its key and its rate.
type window struct {
	key  rateKey
	rate agents.Rate
}

// take admits one message at now into every window of ws, all or none.
// When one is full it admits nothing and returns that window's index and
// how long until it has room (at least a second, as refusals say it);
// else the reservation and -1.
func (rl *rateLimiter) take(now time.Time, ws []window) (rateSlot, int, time.Duration) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.logs == nil {
		rl.logs = map[rateKey][]time.Time{}
	}
	for i, w := range ws {
		log := rl.logs[w.key]
		// Forget what left the window.
		from := now.Add(-w.rate.Window)
		drop := 0
		for drop < len(log) && !log[drop].After(from) {
			drop++
		}
		log = log[drop:]
		rl.logs[w.key] = log
		if len(log) >= w.rate.Limit {
			return rateSlot{}, i, max(log[0].Add(w.rate.Window).Sub(now).Round(time.Second), time.Second)
		}
	}
	slot := rateSlot{rl: rl, at: now}
	for _, w := range ws {
		rl.logs[w.key] = append(rl.logs[w.key], now)
		slot.keys = append(slot.keys, w.key)
	}
	return slot, -1, 0
}

// rateSlot is a reservation: release gives it back.
type rateSlot struct {
	rl   *rateLimiter
	keys []rateKey
	at   time.Time
}

// release gives the reservation back, for a message refused by a later
// check. Releasing the zero slot does nothing; release is not safe to
// call twice.
func (s rateSlot) release() {
	if s.rl == nil || len(s.keys) == 0 {
		return
	}
	s.rl.mu.Lock()
	defer s.rl.mu.Unlock()
	for _, k := range s.keys {
		log := s.rl.logs[k]
		for i := len(log) - 1; i >= 0; i-- {
			if log[i].Equal(s.at) {
				s.rl.logs[k] = append(log[:i], log[i+1:]...)
				break
			}
		}
	}
}

// reserve admits one message of category cat on link at now, against
// both sides' rates, or says why not: category_not_allowed when a side's
// rates deny the category, rate_limited when a side's window is full. A
// link without rates is always admitted.
func (rl *rateLimiter) reserve(link *agents.Link, cat bcp.Category, now time.Time) (rateSlot, *bcp.Error) {
	type side struct {
		def  *agents.Definition
		role agents.Role
		rate agents.Rate
	}
	var sides []side
	for _, s := range []struct {
		def *agents.Definition
		ch  *agents.Channel
	}{{link.Controller, link.ControllerSide}, {link.Reader, link.ReaderSide}} {
		if s.ch.Rates != nil {
			sides = append(sides, side{s.def, s.ch.Role, s.ch.Rates.For(cat)})
		}
	}
	if len(sides) == 0 {
		return rateSlot{}, nil
	}
	between := fmt.Sprintf("the channel between '%s' and '%s'", link.Controller.Name, link.Reader.Name)
	for _, s := range sides {
		if s.rate.Denied() {
			return rateSlot{}, bcp.Errorf(bcp.CategoryNotAllowed, "Cat-%d is denied on %s: rates.cat%d is 0 in %s's definition", cat, between, cat, s.def.Name)
		}
	}
	ws := make([]window, len(sides))
	for i, s := range sides {
		ws[i] = window{rateKey{controller: link.Controller.Name, reader: link.Reader.Name, cat: cat, side: s.role}, s.rate}
	}
	slot, full, wait := rl.take(now, ws)
	if full >= 0 {
		s := sides[full]
		return rateSlot{}, bcp.Errorf(bcp.RateLimited, "Cat-%d rate limit reached on %s: %s in %s's rates; the next is allowed in %s",
			cat, between, s.rate, s.def.Name, wait)
	}
	return slot, nil
}

// pushRate reserves the rate slot of a Reader's publish, or refuses it
// (answering the Reader, auditing the refusal) and reports false. A
// publish the rates do not concern (no such subscription, no BCPPublish:
// the later checks refuse it with their own codes) gets the zero slot.
func (g *Gateway) pushRate(s *session.Session, line []byte, r runtime.Response, reply *session.PendingReply, set *agents.Set) (rateSlot, bool) {
	reader := set.Agent(s.Name())
	sub := set.Subscription(r.Controller, s.Name(), r.SubscriptionID)
	if reader == nil || sub == nil || !reader.HasTool(agents.ToolPublish) {
		return rateSlot{}, true
	}
	slot, e := g.rates.reserve(set.Link(r.Controller, s.Name()), sub.Spec.Category, g.now())
	if e != nil {
		g.refusePush(s.Name(), r, e, e.Error(), line, reply)
		return rateSlot{}, false
	}
	return slot, true
}

// RateCheck is what the channel rates say, with nothing counted yet,
// about a publish to subscription id of controller by reader: only a
// category the rates deny refuses it (category_not_allowed). bcpgw check
// applies it before JudgePublish, as the gateway does.
func RateCheck(set *agents.Set, controller, reader, id string) *bcp.Error {
	sub := set.Subscription(controller, reader, id)
	if def := set.Agent(reader); sub == nil || def == nil || !def.HasTool(agents.ToolPublish) {
		return nil
	}
	var rl rateLimiter
	_, e := rl.reserve(set.Link(controller, reader), sub.Spec.Category, time.Now())
	return e
}
