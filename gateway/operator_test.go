package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// End-to-end tests of the operator API: a real Gateway (real testrt
// runtimes, a real SQLite file) served by a real control.Server on a Unix
// socket, driven through control.Client as bcpgw's commands drive it.

// opCtl is a control server serving a test gateway's Operator, and a
// client dialled to it.
type opCtl struct {
	t    *testing.T
	path string
	cl   *control.Client
	stop func() // closes the clients, stops the server and waits for it; idempotent

	mu      sync.Mutex
	clients []*control.Client
}

// controlSocket returns a socket path in a short temp dir of its own
// (Unix socket paths are limited to about 108 bytes), removed at the end
// of the test.
func controlSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "op")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, control.SocketName)
}

// serveControl listens on path, serves e's gateway there until o.stop or
// the end of the test (before the gateway stops), and dials a client.
func serveControl(t *testing.T, e *e2e, path string) *opCtl {
	t.Helper()
	ln, err := control.Listen(path)
	if err != nil {
		t.Fatalf("control.Listen: %v", err)
	}
	srv := control.NewServer(control.ServerConfig{
		Backend: e.gw.Operator(),
		Logger:  hclog.New(&hclog.LoggerOptions{Name: "control", Output: e.logs, Level: hclog.Debug}),
		Version: "test",
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	o := &opCtl{t: t, path: ln.Path}
	o.stop = sync.OnceFunc(func() {
		o.mu.Lock()
		clients := o.clients
		o.clients = nil
		o.mu.Unlock()
		for _, c := range clients {
			c.Close()
		}
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("control Serve: %v", err)
			}
		case <-time.After(testWait):
			t.Errorf("control server did not stop")
		}
	})
	t.Cleanup(o.stop)
	o.cl = o.dial()
	return o
}

// dial opens another connection to the server; it is closed by o.stop.
func (o *opCtl) dial() *control.Client {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	cl, err := control.Dial(ctx, o.path)
	if err != nil {
		o.t.Fatalf("control.Dial: %v", err)
	}
	o.mu.Lock()
	o.clients = append(o.clients, cl)
	o.mu.Unlock()
	return cl
}

// nextPending waits, through approvals.list, for a pending item not in
// seen, adds it to seen and returns it.
func (o *opCtl) nextPending(seen map[string]bool) control.Approval {
	o.t.Helper()
	ctx := testCtx(o.t)
	var got *control.Approval
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		items, err := o.cl.Approvals(ctx, "")
		if err != nil {
			o.t.Fatalf("approvals.list: %v", err)
		}
		for i := range items {
			if !seen[items[i].ID] {
				got = &items[i]
				return true
			}
		}
		return false
	}) {
		o.t.Fatalf("no new pending approval item over the socket (seen %d)", len(seen))
	}
	seen[got.ID] = true
	return *got
}

// agent returns name's entry of agents.list.
func (o *opCtl) agent(name string) control.Agent {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	all, err := o.cl.Agents(ctx)
	if err != nil {
		o.t.Fatalf("agents.list: %v", err)
	}
	for _, a := range all {
		if a.Name == name {
			return a
		}
	}
	o.t.Fatalf("agents.list has no %s: %+v", name, all)
	return control.Agent{}
}

// waitAgent waits until name's entry of agents.list satisfies ok, and
// returns it.
func (o *opCtl) waitAgent(name string, ok func(control.Agent) bool) control.Agent {
	o.t.Helper()
	var a control.Agent
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		a = o.agent(name)
		return ok(a)
	}) {
		o.t.Fatalf("agent %s never reached the expected state: %+v", name, a)
	}
	return a
}

// events returns every event of the given types (all when none) over the
// socket, paging through events.list.
func (o *opCtl) events(types ...string) []control.Event {
	o.t.Helper()
	ctx := testCtx(o.t)
	var out []control.Event
	var since int64
	for {
		page, err := o.cl.Events(ctx, control.EventsParams{Since: since, Types: types})
		if err != nil {
			o.t.Fatalf("events.list: %v", err)
		}
		if len(page.Events) == 0 {
			return out
		}
		out = append(out, page.Events...)
		since = page.Next
	}
}

// nextNote returns the client's next event notification.
func nextNote(t *testing.T, cl *control.Client) control.EventNotification {
	t.Helper()
	select {
	case n, ok := <-cl.Notifications():
		if !ok {
			t.Fatalf("notifications closed: %v", cl.Err())
		}
		return n
	case <-time.After(testWait):
		t.Fatal("no event notification")
	}
	return control.EventNotification{}
}

