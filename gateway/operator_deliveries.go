package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// Deliveries implements control.Backend (storeView.deliveries).
func (o *Operator) Deliveries(ctx context.Context, p control.DeliveriesParams) ([]control.Delivery, error) {
	return o.view().deliveries(ctx, p)
}

// RetryDelivery implements control.Backend.
func (o *Operator) RetryDelivery(ctx context.Context, by control.Peer, p control.DeliveryParams) (control.Delivery, error) {
	d, err := o.g.RetryDelivery(ctx, p.ID, decider(by))
	if err != nil {
		return control.Delivery{}, deliveryError(p.ID, err)
	}
	return deliveryView(d), nil
}

// DiscardDelivery implements control.Backend.
func (o *Operator) DiscardDelivery(ctx context.Context, by control.Peer, p control.DeliveryParams) (control.Delivery, error) {
	d, err := o.g.DiscardDelivery(ctx, p.ID, decider(by), p.Reason)
	if err != nil {
		return control.Delivery{}, deliveryError(p.ID, err)
	}
	return deliveryView(d), nil
}

// deliveryError maps the errors of a retry or discard to the API's codes.
func deliveryError(id string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return control.Errorf(control.CodeNotFound, "no delivery %q (see bcpgw deliveries list)", id)
	case errors.Is(err, store.ErrNotParked):
		return control.Errorf(control.CodeNotParked, "%v: only parked deliveries can be retried or discarded; nothing was changed", err)
	case errors.Is(err, ErrNotRunning):
		return control.Errorf(control.CodeNotRunning, "the gateway is still starting; try again in a moment")
	}
	return err
}

func deliveryView(d *store.Delivery) control.Delivery {
	anomalies := d.Anomalies
	if anomalies == nil {
		anomalies = []bcp.Anomaly{}
	}
	return control.Delivery{
		Seq: d.Seq, ID: d.ID, State: string(d.State), Controller: d.Controller, Reader: d.Reader,
		SubscriptionID: d.SubscriptionID, QueryID: d.QueryID, ApprovalID: d.ApprovalID, Category: int(d.Category),
		Response: d.Response, Anomalies: anomalies, BandwidthBits: d.Bits, Attempts: d.Attempts, Failures: d.Failures,
		CreatedAt: d.CreatedAt, DoneAt: d.DoneAt, Detail: d.DoneDetail,
	}
}

// Backup implements control.Backend.
func (o *Operator) Backup(ctx context.Context, by control.Peer, p control.BackupParams) (control.BackupResult, error) {
	n, err := o.g.cfg.Store.Backup(ctx, p.Path)
	if err != nil {
		return control.BackupResult{}, err
	}
	o.acted("operator_backup", "", by, fmt.Sprintf("state file copied to %s (%d bytes)", p.Path, n))
	return control.BackupResult{Path: p.Path, Bytes: n}, nil
}
