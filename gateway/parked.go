package gateway

import (
	"context"
	"fmt"

	"github.com/bcpgw/bcpgw/gateway/store"
)

// Parked deliveries: a delivery whose Controller's sessions keep ending
// before they acknowledge it is set aside (outbox.go) so that it neither
// blocks the ones behind it nor vanishes. The Reader heard success for
// it, so only an operator may end it: RetryDelivery sends it again,
// DiscardDelivery gives it up, both evented with who decided.

// RetryDelivery puts a parked delivery back in its Controller's outbox,
// its failure count cleared. Errors: store.ErrNotFound, store.ErrNotParked.
func (g *Gateway) RetryDelivery(ctx context.Context, id string, by store.Decider) (*store.Delivery, error) {
	if err := g.waitRunning(ctx); err != nil {
		return nil, err
	}
	d, err := g.cfg.Store.RetryDelivery(ctx, id, store.Event{Time: g.now(), Kind: "delivery_requeued",
		Detail: fmt.Sprintf("parked delivery %s requeued by %s", id, by)})
	if err != nil {
		return nil, err
	}
	for range d.Weight() { // a batch counts its pushes
		g.backlog.add(store.Pair{Controller: d.Controller, Reader: d.Reader})
	}
	g.outbox.requeue(*d)
	g.log.Info("parked delivery requeued", "delivery", d.ID, "controller", d.Controller, "by", by.String())
	return d, nil
}

// DiscardDelivery gives up a parked delivery for good: it is marked
// dropped with the reason. Errors: store.ErrNotFound, store.ErrNotParked.
func (g *Gateway) DiscardDelivery(ctx context.Context, id string, by store.Decider, reason string) (*store.Delivery, error) {
	if err := g.waitRunning(ctx); err != nil {
		return nil, err
	}
	why := fmt.Sprintf("discarded by %s", by)
	if reason != "" {
		why += ": " + reason
	}
	d, err := g.cfg.Store.DiscardDelivery(ctx, id, why, g.now(), store.Event{Time: g.now(), Kind: "delivery_discarded", Detail: why})
	if err != nil {
		return nil, err
	}
	g.log.Warn("parked delivery discarded", "delivery", d.ID, "controller", d.Controller, "by", by.String(), "reason", reason)
	return d, nil
}