// opUser is the user name the server gives this process (it is the
// client, so the peer): the uid's name, or the uid as text.
func opUser() string {
	if u, err := user.LookupId(strconv.Itoa(os.Getuid())); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// opWho is how events name this process as the deciding peer.
func opWho() string {
	return fmt.Sprintf("%s (uid %d, pid %d)", opUser(), os.Getuid(), os.Getpid())
}

// wantCode checks that err is a control error with code.
func wantCode(t *testing.T, err error, code int, what string) *control.Error {
	t.Helper()
	var ce *control.Error
	if !errors.As(err, &ce) || ce.Code != code {
		t.Errorf("%s: err = %v (code %d), want code %d", what, err, control.CodeOf(err), code)
		return nil
	}
	return ce
}

// assertPeerDecided checks that the item was decided by this process,
// through the socket.
func assertPeerDecided(t *testing.T, what string, a control.Approval) {
	t.Helper()
	uid := -1
	if a.DecidedUID != nil {
		uid = *a.DecidedUID
	}
	if a.DecidedBy != opUser() || uid != os.Getuid() || a.DecidedPID != os.Getpid() || a.DecidedAt.IsZero() {
		t.Errorf("%s: decided by %q uid %d pid %d at %v; want %q uid %d pid %d", what, a.DecidedBy, uid, a.DecidedPID,
			a.DecidedAt, opUser(), os.Getuid(), os.Getpid())
	}
}

// 1. approvals.list and approvals.get show a pending Cat-3 item with every
// field of the API.
func TestOperatorApprovalsListShowsPendingItem(t *testing.T) {
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e := startE2E(t, digests(1), func(c *Config) { c.Clock = frozenClock{at} })
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	e.prompt("researcher", "go")

	item := op.nextPending(map[string]bool{})
	stored := e.approval(item.ID)
	if item.Status != "pending" || item.Controller != "main" || item.Reader != "researcher" || item.SubscriptionID != "digest" ||
		item.QueryID != "" || item.Category != 3 || item.Directive != "Summarize what changed today." || item.BandwidthBits != 1100.0 {
		t.Errorf("approvals.list item = %+v", item)
	}
	if string(item.Response) != digestOut || item.SHA256 != store.ContentHash([]byte(digestOut)) || item.SHA256 != stored.SHA256 {
		t.Errorf("item content %s hash %s; want %s hash %s", item.Response, item.SHA256, digestOut, stored.SHA256)
	}
	if item.Anomalies == nil || len(item.Anomalies) != 0 {
		t.Errorf("anomalies = %#v, want an empty list", item.Anomalies)
	}
	if !item.CreatedAt.Equal(at) || !item.ExpiresAt.Equal(at.Add(DefaultApprovalTTL)) {
		t.Errorf("created %v, expires %v; want %v and %s later", item.CreatedAt, item.ExpiresAt, at, DefaultApprovalTTL)
	}
	if !item.DecidedAt.IsZero() || item.DecidedBy != "" || item.DecidedPID != 0 || item.Note != "" || item.Reason != "" {
		t.Errorf("a pending item shows a decision: %+v", item)
	}

	// The wire: the documented keys are there, with the values above.
	var page struct {
		Items []map[string]json.RawMessage `json:"items"`
		Next  *int64                       `json:"next"`
	}
	if err := op.cl.Call(ctx, control.MethodApprovalsList, control.ApprovalsParams{}, &page); err != nil {
		t.Fatalf("approvals.list (raw): %v", err)
	}
	if page.Next != nil {
		t.Errorf("approvals.list: next = %d on the only page, want none", *page.Next)
	}
	raw := page.Items
	if len(raw) != 1 {
		t.Fatalf("approvals.list returned %d items, want 1: %v", len(raw), raw)
	}
	want := map[string]string{
		"id":              strconv.Quote(item.ID),
		"status":          `"pending"`,
		"controller":      `"main"`,
		"reader":          `"researcher"`,
		"subscription_id": `"digest"`,
		"category":        `3`,
		"bandwidth_bits":  `1100`,
		"response":        digestOut,
		"sha256":          strconv.Quote(item.SHA256),
		"anomalies":       `[]`,
		"created_at":      `"2026-11-21T12:00:00Z"`,
		"expires_at":      `"2026-11-22T12:00:00Z"`,
	}
	for k, v := range want {
		got, ok := raw[0][k]
		if !ok {
			t.Errorf("approvals.list item lacks %q: %v", k, raw[0])
			continue
		}
		if string(got) != v {
			t.Errorf("approvals.list item %q = %s, want %s", k, got, v)
		}
	}
	for _, k := range []string{"decided_at", "decided_by", "decided_pid", "note", "reason"} {
		if v, ok := raw[0][k]; ok {
			t.Errorf("a pending item has %q = %s", k, v)
		}
	}

	// Filters: "pending" is the default; "all" has it; other statuses don't.
	for status, n := range map[string]int{"pending": 1, "all": 1, "approved": 0, "rejected": 0, "expired": 0, "dropped": 0} {
		items, err := op.cl.Approvals(ctx, status)
		if err != nil || len(items) != n {
			t.Errorf("approvals.list %q: %d items (%v), want %d", status, len(items), err, n)
		}
	}
	_, err := op.cl.Approvals(ctx, "bogus")
	wantCode(t, err, control.CodeInvalidParams, "approvals.list bogus")

	// approvals.get returns the same item, with its hash.
	got, err := op.cl.Approval(ctx, item.ID)
	if err != nil {
		t.Fatalf("approvals.get: %v", err)
	}
	if got.ID != item.ID || got.SHA256 != item.SHA256 || string(got.Response) != string(item.Response) || got.Status != "pending" ||
		!got.CreatedAt.Equal(item.CreatedAt) || !got.ExpiresAt.Equal(item.ExpiresAt) || got.BandwidthBits != item.BandwidthBits ||
		got.Category != item.Category || got.SubscriptionID != item.SubscriptionID {
		t.Errorf("approvals.get = %+v\nwant %+v", got, item)
	}
	var rawOne map[string]json.RawMessage
	if err := op.cl.Call(ctx, control.MethodApprovalsGet, control.IDParams{ID: item.ID}, &rawOne); err != nil {
		t.Fatalf("approvals.get (raw): %v", err)
	}
	if string(rawOne["sha256"]) != strconv.Quote(stored.SHA256) || string(rawOne["id"]) != strconv.Quote(item.ID) {
		t.Errorf("approvals.get raw = %v", rawOne)
	}
	// Listing is not deciding.
	e.assertNothingDelivered()
}

// 2. An approval over the socket delivers the item and records the peer
// that decided, from its credentials.
func TestOperatorApproveDeliversAndRecordsThePeer(t *testing.T) {
	e := startE2E(t, digests(1), nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	e.prompt("researcher", "go")
	item := op.nextPending(map[string]bool{})

	const note = "checked against the sources"
	a, err := op.cl.Approve(ctx, item.ID, item.SHA256, note)
	if err != nil {
		t.Fatalf("approvals.approve: %v", err)
	}
	if a.ID != item.ID || a.Status != "approved" || a.Note != note || a.SHA256 != item.SHA256 {
		t.Errorf("approve result = %+v", a)
	}
	assertPeerDecided(t, "approve result", a)

	// Delivered to the Controller, once, as the approved content.
	applied := e.waitRecords("main", "applied", 1)
	if string(applied[0].Response) != digestOut {
		t.Errorf("delivered %s, want %s", applied[0].Response, digestOut)
	}
	d := e.records("main", "delivery")
	if len(d) != 1 || d[0].Category != 3 || d[0].SubscriptionID != "digest" || !strings.Contains(d[0].Prompt, "(item "+item.ID+")") {
		t.Errorf("deliveries = %+v", d)
	}
	e.waitDelivered(applied[0].DeliveryID)
	if ds := e.deliveries(); len(ds) != 1 || ds[0].ApprovalID != item.ID {
		t.Errorf("stored deliveries = %+v", ds)
	}
	if v := e.waitRecords("researcher", "verdict", 1); !v[0].Success || v[0].Detail != digestVerdict {
		t.Errorf("verdict = %+v", v[0])
	}

	// The store records who decided, as the kernel told the server.
	st := e.approval(item.ID)
	if st.Status != store.ApprovalApproved || st.DecidedBy != (store.Decider{Name: opUser(), UID: os.Getuid(), PID: os.Getpid()}) ||
		st.DecidedSHA256 != item.SHA256 || st.Note != note {
		t.Errorf("stored item: status %s, by %q uid %d pid %d, sha %s, note %q; want approved by %q uid %d pid %d, sha %s, note %q",
			st.Status, st.DecidedBy.Name, st.DecidedBy.UID, st.DecidedBy.PID, st.DecidedSHA256, st.Note,
			opUser(), os.Getuid(), os.Getpid(), item.SHA256, note)
	}
	got, err := op.cl.Approval(ctx, item.ID)
	if err != nil {
		t.Fatalf("approvals.get: %v", err)
	}
	if got.Status != "approved" || got.Note != note {
		t.Errorf("approvals.get after approval = %+v", got)
	}
	assertPeerDecided(t, "approvals.get", got)
	if items, err := op.cl.Approvals(ctx, ""); err != nil || len(items) != 0 {
		t.Errorf("pending after approval: %+v (%v)", items, err)
	}

	// The event names the user with uid and pid.
	ev := e.eventsFor("approval_approved", item.ID)
	if len(ev) != 1 || ev[0].Detail != "approved by "+opWho() {
		t.Errorf("approval_approved events = %+v, want detail %q", ev, "approved by "+opWho())
	}
	sev := op.events("approval_approved")
	if len(sev) != 1 || sev[0].Ref != item.ID || !strings.Contains(sev[0].Detail, opWho()) {
		t.Errorf("approval_approved over the socket = %+v", sev)
	}
}

// 3. An item is decided once: a second decision over the socket is
// refused with already_decided, and nothing is delivered twice.
func TestOperatorSecondDecisionIsAlreadyDecided(t *testing.T) {
	e := startE2E(t, digests(1), nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	e.prompt("researcher", "go")
	item := op.nextPending(map[string]bool{})

	if _, err := op.cl.Approve(ctx, item.ID, item.SHA256, "first"); err != nil {
		t.Fatalf("first approval: %v", err)
	}
	_, err := op.cl.Approve(ctx, item.ID, item.SHA256, "second")
	if ce := wantCode(t, err, control.CodeAlreadyDecided, "second approval"); ce != nil {
		if !strings.Contains(ce.Message, "already approved") || !strings.Contains(ce.Message, item.ID) || !strings.Contains(ce.Message, opUser()) {
			t.Errorf("second approval: message %q should say the item was already approved, and by whom", ce.Message)
		}
		if ce.Reason() != "already_decided" {
			t.Errorf("second approval: reason %q", ce.Reason())
		}
	}
	_, err = op.cl.Reject(ctx, item.ID, item.SHA256, "too late")
	if ce := wantCode(t, err, control.CodeAlreadyDecided, "rejection after approval"); ce != nil && !strings.Contains(ce.Message, "already approved") {
		t.Errorf("rejection after approval: message %q", ce.Message)
	}
	_, err = op.cl.Reject(ctx, item.ID, "", "too late")
	wantCode(t, err, control.CodeAlreadyDecided, "rejection without hash after approval")

	applied := e.waitRecords("main", "applied", 1)
	e.waitDelivered(applied[0].DeliveryID)
	if ds := e.deliveries(); len(ds) != 1 || ds[0].ApprovalID != item.ID {
		t.Errorf("stored deliveries = %+v, want one", ds)
	}
	st := e.approval(item.ID)
	if st.Status != store.ApprovalApproved || st.Note != "first" || st.Reason != "" {
		t.Errorf("stored item after late decisions = %+v", st)
	}
	if n := len(e.eventsFor("approval_approved", item.ID)); n != 1 {
		t.Errorf("%d approval_approved events, want 1", n)
	}
	if n := len(e.eventsFor("approval_rejected", item.ID)); n != 0 {
		t.Errorf("%d approval_rejected events, want 0", n)
	}
	// A second item, approved after the first, is the barrier: main
	// takes its deliveries in order, so once the second is applied any
	// duplicate of the first would have been too.
	e.prompt("researcher", "publish")
	second := op.nextPending(map[string]bool{item.ID: true})
	if _, err := op.cl.Approve(ctx, second.ID, second.SHA256, ""); err != nil {
		t.Fatalf("second item: %v", err)
	}
	applied = e.waitRecords("main", "applied", 2)
	e.waitDelivered(applied[1].DeliveryID)
	if got := e.records("main", "delivery"); len(got) != 2 || got[0].DeliveryID == got[1].DeliveryID {
		t.Errorf("main received %+v, want the two items once each", got)
	}
}

// 4. Two clients deciding the same item at once: exactly one decision
// applies, the other is already_decided, and the store agrees.
func TestOperatorConcurrentClientsDecideOnce(t *testing.T) {
	const n = 9
	e := startE2E(t, digests(n), nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	clients := [2]*control.Client{op.dial(), op.dial()}
	e.prompt("researcher", "go")

	// decision is one client's decision: an approval with a note, or a
	// rejection with a reason.
	type decision struct {
		approve bool
		text    string // the note or the reason, so the store tells who won
	}
	seen := map[string]bool{}
	approvedIDs := map[string]bool{}
	approveWins := 0
	for i := range n {
		item := op.nextPending(seen)
		// Two rounds in three race an approval against a rejection, the
		// approving client alternating; every third races two approvals
		// (the Reject path is shorter than Approve's, so approvals tend to
		// lose against rejections).
		ds := [2]decision{{true, fmt.Sprintf("approved by client 0 in round %d", i)}, {false, fmt.Sprintf("rejected by client 1 in round %d", i)}}
		switch i % 3 {
		case 1:
			ds = [2]decision{{false, fmt.Sprintf("rejected by client 0 in round %d", i)}, {true, fmt.Sprintf("approved by client 1 in round %d", i)}}
		case 2:
			ds[1] = decision{true, fmt.Sprintf("approved by client 1 in round %d", i)}
		}
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if ds[k].approve {
					_, errs[k] = clients[k].Approve(ctx, item.ID, item.SHA256, ds[k].text)
				} else {
					_, errs[k] = clients[k].Reject(ctx, item.ID, item.SHA256, ds[k].text)
				}
			}()
		}
		close(start)
		wg.Wait()

		winner := -1
		for k, err := range errs {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("round %d: both decisions applied", i)
				}
				winner = k
				continue
			}
			wantCode(t, err, control.CodeAlreadyDecided, fmt.Sprintf("round %d, client %d", i, k))
		}
		if winner < 0 {
			t.Fatalf("round %d: no decision applied (errors %v)", i, errs)
		}
		w := ds[winner]
		if loser := errs[1-winner]; loser != nil {
			want := map[bool]string{true: "already approved", false: "already rejected"}[w.approve]
			if !strings.Contains(loser.Error(), want) {
				t.Errorf("round %d: the loser's message %q should say %q", i, loser, want)
			}
		}
		st := e.approval(item.ID)
		switch {
		case w.approve && (st.Status != store.ApprovalApproved || st.Note != w.text || st.Reason != ""),
			!w.approve && (st.Status != store.ApprovalRejected || st.Reason != w.text || st.Note != ""):
			t.Errorf("round %d: stored %s, note %q, reason %q; the winner was %+v", i, st.Status, st.Note, st.Reason, w)
		}
		if st.DecidedBy.PID != os.Getpid() || st.DecidedBy.Name != opUser() {
			t.Errorf("round %d: decided by %q pid %d", i, st.DecidedBy.Name, st.DecidedBy.PID)
		}
		if w.approve {
			approvedIDs[item.ID] = true
			if !ds[1-winner].approve {
				approveWins++
			}
		}
		// The Reader hears one verdict per item, which lets it publish
		// the next.
		if v := e.waitRecords("researcher", "verdict", i+1)[i]; v.Success != w.approve {
			t.Errorf("round %d: verdict %+v, approved %v", i, v, w.approve)
		}
	}
	t.Logf("%d of %d items approved; %d approvals won against a rejection", len(approvedIDs), n, approveWins)

	delivered := e.waitAllDelivered(len(approvedIDs))
	e.waitRecords("main", "applied", len(approvedIDs))
	byApproval := map[string]int{}
	for _, d := range delivered {
		byApproval[d.ApprovalID]++
	}
	for id := range seen {
		want := 0
		if approvedIDs[id] {
			want = 1
		}
		if byApproval[id] != want {
			t.Errorf("item %s (approved %v): %d deliveries stored", id, approvedIDs[id], byApproval[id])
		}
		if got := len(e.eventsFor("approval_approved", id)) + len(e.eventsFor("approval_rejected", id)); got != 1 {
			t.Errorf("item %s: %d decision events, want 1", id, got)
		}
	}
	if got := e.records("main", "delivery"); len(got) != len(approvedIDs) {
		t.Errorf("main received %d deliveries, want %d", len(got), len(approvedIDs))
	}
}

