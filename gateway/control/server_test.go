package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

var (
	t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

	cannedApproval = Approval{
		Seq: 1, ID: "ap-1", Status: "pending", Controller: "boss", Reader: "web",
		Category: 2, Directive: "summarize", Response: json.RawMessage(`{"text":"hi"}`),
		SHA256: "abc123", Anomalies: []bcp.Anomaly{}, BandwidthBits: 12.5,
		CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
	}
)

// wantPeer checks that the backend saw this process as the peer.
func wantPeer(t *testing.T, got Peer) {
	t.Helper()
	if got.UID != os.Getuid() || got.GID != os.Getgid() || got.PID != os.Getpid() {
		t.Errorf("peer = %+v, want uid %d gid %d pid %d", got, os.Getuid(), os.Getgid(), os.Getpid())
	}
	want := strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		want = u.Username
	}
	if got.User == "" || got.User != want {
		t.Errorf("peer user = %q, want %q", got.User, want)
	}
}

func TestMethodsRoundTrip(t *testing.T) {
	fb := newFakeBackend()
	fb.status = Status{
		Version: "ignored", PID: -1, Socket: "ignored", // the server's own
		AgentsDir: "/agents", StateFile: "/state/db", Agents: map[string]int{"running": 2, "stopped": 1},
		PendingApprovals: 3, PendingDeliveries: 4, LastEventSeq: 99,
	}
	fb.agents = []Agent{{
		Name: "boss", Roles: []string{"controller"}, State: "running", Autostart: true, PID: 42, Since: t0,
		Channels: []Channel{{Peer: "web", Role: "reader", MaxCategory: 2, BudgetBits: 64}},
	}}
	fb.approval = cannedApproval
	fb.approvals = []Approval{cannedApproval, {Seq: 2, ID: "ap-2", Status: "approved", Response: json.RawMessage(`null`), CreatedAt: t0, ExpiresAt: t0}}
	fb.reload = ReloadResult{Changed: true, Agents: 3, Summary: []string{"added web"}}
	fb.report = Report{Sessions: []SessionExposure{{
		Agent: "boss", Session: "s1", StartedAt: t0, Bits: 9, ByCat: map[int]float64{1: 4, 2: 5},
		Channels: []ChannelExposure{{Reader: "web", Category: 2, Deliveries: 1, Bits: 5}},
	}}}
	fb.addEvents("agent_started", "approval_queued", "agent_started")

	ts := startServer(t, fb, ServerConfig{Version: "1.2.3"})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	tests := []struct {
		name       string
		call       func() (any, error)
		wantResult any    // compared as JSON; nil for methods without a result
		backend    string // the backend method called
		wantParams any    // what it was called with
		wantPeer   bool   // whether it takes the peer
	}{
		{"agents.list",
			func() (any, error) { return cl.Agents(ctx) },
			fb.agents, "Agents", nil, false},
		{"agents.start",
			func() (any, error) { return nil, cl.StartAgent(ctx, "web") },
			nil, "StartAgent", "web", true},
		{"agents.stop",
			func() (any, error) { return nil, cl.StopAgent(ctx, "boss") },
			nil, "StopAgent", "boss", true},
		{"agents.prompt",
			func() (any, error) { return nil, cl.Prompt(ctx, "boss", "hello\nworld \"quoted\"") },
			nil, "Prompt", PromptParams{Name: "boss", Text: "hello\nworld \"quoted\""}, true},
		{"approvals.list pending",
			func() (any, error) { return cl.Approvals(ctx, "") },
			fb.approvals, "Approvals", ApprovalsParams{Limit: MaxApprovalsPage + 1}, false},
		{"approvals.list all",
			func() (any, error) { return cl.Approvals(ctx, "all") },
			fb.approvals, "Approvals", ApprovalsParams{Status: "all", Limit: MaxApprovalsPage + 1}, false},
		{"approvals.list page",
			func() (any, error) { return cl.ApprovalsPage(ctx, ApprovalsParams{Status: "all", Limit: 1}) },
			ApprovalsPage{Items: fb.approvals[:1], Next: 1}, "Approvals", ApprovalsParams{Status: "all", Limit: 2}, false},
		{"approvals.list page after a cursor",
			func() (any, error) { return cl.ApprovalsPage(ctx, ApprovalsParams{Limit: 1, Cursor: 1}) },
			ApprovalsPage{Items: fb.approvals[1:]}, "Approvals", ApprovalsParams{Limit: 2, Cursor: 1}, false},
		{"approvals.get",
			func() (any, error) { return cl.Approval(ctx, "ap-1") },
			cannedApproval, "Approval", "ap-1", false},
		{"approvals.approve",
			func() (any, error) { return cl.Approve(ctx, "ap-1", "abc123", "looks fine") },
			cannedApproval, "Approve", ApproveParams{ID: "ap-1", SHA256: "abc123", Note: "looks fine"}, true},
		{"approvals.reject",
			func() (any, error) { return cl.Reject(ctx, "ap-1", "", "leaks a secret") },
			cannedApproval, "Reject", RejectParams{ID: "ap-1", Reason: "leaks a secret"}, true},
		{"events.list",
			func() (any, error) {
				return cl.Events(ctx, EventsParams{Since: 1, Limit: 10, Types: []string{"agent_*"}})
			},
			EventsPage{Events: fb.events[2:3], Next: 3}, "Events", EventsParams{Since: 1, Limit: 10, Types: []string{"agent_*"}}, false},
		{"events.list of an agent",
			func() (any, error) {
				return cl.Events(ctx, EventsParams{Limit: 10, Agent: "agent-agent_started"})
			},
			EventsPage{Events: []Event{fb.events[0], fb.events[2]}, Next: 3}, "Events", EventsParams{Limit: 10, Agent: "agent-agent_started"}, false},
		{"reload",
			func() (any, error) { return cl.Reload(ctx) },
			fb.reload, "Reload", nil, true},
		{"report",
			func() (any, error) { return cl.Report(ctx, ReportParams{Agent: "boss"}) },
			fb.report, "Report", ReportParams{Agent: "boss"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(fb.callsOf(tt.backend))
			got, err := tt.call()
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if tt.wantResult != nil {
				if g, w := asJSON(t, got), asJSON(t, tt.wantResult); g != w {
					t.Errorf("result\n got %s\nwant %s", g, w)
				}
			}
			calls := fb.callsOf(tt.backend)
			if len(calls) != before+1 {
				t.Fatalf("backend %s called %d times, want once", tt.backend, len(calls)-before)
			}
			c := calls[len(calls)-1]
			if g, w := asJSON(t, c.Params), asJSON(t, tt.wantParams); g != w {
				t.Errorf("backend params = %s, want %s", g, w)
			}
			if tt.wantPeer {
				wantPeer(t, c.Peer)
			}
		})
	}

	t.Run("status", func(t *testing.T) {
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := fb.status
		want.Version, want.PID, want.Socket, want.StartedAt = "1.2.3", os.Getpid(), ts.path, ts.srv.started
		if g, w := asJSON(t, st), asJSON(t, want); g != w {
			t.Errorf("status\n got %s\nwant %s", g, w)
		}
	})
}

