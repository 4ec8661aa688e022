package control

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Local answers the reads as a Client does through the server: the same
// pages, cursors, notices and refusals.
func TestLocalAnswersAsTheServer(t *testing.T) {
	fb := newFakeBackend()
	fb.approvals = approvalsOf(1, 7, 10, "a")
	fb.addEvents("publish_accepted", "approval_queued", "refused", "approval_approved", "delivery_sent")
	fb.prune(2)
	fb.report = Report{Sessions: []SessionExposure{{Agent: "main", Session: "ses-1", Bits: 3, ByCat: map[int]float64{1: 3}}}}
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	l := NewLocal(fb)
	ctx := callCtx(t)

	same := func(what string, local, remote any, lerr, rerr error) {
		t.Helper()
		if (lerr == nil) != (rerr == nil) || (lerr != nil && lerr.Error() != rerr.Error()) {
			t.Errorf("%s: local error %v, through the server %v", what, lerr, rerr)
			return
		}
		// Compared as the JSON a command prints.
		lj, _ := json.Marshal(local)
		rj, _ := json.Marshal(remote)
		if string(lj) != string(rj) {
			t.Errorf("%s:\nlocal  %s\nserver %s", what, lj, rj)
		}
	}
	for _, p := range []ApprovalsParams{{}, {Limit: 3}, {Limit: 3, Cursor: 3}, {Limit: 3, Cursor: 6}, {Limit: -1}} {
		lp, lerr := l.ApprovalsPage(ctx, p)
		rp, rerr := cl.ApprovalsPage(ctx, p)
		same("approvals", lp, rp, lerr, rerr)
	}
	for _, p := range []EventsParams{{}, {Since: 3, Limit: 1}, {Types: []string{"approval_*"}}, {Types: []string{"Bad!"}}} {
		lp, lerr := l.Events(ctx, p)
		rp, rerr := cl.Events(ctx, p)
		same("events", lp, rp, lerr, rerr)
		if p.Since == 0 && lerr == nil && lp.Notice == "" {
			t.Errorf("events %+v: no notice of the pruned events", p)
		}
	}
	for _, p := range []DeliveriesParams{{}, {State: "parked", Limit: 2}, {Cursor: 95}, {State: "lost"}} {
		lp, lerr := l.Deliveries(ctx, p)
		rp, rerr := cl.Deliveries(ctx, p)
		same("deliveries", lp, rp, lerr, rerr)
	}
	lr, lerr := l.Report(ctx, ReportParams{})
	rr, rerr := cl.Report(ctx, ReportParams{})
	same("report", lr, rr, lerr, rerr)
	if !reflect.DeepEqual(lr, fb.report) {
		t.Errorf("report %+v, want %+v", lr, fb.report)
	}
}
