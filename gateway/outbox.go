package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// MaxDeliveryFailures is how many sessions of its Controller may end
// before acknowledging a delivery before it is parked: set aside for an
// operator (bcpgw deliveries), evented, never dropped on its own. A send
// cut off by the gateway's own shutdown or crash is not a failure.
const MaxDeliveryFailures = 10

// outboxWindow is how many of one Controller's pending deliveries the
// outbox holds in memory. The rest wait in the store and are read a page
// at a time as the window empties, so a backlog of any size costs the
// same memory.
const outboxWindow = 64

// outbox hands committed deliveries to their Controllers: one courier per
// Controller sends them one at a time, in the order they were accepted,
// and moves on only when the runtime has answered result.
type outbox struct {
	g        *Gateway
	mu       sync.Mutex
	couriers map[string]*courier
}

// courier owns the delivery queue of one Controller.
type courier struct {
	controller string
	sess       *session.Session // the session last delivered to; owned by the courier goroutine
	// waits counts the attempts in a row, across deliveries, that got no
	// acknowledgment (no session, or it ended first): the backoff before
	// the next, so that a Controller that fails every delivery is not
	// tried faster again once one is parked. Owned by the courier
	// goroutine; reset by an acknowledgment.
	waits int
	wake  chan struct{} // capacity 1: something was queued

	mu    sync.Mutex
	queue []store.Delivery // the window: the oldest pending deliveries, and operator retries
	// cursor is the highest seq read into the queue, from the store or
	// from enqueue; spilled says the store may hold pending deliveries
	// after it that are not in the queue.
	cursor  int64
	spilled bool
	// notified counts the calls of enqueue: a page read from the store is
	// known to hold everything committed before the read only if no
	// enqueue came in while it was read.
	notified uint64
	// gone holds the ids of deliveries finished with a seq past the cursor
	// (operator retries taken before the pages reached them): a page may
	// still find them pending, their end not yet committed.
	gone map[string]int64 // id -> seq
	// inflight is the delivery being brought to the runtime (the head,
	// from head to pop): a newer push never replaces it. claimed holds the
	// pending deliveries a newer push is replacing (debounce_batch.go):
	// head passes over them.
	inflight string
	claimed  map[string]bool
}

// courierFor returns the courier of controller, starting it if needed;
// nil once the gateway is stopping.
func (o *outbox) courierFor(controller string) *courier {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.couriers[controller]
	if c == nil {
		c = &courier{controller: controller, wake: make(chan struct{}, 1)}
		if !o.g.spawn(func() { o.g.courier(o.g.ctx, c) }) {
			return nil // stopping: the delivery is in the store for the next run
		}
		o.couriers[controller] = c
	}
	return c
}

// enqueue hands a committed delivery to its Controller's courier. It
// never blocks: the store calls it from its writer. Past the window, only
// a mark is kept: the courier reads the delivery from the store later.
func (o *outbox) enqueue(d store.Delivery) {
	c := o.courierFor(d.Controller)
	if c == nil {
		return
	}
	c.mu.Lock()
	c.notified++
	switch {
	case d.Seq <= c.cursor: // already read from the store
	case c.spilled || len(c.queue) >= outboxWindow:
		c.spilled = true
	default:
		c.queue = append(c.queue, d)
		c.cursor = d.Seq
	}
	c.mu.Unlock()
	c.poke()
}

// resume makes controller's courier read its pending deliveries from the
// store: those of a previous run.
func (o *outbox) resume(controller string) {
	c := o.courierFor(controller)
	if c == nil {
		return
	}
	c.mu.Lock()
	c.spilled = true
	c.mu.Unlock()
	c.poke()
}

// requeue puts a delivery an operator retried back in its Controller's
// queue, behind the window. Its seq is usually older than the cursor, so
// that the store's pages do not hold it again; when it is not (it was
// parked in an earlier run), a page may, and then it is queued once.
func (o *outbox) requeue(d store.Delivery) {
	c := o.courierFor(d.Controller)
	if c == nil {
		return
	}
	c.mu.Lock()
	// A page read since the retry was stored may hold it already.
	if !c.queued(d.ID) {
		c.queue = append(c.queue, d)
	}
	c.mu.Unlock()
	c.poke()
}