func TestEventsListPaging(t *testing.T) {
	fb := newFakeBackend()
	kinds := make([]string, 1500)
	for i := range kinds {
		kinds[i] = "agent_started"
	}
	fb.addEvents(kinds...)
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	tests := []struct {
		name      string
		params    EventsParams
		wantLimit int // passed to the backend
		wantLen   int
		wantNext  int64
	}{
		{"default limit", EventsParams{}, MaxEventsPage, MaxEventsPage, MaxEventsPage},
		{"limit capped", EventsParams{Since: 100, Limit: 5000}, MaxEventsPage, MaxEventsPage, 100 + MaxEventsPage},
		{"negative limit", EventsParams{Limit: -1}, MaxEventsPage, MaxEventsPage, MaxEventsPage},
		{"small limit", EventsParams{Since: 7, Limit: 3}, 3, 3, 10},
		{"past the end keeps since", EventsParams{Since: 1500, Limit: 3}, 3, 0, 1500},
		{"no match keeps since", EventsParams{Since: 20, Types: []string{"nothing"}}, MaxEventsPage, 0, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := cl.Events(ctx, tt.params)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Events) != tt.wantLen || page.Next != tt.wantNext {
				t.Errorf("got %d events, next %d; want %d, next %d", len(page.Events), page.Next, tt.wantLen, tt.wantNext)
			}
			if page.Events == nil {
				t.Errorf("events decoded as nil: the server sent null, want []")
			}
			calls := fb.callsOf("Events")
			if q := calls[len(calls)-1].Params.(EventsParams); q.Limit != tt.wantLimit || q.Since != tt.params.Since {
				t.Errorf("backend asked since %d limit %d, want since %d limit %d", q.Since, q.Limit, tt.params.Since, tt.wantLimit)
			}
		})
	}
}