// 5. A decision naming the wrong content is refused and changes nothing;
// an unknown id is not_found.
func TestOperatorHashMismatchAndUnknownItem(t *testing.T) {
	e := startE2E(t, digests(1), nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	e.prompt("researcher", "go")
	item := op.nextPending(map[string]bool{})

	other := store.ContentHash([]byte(`{"summary":"Something else."}`))
	for _, h := range []string{other, strings.ToUpper(item.SHA256), item.SHA256[:len(item.SHA256)-1]} {
		_, err := op.cl.Approve(ctx, item.ID, h, "")
		if ce := wantCode(t, err, control.CodeHashMismatch, "approve with hash "+h); ce != nil && ce.Reason() != "hash_mismatch" {
			t.Errorf("reason %q", ce.Reason())
		}
	}
	_, err := op.cl.Reject(ctx, item.ID, other, "no")
	wantCode(t, err, control.CodeHashMismatch, "reject with a wrong hash")
	// An approval must name a hash at all.
	_, err = op.cl.Approve(ctx, item.ID, "", "")
	wantCode(t, err, control.CodeInvalidParams, "approve without a hash")

	got, err := op.cl.Approval(ctx, item.ID)
	if err != nil {
		t.Fatalf("approvals.get: %v", err)
	}
	if got.Status != "pending" || !got.DecidedAt.IsZero() || got.DecidedBy != "" {
		t.Errorf("item after mismatches = %+v", got)
	}
	if v := e.records("researcher", "verdict"); len(v) != 0 {
		t.Errorf("verdict after mismatches: %+v", v)
	}
	e.assertNothingDelivered()

	// Unknown ids.
	_, err = op.cl.Approval(ctx, "no-such-item")
	wantCode(t, err, control.CodeNotFound, "approvals.get of an unknown id")
	_, err = op.cl.Approve(ctx, "no-such-item", item.SHA256, "")
	wantCode(t, err, control.CodeNotFound, "approve of an unknown id")
	_, err = op.cl.Reject(ctx, "no-such-item", "", "no")
	wantCode(t, err, control.CodeNotFound, "reject of an unknown id")

	// Still decidable with the right hash.
	if _, err := op.cl.Approve(ctx, item.ID, item.SHA256, ""); err != nil {
		t.Fatalf("approve with the right hash: %v", err)
	}
	if a := e.waitRecords("main", "applied", 1); string(a[0].Response) != digestOut {
		t.Errorf("delivered %s", a[0].Response)
	}
}

// An item approved after its expiry (before the sweep) is expired, and
// says so.
func TestOperatorApproveAfterExpiryIsExpired(t *testing.T) {
	const ttl = 300 * time.Millisecond
	e := startE2E(t, digests(1), func(c *Config) { c.ApprovalTTL, c.ExpiryCheck = ttl, time.Hour })
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	e.prompt("researcher", "go")
	item := op.nextPending(map[string]bool{})
	if !testproc.CheckFor(testWait, pollStep, func() bool { return time.Now().After(item.ExpiresAt) }) {
		t.Fatal("the item's expiry never passed")
	}
	_, err := op.cl.Approve(ctx, item.ID, item.SHA256, "late")
	if ce := wantCode(t, err, control.CodeExpired, "approve after expiry"); ce != nil && !strings.Contains(ce.Message, item.ID) {
		t.Errorf("message %q does not name the item", ce.Message)
	}
	if got, err := op.cl.Approval(ctx, item.ID); err != nil || got.Status != "expired" {
		t.Errorf("approvals.get after a late approval = %+v (%v)", got, err)
	}
	_, err = op.cl.Approve(ctx, item.ID, item.SHA256, "again")
	if ce := wantCode(t, err, control.CodeAlreadyDecided, "second approve"); ce != nil && !strings.Contains(ce.Message, "already expired") {
		t.Errorf("second approve: message %q", ce.Message)
	}
	if v := e.waitRecords("researcher", "verdict", 1)[0]; v.Success || !strings.HasPrefix(v.Detail, "approval_expired: ") {
		t.Errorf("verdict = %+v, want approval_expired", v)
	}
	e.assertNothingDelivered()
}

// 6. Items pending when the gateway stops are decided over the socket of
// the next run, and delivered.
func TestOperatorApproveAfterGatewayRestart(t *testing.T) {
	dir := t.TempDir()
	set, vars := writeAgents(t, dir, digests(1))
	path := controlSocket(t)

	e1 := runE2E(t, dir, set, vars, nil)
	op1 := serveControl(t, e1, path)
	e1.prompt("researcher", "go")
	item := op1.nextPending(map[string]bool{})
	op1.stop()
	e1.stop() // stops every session and closes the store
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind after the server stopped: %v", err)
	}
	if cl, err := control.Dial(testCtx(t), path); !errors.Is(err, control.ErrNotRunning) {
		if cl != nil {
			cl.Close()
		}
		t.Errorf("Dial with no server: err = %v, want ErrNotRunning", err)
	}

	// The next run's socket may be up before Run: the queue can be read,
	// but a decision is refused cleanly until Run has loaded the store.
	e2 := newE2E(t, dir, set, vars, nil)
	op2 := serveControl(t, e2, path)
	early, err := op2.cl.Approvals(testCtx(t), "")
	if err != nil || len(early) != 1 || early[0].ID != item.ID {
		t.Fatalf("approvals.list before Run = %+v (%v)", early, err)
	}
	_, err = op2.cl.Approve(testCtx(t), item.ID, item.SHA256, "too early")
	wantCode(t, err, control.CodeNotRunning, "approve before Run")
	if st := e2.approval(item.ID); st.Status != store.ApprovalPending {
		t.Fatalf("a refused early approval changed the item: %+v", st)
	}
	e2.run()
	e2.running()
	pending, err := op2.cl.Approvals(testCtx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].ID != item.ID || pending[0].SHA256 != item.SHA256 || string(pending[0].Response) != digestOut {
		t.Fatalf("pending after restart = %+v, want %+v", pending, item)
	}
	a, err := op2.cl.Approve(testCtx(t), item.ID, item.SHA256, "after restart")
	if err != nil {
		t.Fatalf("approve after restart: %v", err)
	}
	assertPeerDecided(t, "approve after restart", a)
	applied := e2.waitRecords("main", "applied", 1)
	if string(applied[0].Response) != digestOut {
		t.Errorf("delivered %s, want %s", applied[0].Response, digestOut)
	}
	if d := e2.records("main", "delivery"); len(d) != 1 || !strings.Contains(d[0].Prompt, "(item "+item.ID+")") {
		t.Errorf("deliveries = %+v", d)
	}
	e2.waitDelivered(applied[0].DeliveryID)
	if ds := e2.deliveries(); len(ds) != 1 || ds[0].ApprovalID != item.ID {
		t.Errorf("stored deliveries = %+v", ds)
	}
	if ev := e2.eventsFor("approval_approved", item.ID); len(ev) != 1 || !strings.Contains(ev[0].Detail, opWho()) {
		t.Errorf("approval_approved events = %+v", ev)
	}
}