// queued reports whether the delivery with id is in the queue. c.mu is
// held. The queue is short (the window and operator retries).
func (c *courier) queued(id string) bool {
	for _, q := range c.queue {
		if q.ID == id {
			return true
		}
	}
	return false
}

func (c *courier) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// head returns the oldest undelivered item, reading the next page from
// the store when the window is empty and the store holds more, and
// waiting for one otherwise.
func (g *Gateway) head(ctx context.Context, c *courier) (store.Delivery, bool) {
	failures := 0
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			d := c.queue[0]
			if c.claimed[d.ID] { // being superseded: not sent
				// Taken out under the same lock: once it is let go, the
				// writer's dropSuperseded may take it out first, and a
				// pop would then take out the one behind it instead.
				c.popLocked()
				c.mu.Unlock()
				continue
			}
			c.inflight = d.ID
			c.mu.Unlock()
			return d, true
		}
		spilled, cursor, notified := c.spilled, c.cursor, c.notified
		c.mu.Unlock()
		if !spilled {
			select {
			case <-c.wake:
				continue
			case <-ctx.Done():
				return store.Delivery{}, false
			}
		}
		page, err := g.cfg.Store.PendingFor(ctx, c.controller, cursor, outboxWindow)
		if err != nil {
			if ctx.Err() != nil {
				return store.Delivery{}, false
			}
			g.log.Error("cannot read pending deliveries; retrying", "controller", c.controller, "error", err)
			if !g.sleep(ctx, session.Backoff(failures)) {
				return store.Delivery{}, false
			}
			failures++
			continue
		}
		failures = 0
		c.mu.Lock()
		for _, d := range page {
			if d.Seq > c.cursor {
				// An operator's retry may be queued or done already.
				if _, done := c.gone[d.ID]; !done && !c.queued(d.ID) {
					c.queue = append(c.queue, d)
				}
				c.cursor = d.Seq
			}
		}
		for id, seq := range c.gone {
			if seq <= c.cursor {
				delete(c.gone, id) // the pages are past it
			}
		}
		// A short page holds every pending delivery committed before it
		// was read; one committed after that was announced by an enqueue
		// since, and then the store is read again.
		if len(page) < outboxWindow && c.notified == notified {
			c.spilled = false
		}
		c.mu.Unlock()
	}
}

// pop removes the head once it is delivered, dropped or parked.
func (c *courier) pop() {
	c.mu.Lock()
	c.popLocked()
	c.mu.Unlock()
}

// popLocked is pop with c.mu held.
func (c *courier) popLocked() {
	if d := c.queue[0]; d.Seq > c.cursor {
		if c.gone == nil {
			c.gone = map[string]int64{}
		}
		c.gone[d.ID] = d.Seq
	}
	c.queue[0] = store.Delivery{}
	c.queue = c.queue[1:]
	c.inflight = ""
}

// courier delivers c's queue until ctx ends: it re-checks each delivery
// against the current definitions, starts the Controller's session if
// there is none, sends the delivery as a turn and waits for its result.
// If the session dies first, the same delivery goes to the next session,
// marked redelivered; after MaxDeliveryFailures such sessions it is
// parked.
func (g *Gateway) courier(ctx context.Context, c *courier) {
	for {
		d, ok := g.head(ctx, c)
		if !ok {
			return
		}
		unmarked, err := g.deliver(ctx, c, &d)
		if ctx.Err() != nil {
			// Stopping: a send cut off here is nobody's failure.
			return
		}
		var rev revokedError
		switch {
		case errors.As(err, &rev):
			g.finish(c, d, store.DeliveryDropped, "dropped_revoked", string(rev))
		case err != nil:
			// Only a delivery that failed too often is given up on
			// (redeliver).
			g.finish(c, d, store.DeliveryParked, "delivery_parked",
				fmt.Sprintf("parked: %d sessions of %s ended before acknowledging it; retry or discard it with bcpgw deliveries", d.Failures, d.Controller))
		default:
			g.delivered(c, d, unmarked)
		}
	}
}

