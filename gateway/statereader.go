package gateway

import (
	"context"
	"path/filepath"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// StateFile is the state file's name in the state directory.
const StateFile = "bcpgw.db"

// StateReader answers the control API's reads (control.ReadBackend) from
// a state file, read-only, when no gateway runs on it: bcpgw events,
// report, approvals list and deliveries list after the fact. It reads
// through the same storeView as a running gateway's Operator, so what it
// prints is the same; only the report, without the definitions, lists
// the sessions of the agents that were sent something rather than those
// of every Controller.
type StateReader struct {
	st *store.Store
}

var _ control.ReadBackend = (*StateReader)(nil)

// OpenStateReader opens the state file of the state directory dir
// read-only (store.OpenReadOnly): no lock, no file created, no
// migration. A missing file is an error wrapping fs.ErrNotExist.
func OpenStateReader(dir string) (*StateReader, error) {
	st, err := store.OpenReadOnly(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, err
	}
	return &StateReader{st: st}, nil
}

// Path is the state file's path.
func (r *StateReader) Path() string { return r.st.Path() }

// Close closes the state file.
func (r *StateReader) Close() error { return r.st.Close() }

func (r *StateReader) view() storeView { return storeView{r.st} }

// Approvals implements control.ReadBackend.
func (r *StateReader) Approvals(ctx context.Context, p control.ApprovalsParams) ([]control.Approval, error) {
	return r.view().approvals(ctx, p)
}

// Events implements control.ReadBackend.
func (r *StateReader) Events(ctx context.Context, p control.EventsParams) ([]control.Event, error) {
	return r.view().events(ctx, p)
}

// EventsPrunedBefore implements control.ReadBackend.
func (r *StateReader) EventsPrunedBefore(ctx context.Context) (int64, error) {
	return r.st.EventsPrunedBefore(ctx)
}

// FlushEvents implements control.ReadBackend: nothing is written.
func (r *StateReader) FlushEvents(context.Context) error { return nil }

// Deliveries implements control.ReadBackend.
func (r *StateReader) Deliveries(ctx context.Context, p control.DeliveriesParams) ([]control.Delivery, error) {
	return r.view().deliveries(ctx, p)
}

// Report implements control.ReadBackend.
func (r *StateReader) Report(ctx context.Context, p control.ReportParams) (control.Report, error) {
	return r.view().report(ctx, p.Agent, nil)
}