// 7. A subscription to approval_* hears an item queued and approved, as
// the events are stored, in order.
func TestOperatorSubscribePushesApprovalEvents(t *testing.T) {
	e := startE2E(t, digests(1), nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	e.running()

	_, err := op.cl.Subscribe(ctx, control.SubscribeParams{Types: []string{"approval_%"}})
	wantCode(t, err, control.CodeInvalidParams, "subscribe with a bad type")
	sub, err := op.cl.Subscribe(ctx, control.SubscribeParams{Types: []string{"approval_*"}})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if sub.Subscription == "" {
		t.Fatalf("subscribe result = %+v", sub)
	}

	// Nothing is asked of the socket from here on until the item is
	// approved: the notification must come on its own.
	e.prompt("researcher", "go")
	queued := nextNote(t, op.cl)
	if queued.Subscription != sub.Subscription || queued.Event.Kind != "approval_queued" || queued.Event.Seq <= sub.Cursor ||
		queued.Event.Agent != "researcher" || queued.Event.Peer != "main" || queued.Event.Category != 3 || queued.Event.Bits != 1100.0 {
		t.Fatalf("first notification = %+v (cursor %d), want approval_queued", queued, sub.Cursor)
	}
	item, err := op.cl.Approval(ctx, queued.Event.Ref)
	if err != nil {
		t.Fatalf("approvals.get of the queued event's ref %q: %v", queued.Event.Ref, err)
	}
	if item.Status != "pending" {
		t.Errorf("queued item = %+v", item)
	}
	if _, err := op.cl.Approve(ctx, item.ID, item.SHA256, "ok"); err != nil {
		t.Fatalf("approve: %v", err)
	}
	approved := nextNote(t, op.cl)
	if approved.Subscription != sub.Subscription || approved.Event.Kind != "approval_approved" || approved.Event.Ref != item.ID ||
		approved.Event.Seq <= queued.Event.Seq || !strings.Contains(approved.Event.Detail, opWho()) {
		t.Errorf("second notification = %+v, want approval_approved of %s after seq %d", approved, item.ID, queued.Event.Seq)
	}

	// Other kinds were stored meanwhile (sessions, deliveries) but are not
	// sent; a subscription from the beginning replays what matches.
	e.waitRecords("main", "applied", 1)
	other := op.dial()
	zero := int64(0)
	replay, err := other.Subscribe(ctx, control.SubscribeParams{Types: []string{"approval_queued"}, Since: &zero})
	if err != nil {
		t.Fatalf("subscribe since 0: %v", err)
	}
	if replay.Cursor != 0 {
		t.Errorf("cursor = %d, want 0", replay.Cursor)
	}
	if n := nextNote(t, other); n.Subscription != replay.Subscription || n.Event.Seq != queued.Event.Seq || n.Event.Kind != "approval_queued" {
		t.Errorf("replayed notification = %+v, want seq %d", n, queued.Event.Seq)
	}
	if err := other.Unsubscribe(ctx, replay.Subscription); err != nil {
		t.Errorf("unsubscribe: %v", err)
	}
	wantCode(t, other.Unsubscribe(ctx, replay.Subscription), control.CodeNotFound, "second unsubscribe")
	// A subscription belongs to its connection.
	wantCode(t, other.Unsubscribe(ctx, sub.Subscription), control.CodeNotFound, "unsubscribe from another connection")
	if err := op.cl.Unsubscribe(ctx, sub.Subscription); err != nil {
		t.Errorf("unsubscribe: %v", err)
	}
}

// 8. events.list filters by seq and by type, and Next pages through.
func TestOperatorEventsListFiltersAndPages(t *testing.T) {
	const n = 3
	e := startE2E(t, pair(100000, 100000, "review", nil, map[string]string{
		"PUBLISH": publishes(pub("research-findings", "main", `{"topic": "item {i}", "summary": "s", "relevance": 1}`, n)),
	}), nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	e.prompt("researcher", "go")
	e.waitAllDelivered(n)
	e.waitRecords("main", "applied", n)

	all := op.events()
	if len(all) == 0 {
		t.Fatal("no events")
	}
	last := all[len(all)-1].Seq
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq {
			t.Fatalf("events out of order: %d after %d", all[i].Seq, all[i-1].Seq)
		}
	}
	// They are the store's events.
	stored, err := e.store.Events(ctx, 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) < len(all) {
		t.Fatalf("store has %d events, the socket %d", len(stored), len(all))
	}
	for i, ev := range all {
		s := stored[i]
		if ev.Seq != s.Seq || ev.Kind != s.Kind || ev.Agent != s.Agent || ev.Peer != s.Peer || ev.Ref != s.Ref ||
			ev.Category != s.Category || ev.Bits != s.Bits || ev.Detail != s.Detail || !ev.Time.Equal(s.Time) {
			t.Errorf("event %d over the socket %+v, in the store %+v", i, ev, s)
		}
	}
	// upTo cuts a result at the snapshot, as events may still be added.
	upTo := func(evs []control.Event) []control.Event {
		var out []control.Event
		for _, ev := range evs {
			if ev.Seq <= last {
				out = append(out, ev)
			}
		}
		return out
	}
	filter := func(keep func(control.Event) bool) []control.Event {
		var out []control.Event
		for _, ev := range all {
			if keep(ev) {
				out = append(out, ev)
			}
		}
		return out
	}
	seqs := func(evs []control.Event) []int64 {
		out := make([]int64, len(evs))
		for i, ev := range evs {
			out[i] = ev.Seq
		}
		return out
	}
	list := func(p control.EventsParams) control.EventsPage {
		t.Helper()
		page, err := op.cl.Events(ctx, p)
		if err != nil {
			t.Fatalf("events.list %+v: %v", p, err)
		}
		return page
	}

	// since
	mid := all[len(all)/2].Seq
	page := list(control.EventsParams{Since: mid})
	if got, want := seqs(upTo(page.Events)), seqs(filter(func(ev control.Event) bool { return ev.Seq > mid })); !slices.Equal(got, want) {
		t.Errorf("since %d: seqs %v, want %v", mid, got, want)
	}
	// types: an exact kind
	page = list(control.EventsParams{Types: []string{"delivery_acked"}})
	acked := upTo(page.Events)
	if len(acked) != n {
		t.Errorf("delivery_acked events = %+v, want %d", acked, n)
	}
	for _, ev := range acked {
		if ev.Kind != "delivery_acked" || ev.Agent != "main" || ev.Peer != "researcher" || ev.Category != 2 {
			t.Errorf("delivery_acked event = %+v", ev)
		}
	}
	// types: a prefix and a kind together
	types := []string{"session_*", "publish_accepted"}
	match := func(ev control.Event) bool {
		return strings.HasPrefix(ev.Kind, "session_") || ev.Kind == "publish_accepted"
	}
	page = list(control.EventsParams{Types: types})
	if got, want := seqs(upTo(page.Events)), seqs(filter(match)); !slices.Equal(got, want) || len(want) < n+2 {
		t.Errorf("types %v: seqs %v, want %v (at least %d)", types, got, want, n+2)
	}
	for _, ev := range page.Events {
		if !match(ev) {
			t.Errorf("types %v returned %s", types, ev.Kind)
		}
	}
	// since and types together
	page = list(control.EventsParams{Since: mid, Types: types})
	if got, want := seqs(upTo(page.Events)), seqs(filter(func(ev control.Event) bool { return ev.Seq > mid && match(ev) })); !slices.Equal(got, want) {
		t.Errorf("since %d, types %v: seqs %v, want %v", mid, types, got, want)
	}
	// A kind that matches nothing: an empty list, Next is since.
	page = list(control.EventsParams{Since: 1, Types: []string{"no_such_kind"}})
	if page.Events == nil || len(page.Events) != 0 || page.Next != 1 {
		t.Errorf("no match: page = %+v, want an empty list and next 1", page)
	}
	_, err = op.cl.Events(ctx, control.EventsParams{Types: []string{"Delivery sent"}})
	wantCode(t, err, control.CodeInvalidParams, "events.list with a bad type")

	// Paging by Next, two at a time, reads the same events.
	var paged []control.Event
	var since int64
	pages := 0
	for since < last {
		page := list(control.EventsParams{Since: since, Limit: 2})
		if len(page.Events) == 0 || len(page.Events) > 2 {
			t.Fatalf("page after %d has %d events, want 1 or 2", since, len(page.Events))
		}
		if page.Next != page.Events[len(page.Events)-1].Seq {
			t.Fatalf("page after %d: next %d, last seq %d", since, page.Next, page.Events[len(page.Events)-1].Seq)
		}
		paged = append(paged, page.Events...)
		since = page.Next
		pages++
	}
	if got, want := seqs(upTo(paged)), seqs(all); !slices.Equal(got, want) {
		t.Errorf("paged seqs %v, want %v", got, want)
	}
	if pages < (len(all)+1)/2 {
		t.Errorf("%d pages for %d events", pages, len(all))
	}
	// Paging with a type filter.
	var pagedTypes []control.Event
	since = 0
	for {
		page := list(control.EventsParams{Since: since, Limit: 1, Types: types})
		if len(page.Events) == 0 {
			if page.Next != since {
				t.Errorf("empty page: next %d, want %d", page.Next, since)
			}
			break
		}
		pagedTypes = append(pagedTypes, page.Events...)
		since = page.Next
	}
	if got, want := seqs(upTo(pagedTypes)), seqs(filter(match)); !slices.Equal(got, want) {
		t.Errorf("paged with types: seqs %v, want %v", got, want)
	}
}

// 9. agents.list, agents.stop, agents.start and agents.prompt, each
// recorded as an operator_* event naming the user.
func TestOperatorAgentsListStopStartPrompt(t *testing.T) {
	e := startE2E(t, []agentSpec{
		{name: "main", front: "description: the planner\nautostart: true\n" + fmt.Sprintf(mainChannel, 100000, "review")},
		{name: "researcher", front: fmt.Sprintf(researcherChannel, 100000)},
	}, nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)

	// main is autostarted; researcher waits for work.
	m := op.waitAgent("main", func(a control.Agent) bool { return a.State == "running" })
	r := op.agent("researcher")
	if !m.Autostart || m.Held || m.PID <= 0 || m.Session == "" || m.Since.IsZero() || m.Description != "the planner" {
		t.Errorf("main = %+v", m)
	}
	if r.State != "stopped" || r.Autostart || r.PID != 0 || r.Session != "" {
		t.Errorf("researcher = %+v", r)
	}
	if !slices.Equal(m.Roles, []string{"controller"}) {
		t.Errorf("main's roles = %v, want [controller]: it controls the channel to researcher", m.Roles)
	}
	if !slices.Equal(r.Roles, []string{"reader"}) {
		t.Errorf("researcher's roles = %v, want [reader]: it reads for main", r.Roles)
	}
	if len(m.Channels) != 1 || m.Channels[0].Peer != "researcher" || m.Channels[0].MaxCategory != 3 || m.Channels[0].BudgetBits != 100000 {
		t.Errorf("main's channels = %+v", m.Channels)
	}
	// control.Channel.Role is the holding agent's side of the channel.
	if len(m.Channels) == 1 && m.Channels[0].Role != "controller" {
		t.Errorf("main's channel to researcher has role %q, want main's side \"controller\"", m.Channels[0].Role)
	}
	if len(r.Channels) != 1 || r.Channels[0].Peer != "main" || r.Channels[0].Role != "reader" {
		t.Errorf("researcher's channels = %+v, want one to main on the reader's side", r.Channels)
	}
	if syscall.Kill(m.PID, 0) != nil {
		t.Errorf("main's pid %d is not a live process", m.PID)
	}

	// A prompt reaches the running runtime: the one agents.list names.
	if err := op.cl.Prompt(ctx, "main", "hello main"); err != nil {
		t.Fatalf("agents.prompt main: %v", err)
	}
	p := e.waitRecords("main", "prompt", 1)[0]
	if p.Prompt != "hello main" || p.Pid != procKey(m.PID) {
		t.Errorf("main's prompt record = %+v, want \"hello main\" from pid %d", p, m.PID)
	}

	// Stop: the session ends and, although main is autostarted, it is
	// held: once the supervisor shows it stopped it has decided not to
	// restart it.
	if err := op.cl.StopAgent(ctx, "main"); err != nil {
		t.Fatalf("agents.stop main: %v", err)
	}
	stopped := op.waitAgent("main", func(a control.Agent) bool { return a.State == "stopped" })
	if !stopped.Held || stopped.PID != 0 || stopped.Session != "" {
		t.Errorf("main after stop = %+v", stopped)
	}
	if !testproc.CheckFor(testWait, pollStep, func() bool { return syscall.Kill(m.PID, 0) != nil }) {
		t.Errorf("main's process %d still exists after stop", m.PID)
	}
	e.waitEventMatching("session_stopped", "", func(ev store.Event) bool { return ev.Agent == "main" && ev.Ref == m.Session })
	if ev := e.eventsMatching("agent_stopped", "", func(ev store.Event) bool { return ev.Agent == "main" }); len(ev) != 1 ||
		!strings.Contains(ev[0].Detail, opWho()) {
		t.Errorf("agent_stopped events = %+v, want one naming %s", ev, opWho())
	}

	// Other work goes on; main stays stopped.
	if err := op.cl.Prompt(ctx, "researcher", "hello researcher"); err != nil {
		t.Fatalf("agents.prompt researcher: %v", err)
	}
	if rp := e.waitRecords("researcher", "prompt", 1)[0]; rp.Prompt != "hello researcher" {
		t.Errorf("researcher's prompt record = %+v", rp)
	}
	r = op.waitAgent("researcher", func(a control.Agent) bool { return a.State == "running" })
	if m := op.agent("main"); m.State != "stopped" || !m.Held {
		t.Errorf("main after other work = %+v, want stopped and held", m)
	}
	if n := len(e.eventsMatching("session_started", "", func(ev store.Event) bool { return ev.Agent == "main" })); n != 1 {
		t.Errorf("main's sessions started: %d, want 1 (not restarted while held)", n)
	}

	// Start: a new session, released from the hold.
	if err := op.cl.StartAgent(ctx, "main"); err != nil {
		t.Fatalf("agents.start main: %v", err)
	}
	again := op.agent("main")
	if again.State != "running" || again.Held || again.PID <= 0 || again.PID == m.PID || again.Session == "" || again.Session == m.Session {
		t.Errorf("main after start = %+v (before: pid %d, session %s)", again, m.PID, m.Session)
	}
	if err := op.cl.Prompt(ctx, "main", "hello again"); err != nil {
		t.Fatalf("agents.prompt main: %v", err)
	}
	if p := e.waitRecords("main", "prompt", 2)[1]; p.Prompt != "hello again" || p.Pid != procKey(again.PID) {
		t.Errorf("main's second prompt record = %+v, want pid %d", p, again.PID)
	}

	// Unknown agents and missing names.
	wantCode(t, op.cl.StartAgent(ctx, "nobody"), control.CodeNotFound, "agents.start nobody")
	wantCode(t, op.cl.StopAgent(ctx, "nobody"), control.CodeNotFound, "agents.stop nobody")
	wantCode(t, op.cl.Prompt(ctx, "nobody", "hi"), control.CodeNotFound, "agents.prompt nobody")
	wantCode(t, op.cl.StartAgent(ctx, ""), control.CodeInvalidParams, "agents.start without a name")
	wantCode(t, op.cl.Prompt(ctx, "main", ""), control.CodeInvalidParams, "agents.prompt without text")

	// Every action is an event naming who acted; the refused ones are
	// not. The events are stored asynchronously: wait for the last.
	type act struct{ kind, agent, detail string }
	var got []act
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		got = nil
		for _, ev := range op.events("operator_*") {
			got = append(got, act{ev.Kind, ev.Agent, ev.Detail})
		}
		return len(got) >= 5
	}) {
		t.Errorf("operator events: %+v, want 5", got)
	}
	by := " by " + opWho()
	want := []act{
		{"operator_prompt", "main", "prompt of 10 bytes" + by},
		{"operator_stop", "main", "stopped" + by},
		{"operator_prompt", "researcher", "prompt of 16 bytes" + by},
		{"operator_start", "main", "started" + by},
		{"operator_prompt", "main", "prompt of 11 bytes" + by},
	}
	if !slices.Equal(got, want) {
		t.Errorf("operator events:\n got %+v\nwant %+v", got, want)
	}
}