// delivered records that c's head delivery d was acknowledged, with its
// send if that is not recorded yet (unmarked), and takes it out.
func (g *Gateway) delivered(c *courier, d store.Delivery, unmarked *store.Event) {
	c.waits = 0
	g.metrics.delivered(d, g.now())
	g.backlog.done(d)
	g.policy.finished(d)
	acked := store.Event{Time: g.now(), Kind: "delivery_acked", Agent: d.Controller, Peer: d.Reader,
		Detail: fmt.Sprintf("%s acknowledged delivery %s", d.Controller, d.ID), Category: int(d.Category), Bits: d.Bits,
		Subscription: d.SubscriptionID}
	g.metrics.subscriptionFigure(acked)
	if unmarked != nil {
		g.cfg.Store.FinishSent(d.ID, store.DeliveryDelivered, "", g.now(), *unmarked, acked)
	} else {
		g.cfg.Store.FinishDelivery(d.ID, store.DeliveryDelivered, "", g.now(), acked)
	}
	c.pop()
}

// finish takes c's head delivery d out of the outbox for good, or until
// an operator retries it (parked), recording why under the event kind.
func (g *Gateway) finish(c *courier, d store.Delivery, state store.DeliveryState, kind, why string) {
	g.metrics.deliveryDropped(kind)
	g.backlog.done(d)
	g.policy.finished(d)
	g.cfg.Store.FinishDelivery(d.ID, state, why, g.now(), store.Event{
		Time: g.now(), Kind: kind, Agent: d.Controller, Peer: d.Reader, Detail: why, Category: int(d.Category), Bits: d.Bits,
	})
	g.log.Warn("delivery "+string(state), "delivery", d.ID, "kind", kind, "reason", why)
	c.pop()
}

// deliver brings d to the Controller's session as a turn and waits for
// its result: the session of the last delivery is asked first, and d is
// checked against the current definitions before each send. Each send is
// counted in d. If the session ends before the result, d goes to the
// next session, marked redelivered, after a backoff (redeliver). It
// gives up when d is revoked, or has failed MaxDeliveryFailures times.
// On success, unmarked is the send's event if it is not recorded yet:
// the caller records it with the acknowledgment. Only c's goroutine
// calls it.
func (g *Gateway) deliver(ctx context.Context, c *courier, d *store.Delivery) (unmarked *store.Event, err error) {
	var ev store.Event // the last send's
	c.sess, err = g.bringTurn(ctx, turnJob{
		agent: d.Controller,
		last:  c.sess,
		check: func() error { return g.checkRevoked(d) },
		msg:   func(s *session.Session) any { return deliveryMessage(s, d) },
		sent: func() {
			kind := "delivery_sent"
			if d.Attempts > 0 {
				kind = "delivery_retried"
			}
			d.Attempts++
			ev = store.Event{Time: g.now(), Kind: kind, Agent: d.Controller, Peer: d.Reader, Ref: d.ID, Category: int(d.Category), Bits: d.Bits,
				Detail: fmt.Sprintf("delivery %s to %s (attempt %d)", d.ID, d.Controller, d.Attempts)}
			g.log.Debug(ev.Detail, "kind", ev.Kind)
		},
		await: func(ctx context.Context, done <-chan error) error {
			var err error
			unmarked, err = g.awaitAck(ctx, d, ev, done)
			return err
		},
		retry: func(_ int, sent bool, err error) (time.Duration, bool) {
			return g.redeliver(c, d, sent, err)
		},
	})
	return unmarked, err
}

