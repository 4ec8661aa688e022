package control

import "context"

// ReadBackend is the part of Backend that reads what the gateway
// recorded. The state file alone can answer it (gateway.StateReader), so
// that bcpgw events, report, approvals list and deliveries list work
// when no gateway runs, through Local.
type ReadBackend interface {
	Approvals(ctx context.Context, p ApprovalsParams) ([]Approval, error)
	Events(ctx context.Context, p EventsParams) ([]Event, error)
	EventsPrunedBefore(ctx context.Context) (int64, error)
	FlushEvents(ctx context.Context) error
	Report(ctx context.Context, p ReportParams) (Report, error)
	Deliveries(ctx context.Context, p DeliveriesParams) ([]Delivery, error)
}

var _ ReadBackend = Backend(nil)

// Local answers the read methods from a ReadBackend in this process, with
// the checks, pages and notices the server answers them with on the
// socket: its methods are the Client's, and a command reads through
// either alike. Errors the server would send as *Error are *Error.
type Local struct{ b ReadBackend }

// NewLocal returns a Local reading from b.
func NewLocal(b ReadBackend) *Local { return &Local{b: b} }

// Events returns a page of events, as events.list.
func (l *Local) Events(ctx context.Context, p EventsParams) (EventsPage, error) {
	return eventsPage(ctx, l.b, p)
}

// ApprovalsPage returns a page of approval items, as approvals.list.
func (l *Local) ApprovalsPage(ctx context.Context, p ApprovalsParams) (ApprovalsPage, error) {
	items, lines, next, err := approvalItems(ctx, l.b, p)
	if err != nil {
		return ApprovalsPage{}, err
	}
	return ApprovalsPage{Items: items[:len(lines)], Next: next}, nil
}

// Deliveries returns a page of deliveries, as deliveries.list.
func (l *Local) Deliveries(ctx context.Context, p DeliveriesParams) (DeliveriesPage, error) {
	return deliveriesPage(ctx, l.b, p)
}

// Report returns the exposure report, as report.
func (l *Local) Report(ctx context.Context, p ReportParams) (Report, error) {
	return l.b.Report(ctx, p)
}
