package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// MaxDeliveryAttempts is how many times a delivery is sent to sessions
// that end before acknowledging it, before it is dropped as failed
// (delivery_failed event).
const MaxDeliveryAttempts = 10

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
	sess       *Session // the session last delivered to; owned by the courier goroutine
	mu         sync.Mutex
	queue      []store.Delivery
	wake       chan struct{} // capacity 1: something was queued
}

// enqueue adds a committed delivery to its Controller's queue, starting the
// courier if needed. It never blocks: the store calls it from its writer.
func (o *outbox) enqueue(d store.Delivery) {
	o.mu.Lock()
	c := o.couriers[d.Controller]
	if c == nil {
		c = &courier{controller: d.Controller, wake: make(chan struct{}, 1)}
		if !o.g.spawn(func() { o.g.courier(o.g.ctx, c) }) {
			o.mu.Unlock()
			return // stopping: the delivery is in the store for the next run
		}
		o.couriers[d.Controller] = c
	}
	o.mu.Unlock()
	c.mu.Lock()
	c.queue = append(c.queue, d)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// head returns the oldest undelivered item, waiting for one.
func (c *courier) head(ctx context.Context) (store.Delivery, bool) {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			d := c.queue[0]
			c.mu.Unlock()
			return d, true
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-ctx.Done():
			return store.Delivery{}, false
		}
	}
}

// pop removes the head once it is delivered or dropped.
func (c *courier) pop() {
	c.mu.Lock()
	c.queue[0] = store.Delivery{}
	c.queue = c.queue[1:]
	c.mu.Unlock()
}

// courier delivers c's queue until ctx ends: it re-checks each delivery
// against the current definitions, starts the Controller's session if
// there is none, sends the delivery as a turn and waits for its result.
// If the session dies first, the same delivery goes to the next session,
// marked redelivered.
func (g *Gateway) courier(ctx context.Context, c *courier) {
	failures := 0
	for {
		d, ok := c.head(ctx)
		if !ok {
			return
		}
		err := g.deliver(ctx, c, &d)
		if ctx.Err() != nil {
			return
		}
		var rev revokedError
		if errors.As(err, &rev) {
			g.dropDelivery(c, d, "dropped_revoked", string(rev))
			continue
		}
		if err != nil {
			c.mu.Lock()
			c.queue[0].Attempts = d.Attempts
			c.mu.Unlock()
			if d.Attempts >= MaxDeliveryAttempts {
				// A delivery that kills its Controller every time must not
				// block the ones behind it for ever.
				g.dropDelivery(c, d, "delivery_failed", fmt.Sprintf("the runtime of %s ended before acknowledging it %d times", d.Controller, d.Attempts))
				continue
			}
			if !errors.Is(err, ErrSessionClosed) {
				g.log.Warn("delivery waiting: controller unavailable", "controller", d.Controller, "delivery", d.ID, "error", err)
			}
			// Back off here too: the supervisor restarts a crashed session
			// at once when nothing waits for it at the moment it notices.
			if !g.sleep(ctx, Backoff(failures)) {
				return
			}
			failures++
			continue
		}
		failures = 0
		g.metrics.delivered(d, g.now())
		g.cfg.Store.FinishDelivery(d.ID, store.DeliveryDelivered, "", g.now(), store.Event{
			Time: g.now(), Kind: "delivery_acked", Agent: d.Controller, Peer: d.Reader,
			Detail: fmt.Sprintf("%s acknowledged delivery %s", d.Controller, d.ID), Category: int(d.Category), Bits: d.Bits,
		})
		c.pop()
	}
}

// dropDelivery gives up c's head delivery d for good, recording why under
// the event kind.
func (g *Gateway) dropDelivery(c *courier, d store.Delivery, kind, why string) {
	g.metrics.deliveryDropped(kind)
	g.cfg.Store.FinishDelivery(d.ID, store.DeliveryDropped, why, g.now(), store.Event{
		Time: g.now(), Kind: kind, Agent: d.Controller, Peer: d.Reader, Detail: why, Category: int(d.Category), Bits: d.Bits,
	})
	g.log.Warn("delivery dropped", "delivery", d.ID, "kind", kind, "reason", why)
	c.pop()
}

// deliver sends d to the Controller's session as a turn and waits for its
// result. It counts the attempt in d. Only c's goroutine calls it.
func (g *Gateway) deliver(ctx context.Context, c *courier, d *store.Delivery) error {
	// The session of the last delivery is asked first: the supervisor is
	// asked only when there is none or it has ended.
	if c.sess == nil || ended(c.sess) {
		if err := g.checkRevoked(d); err != nil {
			return err // no session is started for it
		}
		sess, err := g.sv.Ensure(ctx, d.Controller)
		if err != nil {
			return err
		}
		c.sess = sess
	}
	sess := c.sess
	// Checked again right before the send: a reload may have come while
	// the session started.
	if err := g.checkRevoked(d); err != nil {
		return err
	}
	msg := forController(sess, runtime.ResponseDelivery{
		Type: runtime.TypeResponseDelivery, QueryID: d.QueryID, SubscriptionID: d.SubscriptionID,
		Category: d.Category, FromAgent: d.Reader, Response: d.Response, BandwidthBits: d.Bits,
		DeliveryID: d.ID, RequestID: d.RequestID, Anomalies: d.Anomalies, Redelivered: d.Attempts > 0,
		Prompt: deliveryPrompt(*d),
	})
	done, err := sess.Turn(ctx, msg)
	if err != nil {
		return err
	}
	d.Attempts++
	kind := "delivery_sent"
	if msg.Redelivered {
		kind = "delivery_retried"
	}
	ev := store.Event{Time: g.now(), Kind: kind, Agent: d.Controller, Peer: d.Reader, Ref: d.ID, Category: int(d.Category), Bits: d.Bits,
		Detail: fmt.Sprintf("delivery %s to %s (attempt %d)", d.ID, d.Controller, d.Attempts)}
	g.cfg.Store.MarkAttempted(d.ID, ev)
	g.log.Debug("audit: "+ev.Detail, "kind", ev.Kind)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sleep waits d on the gateway's clock, or until ctx ends (false).
func (g *Gateway) sleep(ctx context.Context, d time.Duration) bool {
	t := g.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
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