// awaitAck waits for the result of the turn that carries d. Most
// runtimes answer at once: then the send (ev) is returned, to be recorded
// with the acknowledgment in one write (FinishSent). One that takes
// longer than markDelay, or fails, has its send recorded on its own
// first.
func (g *Gateway) awaitAck(ctx context.Context, d *store.Delivery, ev store.Event, done <-chan error) (*store.Event, error) {
	mark := g.cfg.Clock.NewTimer(markDelay)
	defer mark.Stop()
	select {
	case err := <-done:
		if err == nil {
			return &ev, nil
		}
		g.cfg.Store.MarkAttempted(d.ID, ev)
		return nil, err
	case <-mark.C():
	case <-ctx.Done():
	}
	g.cfg.Store.MarkAttempted(d.ID, ev)
	select {
	case err := <-done:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// redeliver is the outbox's retry policy: after a send of d failed with
// err, it counts a failure if the runtime had been handed d and its
// session was not stopped on request (an operator, a reload), and says
// how long to wait before sending d again (the courier's backoff, which
// goes on across deliveries until one is acknowledged), or that d is
// revoked or has failed too often (it is then parked).
func (g *Gateway) redeliver(c *courier, d *store.Delivery, sent bool, err error) (time.Duration, bool) {
	var rev revokedError
	if errors.As(err, &rev) {
		return 0, false
	}
	if sent && !errors.Is(err, session.ErrStoppedOnRequest) {
		d.Failures++
		g.cfg.Store.RecordFailure(d.ID, store.Event{Time: g.now(), Kind: "delivery_failed", Agent: d.Controller, Peer: d.Reader,
			Category: int(d.Category), Bits: d.Bits,
			Detail: fmt.Sprintf("the session of %s ended before acknowledging delivery %s (%d of %d)", d.Controller, d.ID, d.Failures, MaxDeliveryFailures)})
	}
	c.mu.Lock()
	c.queue[0].Attempts, c.queue[0].Failures = d.Attempts, d.Failures
	c.mu.Unlock()
	if d.Failures >= MaxDeliveryFailures {
		// A delivery that kills its Controller every time must not block
		// the ones behind it for ever, nor vanish: an operator retries or
		// discards it.
		return 0, false
	}
	if !errors.Is(err, session.ErrSessionClosed) {
		g.log.Warn("delivery waiting: controller unavailable", "controller", d.Controller, "delivery", d.ID, "error", err)
	}
	// Back off here too: the supervisor restarts a crashed session at once
	// when nothing waits for it at the moment it notices.
	wait := session.Backoff(c.waits)
	c.waits++
	return wait, true
}

// markDelay is how long the outbox waits for a runtime's result before it
// records the send on its own (see deliver). A crash within it loses the
// record, as it may lose any write nobody waits for: the next send then
// says redelivered false, and the runtime still drops the duplicate by
// its delivery_id.
const markDelay = 50 * time.Millisecond

// revoked says why data from reader to controller may no longer be
// delivered under the current definitions, or "" if it may: the channel
// must still exist and, for a push, the subscription too.
func (g *Gateway) revoked(controller, reader, subscriptionID string, isAnswer bool) string {
	set := g.set.Load()
	switch {
	case set.Link(controller, reader) == nil:
		return fmt.Sprintf("the channel between '%s' and '%s' no longer exists", controller, reader)
	case !isAnswer && set.Subscription(controller, reader, subscriptionID) == nil:
		return fmt.Sprintf("subscription '%s' of '%s' no longer exists", subscriptionID, controller)
	}
	return ""
}

// revokedError is why a delivery may no longer be sent.
type revokedError string

func (e revokedError) Error() string { return "revoked: " + string(e) }

// checkRevoked returns a revokedError if the current definitions no
// longer allow d.
func (g *Gateway) checkRevoked(d *store.Delivery) error {
	if why := g.revoked(d.Controller, d.Reader, d.SubscriptionID, d.QueryID != ""); why != "" {
		return revokedError(why)
	}
	return nil
}
