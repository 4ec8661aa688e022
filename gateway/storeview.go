package gateway

import (
	"context"
	"strings"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// storeView reads the store's rows as the control API shows them. The
// running gateway's backend (Operator) and the state file's when none
// runs (StateReader) both read through it, so that bcpgw events, report,
// approvals list and deliveries list print the same either way.
type storeView struct{ st *store.Store }

func (o *Operator) view() storeView { return storeView{o.g.cfg.Store} }

// approvals is a page of the pending items when the status is empty, of
// every item when it is "all". The store reads just that page, through
// an index.
func (v storeView) approvals(ctx context.Context, p control.ApprovalsParams) ([]control.Approval, error) {
	var st store.ApprovalStatus
	switch status := p.Status; status {
	case "", string(store.ApprovalPending):
		st = store.ApprovalPending
	case "all":
	case string(store.ApprovalApproved), string(store.ApprovalRejected), string(store.ApprovalExpired), string(store.ApprovalDropped):
		st = store.ApprovalStatus(status)
	default:
		return nil, control.Errorf(control.CodeInvalidParams, "status %q: use pending, approved, rejected, expired, dropped or all", status)
	}
	items, err := v.st.ApprovalsAfter(ctx, st, p.Cursor, p.Limit)
	if err != nil {
		return nil, err
	}
	out := make([]control.Approval, len(items))
	for i := range items {
		out[i] = approvalView(&items[i])
	}
	return out, nil
}

// events are the events p selects. Every filter is applied by the
// store's query, through an index (store.QueryEvents).
func (v storeView) events(ctx context.Context, p control.EventsParams) ([]control.Event, error) {
	evs, err := v.st.QueryEvents(ctx, store.EventQuery{Since: p.Since, Limit: p.Limit, Kinds: p.Types, Agent: p.Agent})
	if err != nil {
		return nil, err
	}
	out := make([]control.Event, len(evs))
	for i, e := range evs {
		out[i] = control.Event{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Agent: e.Agent, Peer: e.Peer, Code: e.Code,
			Detail: e.Detail, Category: e.Category, Bits: e.Bits, Ref: e.Ref, Payload: strings.ToValidUTF8(string(e.Payload), "\uFFFD")}
	}
	return out, nil
}

// deliveries is a page of the deliveries p selects.
func (v storeView) deliveries(ctx context.Context, p control.DeliveriesParams) ([]control.Delivery, error) {
	ds, err := v.st.ListDeliveries(ctx, store.DeliveryFilter{
		State: store.DeliveryState(p.State), Controller: p.Controller, After: p.Cursor, Limit: p.Limit,
	})
	if err != nil {
		return nil, err
	}
	out := make([]control.Delivery, len(ds))
	for i := range ds {
		out[i] = deliveryView(&ds[i])
	}
	return out, nil
}

// report reads the exposure figures the store keeps with the events they
// come from (store.Exposure), which outlive the events themselves: each
// delivery sent to a Controller counts for the session that Controller
// had at that moment. A delivery re-sent after a crash counts for each
// session it was sent to: the crashed one may have read it. The sessions
// listed are those of agent (every one when empty) that were sent
// something, and those of the agents controller says are Controllers;
// without the definitions (controller nil), of the agents a session of
// which was sent something.
func (v storeView) report(ctx context.Context, agent string, controller func(agent string) bool) (control.Report, error) {
	all, err := v.st.Exposure(ctx, agent)
	if err != nil {
		return control.Report{}, err
	}
	if controller == nil {
		sent := map[string]bool{}
		for _, se := range all {
			sent[se.Agent] = sent[se.Agent] || len(se.Channels) > 0
		}
		controller = func(agent string) bool { return sent[agent] }
	}
	figures, err := v.st.SubscriptionFigures(ctx, agent)
	if err != nil {
		return control.Report{}, err
	}
	r := control.Report{Sessions: []control.SessionExposure{}, Subscriptions: make([]control.SubscriptionFigures, 0, len(figures))}
	for _, f := range figures {
		r.Subscriptions = append(r.Subscriptions, control.SubscriptionFigures{
			Controller: f.Controller, Reader: f.Reader, ID: f.ID, Accepted: f.Accepted, Held: f.Held, Filtered: f.Filtered, Superseded: f.Superseded,
			Refused: f.Refused, Delivered: f.Delivered, Bits: f.Bits, RefusedBy: f.RefusedBy,
		})
	}
	for _, se := range all {
		s := control.SessionExposure{Agent: se.Agent, Session: se.Session, StartedAt: se.StartedAt, EndedAt: se.EndedAt,
			ByCat: map[int]float64{}, Channels: []control.ChannelExposure{}}
		for _, c := range se.Channels { // by Reader, then category
			addExposure(&s, c)
		}
		if controller(s.Agent) || s.Bits > 0 {
			r.Sessions = append(r.Sessions, s)
		}
	}
	return r, nil
}

func addExposure(s *control.SessionExposure, c store.ChannelExposure) {
	s.Bits += c.Bits
	s.ByCat[c.Category] += c.Bits
	s.Channels = append(s.Channels, control.ChannelExposure{Reader: c.Reader, Category: c.Category, Deliveries: c.Deliveries, Bits: c.Bits})
}