func TestBackendErrors(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	tests := []struct {
		name     string
		backend  string
		err      error
		call     func() error
		wantCode int
		wantMsg  string // contained in the message
	}{
		{"already decided", "Approve", Errorf(CodeAlreadyDecided, "ap-1 was approved at noon"),
			func() error { _, err := cl.Approve(ctx, "ap-1", "h", ""); return err },
			CodeAlreadyDecided, "ap-1 was approved at noon"},
		{"hash mismatch", "Reject", Errorf(CodeHashMismatch, "shown %s", "h"),
			func() error { _, err := cl.Reject(ctx, "ap-1", "h", "no"); return err },
			CodeHashMismatch, "shown h"},
		{"not found", "Approval", Errorf(CodeNotFound, "no item ap-9"),
			func() error { _, err := cl.Approval(ctx, "ap-9"); return err },
			CodeNotFound, "no item ap-9"},
		{"wrapped *Error keeps its code", "StartAgent", fmt.Errorf("supervisor: %w", Errorf(CodeAgentFailed, "crashed 5 times")),
			func() error { return cl.StartAgent(ctx, "web") },
			CodeAgentFailed, "crashed 5 times"},
		{"plain error is internal", "Reload", errors.New("disk on fire"),
			func() error { _, err := cl.Reload(ctx); return err },
			CodeInternal, "disk on fire"},
		{"plain error from status is internal", "Status", errors.New("db closed"),
			func() error { _, err := cl.Status(ctx); return err },
			CodeInternal, "db closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb.setErr(tt.backend, tt.err)
			defer fb.setErr(tt.backend, nil)
			err := tt.call()
			wantCode(t, err, tt.wantCode)
			if !errors.Is(err, &Error{Code: tt.wantCode}) {
				t.Errorf("errors.Is(%v, &Error{Code: %d}) = false", err, tt.wantCode)
			}
			if errors.Is(err, &Error{Code: CodeLimit}) {
				t.Errorf("errors.Is(%v, &Error{Code: CodeLimit}) = true", err)
			}
			if CodeOf(err) != tt.wantCode {
				t.Errorf("CodeOf = %d, want %d", CodeOf(err), tt.wantCode)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("message %q does not contain %q", err.Error(), tt.wantMsg)
			}
		})
	}
	// An error does not end the connection.
	if _, err := cl.Status(ctx); err != nil {
		t.Fatalf("status after the errors: %v", err)
	}
}

// Required params are checked by the server, before the backend.
func TestRequiredParams(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	tests := []struct {
		name    string
		backend string
		call    func() error
	}{
		{"start without name", "StartAgent", func() error { return cl.StartAgent(ctx, "") }},
		{"stop without name", "StopAgent", func() error { return cl.StopAgent(ctx, "") }},
		{"prompt without text", "Prompt", func() error { return cl.Prompt(ctx, "boss", "") }},
		{"prompt without name", "Prompt", func() error { return cl.Prompt(ctx, "", "hi") }},
		{"get without id", "Approval", func() error { _, err := cl.Approval(ctx, ""); return err }},
		{"approve without hash", "Approve", func() error { _, err := cl.Approve(ctx, "ap-1", "", ""); return err }},
		{"approve without id", "Approve", func() error { _, err := cl.Approve(ctx, "", "h", ""); return err }},
		{"reject without reason", "Reject", func() error { _, err := cl.Reject(ctx, "ap-1", "h", ""); return err }},
		{"events with a bad type", "Events", func() error {
			_, err := cl.Events(ctx, EventsParams{Types: []string{"Agent Started"}})
			return err
		}},
		{"status with params", "Status", func() error { return cl.Call(ctx, MethodStatus, map[string]int{"x": 1}, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.call(), CodeInvalidParams)
			if n := len(fb.callsOf(tt.backend)); n != 0 {
				t.Errorf("backend %s called %d times, want never", tt.backend, n)
			}
		})
	}
}