// agents.stop then agents.start, as a script restarting an agent does:
// the start must leave the agent with a session, not hand back the one
// being stopped. The stop is answered as soon as the supervisor has asked
// the session to end, so the start usually arrives while it is ending.
// Repeated, as the window is the runtime's exit.
func TestOperatorStartRightAfterStopLeavesARunningSession(t *testing.T) {
	e := startE2E(t, pair(100000, 100000, "review", nil, nil), nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	if err := op.cl.StartAgent(ctx, "researcher"); err != nil {
		t.Fatalf("agents.start: %v", err)
	}
	for i := range 5 {
		before := op.waitAgent("researcher", func(a control.Agent) bool { return a.State == "running" })
		if err := op.cl.StopAgent(ctx, "researcher"); err != nil {
			t.Fatalf("cycle %d: agents.stop: %v", i, err)
		}
		if err := op.cl.StartAgent(ctx, "researcher"); err != nil {
			t.Fatalf("cycle %d: agents.start: %v", i, err)
		}
		after := op.agent("researcher")
		if after.State != "running" || after.Session == before.Session {
			t.Errorf("cycle %d: after agents.start researcher is %s in session %s; the session stopped was %s",
				i, after.State, after.Session, before.Session)
		}
		// Once the stopped session has ended, the agent still has one.
		e.waitEventMatching("session_stopped", "", func(ev store.Event) bool { return ev.Ref == before.Session })
		settled := op.waitAgent("researcher", func(a control.Agent) bool { return a.Session != before.Session })
		if settled.State != "running" || settled.Held {
			t.Fatalf("cycle %d: stop then start left researcher %s (held %v) with no session", i, settled.State, settled.Held)
		}
	}
	// A prompt reaches the session agents.list names.
	cur := op.agent("researcher")
	if err := op.cl.Prompt(ctx, "researcher", "still there?"); err != nil {
		t.Fatalf("agents.prompt: %v", err)
	}
	if p := e.waitRecords("researcher", "prompt", 1)[0]; p.Pid != procKey(cur.PID) {
		t.Errorf("prompt reached pid %d, agents.list says %d", p.Pid, cur.PID)
	}
}

// sessionPids maps each of agent's sessions to its process, from the
// session_started events ("pid 1234: ...").
func sessionPids(t *testing.T, e *e2e, agent string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, ev := range e.eventsMatching("session_started", "", func(ev store.Event) bool { return ev.Agent == agent }) {
		var pid int
		if _, err := fmt.Sscanf(ev.Detail, "pid %d:", &pid); err != nil {
			t.Fatalf("session_started detail %q: %v", ev.Detail, err)
		}
		out[ev.Ref] = pid
	}
	return out
}

// assertExposure checks one session's exposure: deliveries Cat-2 pushes
// from researcher of bits each.
func assertExposure(t *testing.T, what string, s control.SessionExposure, deliveries int, bits float64) {
	t.Helper()
	total := float64(deliveries) * bits
	if s.Agent != "main" || s.Session == "" || s.StartedAt.IsZero() || !near(s.Bits, total) || len(s.ByCat) != 1 || !near(s.ByCat[2], total) {
		t.Errorf("%s: %+v, want %d deliveries of %v bits (%v) in Cat-2", what, s, deliveries, bits, total)
	}
	if len(s.Channels) != 1 || s.Channels[0].Reader != "researcher" || s.Channels[0].Category != 2 ||
		s.Channels[0].Deliveries != deliveries || !near(s.Channels[0].Bits, total) {
		t.Errorf("%s: channels %+v, want researcher Cat-2 with %d deliveries and %v bits", what, s.Channels, deliveries, total)
	}
}

// 10a. The report counts the Cat-2 pushes delivered to the Controller's
// current session.
func TestOperatorReportCountsDeliveriesOfTheSession(t *testing.T) {
	const n = 3
	e := startE2E(t, pair(100000, 100000, "review", nil, map[string]string{
		"PUBLISH": publishes(pub("research-findings", "main", `{"topic": "item {i}", "summary": "s", "relevance": 1}`, n)),
	}), nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	bits := e.gw.set.Load().Subscription("main", "researcher", "research-findings").Bits
	if bits <= 0 {
		t.Fatalf("research-findings bits = %v", bits)
	}
	// Before any delivery: no session of main, nothing exposed.
	e.running()
	if r, err := op.cl.Report(ctx, control.ReportParams{}); err != nil || len(r.Sessions) != 0 {
		t.Errorf("report before anything = %+v (%v), want no sessions", r, err)
	}

	e.prompt("researcher", "go")
	e.waitAllDelivered(n)
	e.waitRecords("main", "applied", n)

	r, err := op.cl.Report(ctx, control.ReportParams{Agent: "main"})
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if len(r.Sessions) != 1 {
		t.Fatalf("report sessions = %+v, want main's one session", r.Sessions)
	}
	s := r.Sessions[0]
	assertExposure(t, "main's session", s, n, bits)
	if cur := op.agent("main"); s.Session != cur.Session || !s.EndedAt.IsZero() {
		t.Errorf("reported session %s (ended %v), main's current session is %s", s.Session, s.EndedAt, cur.Session)
	}
	// The whole report has only main: researcher is no Controller and
	// was sent nothing.
	all, err := op.cl.Report(ctx, control.ReportParams{})
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if len(all.Sessions) != 1 || all.Sessions[0].Session != s.Session {
		t.Errorf("full report = %+v", all.Sessions)
	}
	if r, err := op.cl.Report(ctx, control.ReportParams{Agent: "researcher"}); err != nil || len(r.Sessions) != 0 {
		t.Errorf("researcher's report = %+v (%v), want no sessions", r, err)
	}
	_, err = op.cl.Report(ctx, control.ReportParams{Agent: "nobody"})
	wantCode(t, err, control.CodeNotFound, "report of an unknown agent")
	// The wire keys of by_category are the categories.
	var raw struct {
		Sessions []struct {
			ByCat map[string]float64 `json:"by_category"`
		} `json:"sessions"`
	}
	if err := op.cl.Call(ctx, control.MethodReport, control.ReportParams{Agent: "main"}, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Sessions) != 1 || !near(raw.Sessions[0].ByCat["2"], float64(n)*bits) {
		t.Errorf("raw report = %+v", raw)
	}
}

// 10b. A delivery sent to a session that crashed before acknowledging it
// counts for that session and, re-sent, for the next one too.
func TestOperatorReportCountsRedeliveryInTheNewSession(t *testing.T) {
	const acked = 2 // deliveries the first session acknowledges
	// main's first process dies on delivery acked+1, before result; two
	// more come after it.
	e := startE2E(t, pair(100000, 100000, "review", map[string]string{"CRASH_AT": strconv.Itoa(acked + 1)}, map[string]string{
		"PUBLISH": publishes(pub("research-findings", "main", `{"topic": "item {i}", "summary": "s", "relevance": 1}`, acked+2)),
	}), nil)
	op := serveControl(t, e, controlSocket(t))
	ctx := testCtx(t)
	bits := e.gw.set.Load().Subscription("main", "researcher", "research-findings").Bits
	e.prompt("researcher", "go")
	e.waitAllDelivered(acked + 2)
	e.waitRecords("main", "applied", acked+2)
	retried := e.waitEvent("delivery_retried", "")

	// What main's processes received.
	byPid := map[int]int{}
	var pids []int
	for _, d := range e.records("main", "delivery") {
		if byPid[d.Pid] == 0 {
			pids = append(pids, d.Pid)
		}
		byPid[d.Pid]++
	}
	if len(pids) != 2 || byPid[pids[0]] != acked+1 || byPid[pids[1]] != 2 {
		t.Fatalf("main's deliveries by process = %v (in order %v), want %d then 2", byPid, pids, acked+1)
	}

	r, err := op.cl.Report(ctx, control.ReportParams{Agent: "main"})
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if len(r.Sessions) != 2 {
		t.Fatalf("report sessions = %+v, want main's two", r.Sessions)
	}
	first, second := r.Sessions[0], r.Sessions[1]
	assertExposure(t, "the crashed session", first, acked+1, bits)
	assertExposure(t, "the new session", second, 2, bits)
	if first.EndedAt.IsZero() || !second.EndedAt.IsZero() || first.Session == second.Session {
		t.Errorf("sessions %s (ended %v) and %s (ended %v): want the first ended, the second not", first.Session, first.EndedAt,
			second.Session, second.EndedAt)
	}
	// The sessions are the processes that received the deliveries (the
	// live one is matched by its sandbox; the first is gone).
	sp := sessionPids(t, e, "main")
	if sp[first.Session] == sp[second.Session] || procKey(sp[second.Session]) != pids[1] {
		t.Errorf("sessions %s and %s are processes %d and %d; deliveries went to %v", first.Session, second.Session,
			sp[first.Session], sp[second.Session], pids)
	}
	if cur := op.agent("main"); cur.Session != second.Session || procKey(cur.PID) != pids[1] {
		t.Errorf("main's current session %s (pid %d), reported last %s", cur.Session, cur.PID, second.Session)
	}
	// In all, the re-sent delivery counts twice.
	if total := first.Bits + second.Bits; !near(total, float64(acked+3)*bits) {
		t.Errorf("total exposure %v, want %v", total, float64(acked+3)*bits)
	}
	if len(retried) != 1 {
		t.Errorf("delivery_retried events = %+v, want 1", retried)
	}
}

// 11. status reports the agents by state, the queues, the event cursor
// and where the gateway keeps its state.
func TestOperatorStatus(t *testing.T) {
	// main's runtime cannot start (a malformed TESTRT_PUBLISH makes it
	// exit before ready), so an approved item stays a pending delivery.
	e := startE2E(t, pair(100000, 100000, "review", map[string]string{"PUBLISH": "not json"}, map[string]string{
		"PUBLISH": publishes(pub("digest", "main", digestIn, 1)),
	}), nil)
	path := controlSocket(t)
	op := serveControl(t, e, path)
	ctx := testCtx(t)

	st, err := op.cl.Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.Version != "test" || st.PID != os.Getpid() || st.Socket != path || st.StartedAt.IsZero() || st.StartedAt.After(time.Now()) {
		t.Errorf("status = %+v", st)
	}
	if st.AgentsDir != e.dir || st.StateFile != filepath.Join(e.dir, "bcpgw.db") {
		t.Errorf("status: agents_dir %q, state_file %q; want %q and %q", st.AgentsDir, st.StateFile, e.dir, filepath.Join(e.dir, "bcpgw.db"))
	}
	if len(st.Agents) != 1 || st.Agents["stopped"] != 2 || st.PendingApprovals != 0 || st.PendingDeliveries != 0 {
		t.Errorf("status at start: agents %v, %d approvals, %d deliveries pending", st.Agents, st.PendingApprovals, st.PendingDeliveries)
	}
	var raw map[string]json.RawMessage
	if err := op.cl.Call(ctx, control.MethodStatus, nil, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"version", "pid", "started_at", "socket", "agents_dir", "state_file", "agents", "pending_approvals", "pending_deliveries", "last_event_seq"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("status lacks %q: %v", k, raw)
		}
	}

	// A pending item: researcher running, main still stopped.
	e.prompt("researcher", "go")
	item := op.nextPending(map[string]bool{})
	op.waitAgent("researcher", func(a control.Agent) bool { return a.State == "running" })
	st, err = op.cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Agents) != 2 || st.Agents["running"] != 1 || st.Agents["stopped"] != 1 || st.PendingApprovals != 1 || st.PendingDeliveries != 0 {
		t.Errorf("status with an item pending: agents %v, %d approvals, %d deliveries pending", st.Agents, st.PendingApprovals, st.PendingDeliveries)
	}
	queued := e.eventsFor("approval_queued", item.ID)
	if len(queued) != 1 || st.LastEventSeq < queued[0].Seq {
		t.Errorf("last_event_seq %d, approval_queued events %+v", st.LastEventSeq, queued)
	}
	// last_event_seq is the newest event's seq: the same as events.list
	// says, once no event is stored between the two calls.
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		st, err := op.cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		page, err := op.cl.Events(ctx, control.EventsParams{Since: st.LastEventSeq - 1})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Events) == 1 && page.Events[0].Seq == st.LastEventSeq
	}) {
		t.Error("status's last_event_seq is never the newest event's seq")
	}

	// Approved: the delivery waits for main, which cannot start.
	if _, err := op.cl.Approve(ctx, item.ID, item.SHA256, ""); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		st, err = op.cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.PendingApprovals == 0 && st.PendingDeliveries == 1 && st.Agents["stopped"] == 0
	}) {
		t.Errorf("status after approval: agents %v, %d approvals, %d deliveries pending; want 0 and 1, main not stopped",
			st.Agents, st.PendingApprovals, st.PendingDeliveries)
	}
	total := 0
	for _, n := range st.Agents {
		total += n
	}
	if total != 2 || st.Agents["running"] != 1 {
		t.Errorf("agents by state = %v, want researcher running and main trying to start", st.Agents)
	}
	if ds := e.deliveries(); len(ds) != 1 || ds[0].State != store.DeliveryPending {
		t.Errorf("stored deliveries = %+v, want one pending", ds)
	}
}
