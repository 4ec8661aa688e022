package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDeliveries is how many deliveries the fake backend has: seq 1 to
// fakeDeliveries, every tenth parked, the others delivered.
const fakeDeliveries = 250

func (f *fakeBackend) Deliveries(ctx context.Context, p DeliveriesParams) ([]Delivery, error) {
	if err := f.enter(ctx, "Deliveries", Peer{}, p); err != nil {
		return nil, err
	}
	var out []Delivery
	for seq := p.Cursor + 1; seq <= fakeDeliveries && len(out) < p.Limit; seq++ {
		state := "delivered"
		if seq%10 == 0 {
			state = "parked"
		}
		if p.State != "" && p.State != state {
			continue
		}
		out = append(out, Delivery{Seq: seq, ID: fmt.Sprintf("dl-%d", seq), State: state, Controller: "main", Reader: "r",
			Response: json.RawMessage(`{"a":1}`)})
	}
	return out, nil
}

func (f *fakeBackend) RetryDelivery(ctx context.Context, by Peer, p DeliveryParams) (Delivery, error) {
	if err := f.enter(ctx, "RetryDelivery", by, p); err != nil {
		return Delivery{}, err
	}
	return Delivery{ID: p.ID, State: "pending"}, nil
}

func (f *fakeBackend) DiscardDelivery(ctx context.Context, by Peer, p DeliveryParams) (Delivery, error) {
	if err := f.enter(ctx, "DiscardDelivery", by, p); err != nil {
		return Delivery{}, err
	}
	return Delivery{ID: p.ID, State: "dropped", Detail: p.Reason}, nil
}

func TestDeliveriesListPages(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)
	var all []Delivery
	p := DeliveriesParams{}
	pages := 0
	for {
		page, err := cl.Deliveries(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Deliveries) > MaxDeliveriesPage {
			t.Fatalf("a page of %d, over the cap %d", len(page.Deliveries), MaxDeliveriesPage)
		}
		all = append(all, page.Deliveries...)
		if page.Next == 0 {
			break
		}
		p.Cursor = page.Next
	}
	if len(all) != fakeDeliveries || pages != 3 {
		t.Fatalf("%d deliveries in %d pages, want %d in 3", len(all), pages, fakeDeliveries)
	}
	for i, d := range all {
		if d.Seq != int64(i+1) {
			t.Fatalf("delivery %d has seq %d: pages overlap or skip", i, d.Seq)
		}
	}
	// The last page is exactly full: no empty page after it.
	page, err := cl.Deliveries(ctx, DeliveriesParams{State: "parked", Limit: 25})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Deliveries) != 25 || page.Next != 0 {
		t.Errorf("parked page: %d deliveries, next %d; want 25, none", len(page.Deliveries), page.Next)
	}
	// "all" is every state; an unknown state is refused.
	if _, err := cl.Deliveries(ctx, DeliveriesParams{State: "all", Limit: 1}); err != nil {
		t.Errorf("state all: %v", err)
	}
	if got := fb.callsOf("Deliveries"); got[len(got)-1].Params.(DeliveriesParams).State != "" {
		t.Errorf("state all reached the backend as %+v, want empty", got[len(got)-1].Params)
	}
	_, err = cl.Deliveries(ctx, DeliveriesParams{State: "lost"})
	if CodeOf(err) != CodeInvalidParams {
		t.Errorf("state lost: %v, want invalid_params", err)
	}
}

func TestDeliveriesRetryAndDiscard(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)
	d, err := cl.RetryDelivery(ctx, "dl-10")
	if err != nil || d.State != "pending" {
		t.Fatalf("retry: %+v, %v", d, err)
	}
	if calls := fb.callsOf("RetryDelivery"); len(calls) != 1 || calls[0].Peer.PID == 0 {
		t.Errorf("retry calls %+v, want one naming the peer", calls)
	}
	d, err = cl.DiscardDelivery(ctx, "dl-20", "poison")
	if err != nil || d.Detail != "poison" {
		t.Fatalf("discard: %+v, %v", d, err)
	}
	if _, err := cl.RetryDelivery(ctx, ""); CodeOf(err) != CodeInvalidParams {
		t.Errorf("retry without id: %v, want invalid_params", err)
	}
	fb.setErr("DiscardDelivery", Errorf(CodeNotParked, "delivery dl-1 is delivered"))
	_, err = cl.DiscardDelivery(ctx, "dl-1", "x")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotParked || e.Reason() != "not_parked" {
		t.Errorf("discard of a delivered one: %v, want not_parked", err)
	}
}

// bigDeliveries is a backend whose every delivery carries a 1 MiB
// response, the most a Reader may publish.
type bigDeliveries struct{ *fakeBackend }

func (b bigDeliveries) Deliveries(ctx context.Context, p DeliveriesParams) ([]Delivery, error) {
	big := json.RawMessage(`"` + strings.Repeat("x", 1<<20-2) + `"`)
	var out []Delivery
	for seq := p.Cursor + 1; seq <= 30 && len(out) < p.Limit; seq++ {
		out = append(out, Delivery{Seq: seq, ID: fmt.Sprintf("dl-%d", seq), State: "parked", Response: big})
	}
	return out, nil
}

func TestDeliveriesPageStaysUnderTheLineLimit(t *testing.T) {
	l, err := Listen(filepath.Join(shortTempDir(t), "state", SocketName))
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerConfig{Backend: bigDeliveries{newFakeBackend()}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	cl := dial(t, l.Path)
	total, pages := 0, 0
	p := DeliveriesParams{}
	for {
		page, err := cl.Deliveries(callCtx(t), p)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if n := len(page.Deliveries); n == 0 || n > maxDeliveriesPageBytes>>20 {
			t.Fatalf("a page of %d 1-MiB deliveries, want 1 to %d", n, maxDeliveriesPageBytes>>20)
		}
		total += len(page.Deliveries)
		if page.Next == 0 {
			break
		}
		p.Cursor = page.Next
	}
	if total != 30 || pages < 4 {
		t.Errorf("%d deliveries in %d pages, want 30 in at least 4", total, pages)
	}
}

func (f *fakeBackend) Backup(ctx context.Context, by Peer, p BackupParams) (BackupResult, error) {
	if err := f.enter(ctx, "Backup", by, p); err != nil {
		return BackupResult{}, err
	}
	return BackupResult{Path: p.Path, Bytes: 4096}, nil
}

func TestBackupNeedsAnAbsolutePath(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	if _, err := cl.Backup(callCtx(t), "relative.db"); CodeOf(err) != CodeInvalidParams {
		t.Errorf("relative path: %v, want invalid_params", err)
	}
	r, err := cl.Backup(callCtx(t), "/backups/bcpgw.db")
	if err != nil || r.Path != "/backups/bcpgw.db" {
		t.Errorf("backup: %+v, %v", r, err)
	}
	if calls := fb.callsOf("Backup"); len(calls) != 1 || calls[0].Peer.PID == 0 {
		t.Errorf("backup calls %+v, want one naming the peer", calls)
	}
}