// busyBackend is a fake backend whose Agents call waits until release
// is closed (or its connection ends): a request in flight, which keeps
// its connection from being idle.
func busyBackend(t *testing.T) (fb *fakeBackend, release chan struct{}) {
	fb, release = newFakeBackend(), make(chan struct{})
	fb.setHook(func(ctx context.Context, method string) error {
		if method == "Agents" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return fb, release
}

// holdBusy starts an Agents call on cl that stays in flight until
// release, and waits until the backend has it.
func holdBusy(t *testing.T, fb *fakeBackend, cl *Client) <-chan error {
	t.Helper()
	before := len(fb.callsOf("Agents"))
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Agents(callCtx(t))
		errc <- err
	}()
	testproc.Eventually(t, "the Agents call to be in flight", func() bool { return len(fb.callsOf("Agents")) > before })
	return errc
}

func TestMaxConns(t *testing.T) {
	fb, release := busyBackend(t)
	ts := startServer(t, fb, ServerConfig{MaxConns: 1})
	first := dial(t, ts.path)
	busy := holdBusy(t, fb, first)

	// With the one slot busy answering a request, the second is refused
	// with one error line. Its call fails; with what depends on a race
	// (see the report: the write may fail with EPIPE before the refusal
	// is read), but the connection's end reason is the refusal.
	second := dial(t, ts.path)
	if _, err := second.Status(callCtx(t)); err == nil {
		t.Fatal("status on a connection over MaxConns succeeded")
	}
	waitClosed(t, "the refused client's Done", second.Done())
	wantCode(t, second.Err(), CodeLimit)
	if _, err := second.Status(callCtx(t)); CodeOf(err) != CodeLimit {
		t.Errorf("a call after the refusal: %v, want the refusal (code %d)", err, CodeLimit)
	}

	// The first is still served.
	close(release)
	if err := <-busy; err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	if _, err := first.Status(callCtx(t)); err != nil {
		t.Fatalf("first connection after the refusal: %v", err)
	}

	// Now idle, it gives its slot to a new connection, and hears why. (Its
	// answer reaches it just before the server counts it answered.)
	testproc.Eventually(t, "the first connection to be idle", func() bool {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		for c := range ts.srv.conns {
			c.mu.Lock()
			busy := c.inFlight > 0 || c.following > 0
			c.mu.Unlock()
			if busy {
				return false
			}
		}
		return true
	})
	third := dial(t, ts.path)
	if _, err := third.Status(callCtx(t)); err != nil {
		t.Fatalf("a new connection while the only slot is idle: %v", err)
	}
	waitClosed(t, "the idle first connection's Done", first.Done())
	wantCode(t, first.Err(), CodeLimit)
	if !strings.Contains(first.Err().Error(), "idle the longest") {
		t.Errorf("the closed connection's reason: %v", first.Err())
	}
	third.Close()
	testproc.Eventually(t, "the connections to be gone", func() bool { return ts.connCount() == 0 })
	if _, err := dial(t, ts.path).Status(callCtx(t)); err != nil {
		t.Fatalf("a new connection once the slot is free: %v", err)
	}
}

// Calls from several goroutines on one Client are matched to their
// responses.
func TestClientConcurrentCalls(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)

	const n = 50
	errs := make(chan error, n)
	for i := range n {
		go func() {
			name := fmt.Sprintf("agent-%d", i)
			errs <- cl.StartAgent(ctx, name)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("concurrent call: %v", err)
		}
	}
	if got := len(fb.callsOf("StartAgent")); got != n {
		t.Errorf("backend got %d StartAgent calls, want %d", got, n)
	}
}

// A call on a refused connection reports the refusal, not the broken
// pipe it may meet writing its request.
func TestRefusedCallReportsRefusal(t *testing.T) {
	fb, _ := busyBackend(t)
	ts := startServer(t, fb, ServerConfig{MaxConns: 1})
	holdBusy(t, fb, dial(t, ts.path))
	for i := range 50 {
		cl := dial(t, ts.path)
		_, err := cl.Status(callCtx(t))
		if CodeOf(err) != CodeLimit {
			t.Fatalf("attempt %d: status on a refused connection: %v, want the refusal (code %d)", i, err, CodeLimit)
		}
		cl.Close()
	}
}
