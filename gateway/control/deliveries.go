package control

import (
	"context"
	"encoding/json"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
)

// The methods on deliveries: the outbox as operators see it. Only parked
// deliveries (set aside after their Controller's sessions kept ending
// before acknowledging them) can be retried or discarded; the others
// belong to the outbox.
const (
	MethodDeliveriesList    = "deliveries.list"
	MethodDeliveriesRetry   = "deliveries.retry"
	MethodDeliveriesDiscard = "deliveries.discard"
)

// DeliveriesBackend is the part of Backend behind the deliveries methods.
type DeliveriesBackend interface {
	// Deliveries returns at most p.Limit deliveries of p.State (any when
	// empty) to p.Controller (any when empty) with seq greater than
	// p.Cursor, oldest first.
	Deliveries(ctx context.Context, p DeliveriesParams) ([]Delivery, error)
	RetryDelivery(ctx context.Context, by Peer, p DeliveryParams) (Delivery, error)
	DiscardDelivery(ctx context.Context, by Peer, p DeliveryParams) (Delivery, error)
}

// DeliveriesParams are the params of deliveries.list.
type DeliveriesParams struct {
	// State is pending, parked, delivered or dropped; empty or "all"
	// lists every state.
	State      string `json:"state,omitempty"`
	Controller string `json:"controller,omitempty"`
	// Cursor is the Next of the previous page (0 for the first).
	Cursor int64 `json:"cursor,omitempty"`
	// Limit is the page size; default and cap MaxDeliveriesPage.
	Limit int `json:"limit,omitempty"`
}

// MaxDeliveriesPage caps one page of deliveries.list.
const MaxDeliveriesPage = 100

// maxDeliveriesPageBytes bounds the JSON of one page (besides a first
// delivery larger than that alone, at most the 1 MiB a response may be),
// far from the client's maxResponseLine.
const maxDeliveriesPageBytes = 8 << 20

// DeliveriesPage is the result of deliveries.list. Next is the cursor of
// the following page, 0 when there is none.
type DeliveriesPage struct {
	Deliveries []Delivery `json:"deliveries"`
	Next       int64      `json:"next,omitempty"`
}

// DeliveryParams name one delivery (deliveries.retry, .discard); Reason
// is why it is discarded.
type DeliveryParams struct {
	ID     string `json:"id"`
	Reason string `json:"reason,omitempty"`
}

// Delivery is one delivery of the outbox.
type Delivery struct {
	Seq            int64           `json:"seq"`
	ID             string          `json:"id"`
	State          string          `json:"state"`
	Controller     string          `json:"controller"`
	Reader         string          `json:"reader"`
	SubscriptionID string          `json:"subscription_id,omitempty"`
	QueryID        string          `json:"query_id,omitempty"`
	ApprovalID     string          `json:"approval_id,omitempty"`
	Category       int             `json:"category"`
	Response       json.RawMessage `json:"response"`
	Anomalies      []bcp.Anomaly   `json:"anomalies"`
	BandwidthBits  float64         `json:"bandwidth_bits"`
	Attempts       int             `json:"attempts"` // times sent
	Failures       int             `json:"failures"` // sessions that ended before acknowledging it
	CreatedAt      time.Time       `json:"created_at"`
	DoneAt         time.Time       `json:"done_at,omitzero"` // delivered, dropped or parked at
	Detail         string          `json:"detail,omitempty"` // why it was dropped or parked
}

// Deliveries returns one page of deliveries.
func (cl *Client) Deliveries(ctx context.Context, p DeliveriesParams) (DeliveriesPage, error) {
	var page DeliveriesPage
	err := cl.Call(ctx, MethodDeliveriesList, p, &page)
	return page, err
}

// RetryDelivery puts a parked delivery back in the outbox.
func (cl *Client) RetryDelivery(ctx context.Context, id string) (Delivery, error) {
	var d Delivery
	err := cl.Call(ctx, MethodDeliveriesRetry, DeliveryParams{ID: id}, &d)
	return d, err
}

// DiscardDelivery gives up a parked delivery for good.
func (cl *Client) DiscardDelivery(ctx context.Context, id, reason string) (Delivery, error) {
	var d Delivery
	err := cl.Call(ctx, MethodDeliveriesDiscard, DeliveryParams{ID: id, Reason: reason}, &d)
	return d, err
}

// deliveriesCall dispatches the deliveries methods.
func (cc *conn) deliveriesCall(req *request) (any, error) {
	ctx, b, peer := cc.ctx, cc.s.cfg.Backend, cc.peer
	if req.Method == MethodDeliveriesList {
		var p DeliveriesParams
		if err := decode(req.Params, &p); err != nil {
			return nil, err
		}
		return deliveriesPage(ctx, b, p)
	}
	var p DeliveryParams
	if err := decode(req.Params, &p); err != nil {
		return nil, err
	}
	if p.ID == "" {
		return nil, Errorf(CodeInvalidParams, `"id" is required`)
	}
	if req.Method == MethodDeliveriesRetry {
		return b.RetryDelivery(ctx, peer, p)
	}
	return b.DiscardDelivery(ctx, peer, p)
}

// deliveriesPage answers deliveries.list.
func deliveriesPage(ctx context.Context, b ReadBackend, p DeliveriesParams) (DeliveriesPage, error) {
	switch p.State {
	case "", "all":
		p.State = ""
	case "pending", "parked", "delivered", "dropped":
	default:
		return DeliveriesPage{}, Errorf(CodeInvalidParams, `"state" must be pending, parked, delivered, dropped or all, not %q`, p.State)
	}
	if p.Limit <= 0 || p.Limit > MaxDeliveriesPage {
		p.Limit = MaxDeliveriesPage
	}
	want := p.Limit
	p.Limit++ // one more: is there a next page?
	ds, err := b.Deliveries(ctx, p)
	if err != nil {
		return DeliveriesPage{}, err
	}
	// A page ends at the limit, or before the delivery that would take
	// it past maxDeliveriesPageBytes of JSON: responses can be large (a
	// Cat-3 summary), and the answer is one line.
	page := DeliveriesPage{Deliveries: []Delivery{}}
	size := 0
	for i, d := range ds {
		if i == want {
			page.Next = ds[i-1].Seq
			break
		}
		n := len(d.Response) + len(d.Detail) + 1024 // the rest of a delivery's JSON is far less
		if i > 0 && size+n > maxDeliveriesPageBytes {
			page.Next = ds[i-1].Seq
			break
		}
		size += n
		page.Deliveries = append(page.Deliveries, d)
	}
	return page, nil
}
