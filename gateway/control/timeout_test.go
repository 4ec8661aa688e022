package control

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// TestTimeoutDefaults: the values the package doc promises.
func TestTimeoutDefaults(t *testing.T) {
	cfg := NewServer(ServerConfig{Backend: newFakeBackend()}).cfg
	if cfg.MaxConns != 64 || cfg.ReservedConns != 8 || cfg.IdleTimeout != 5*time.Minute ||
		cfg.LineTimeout != 10*time.Second || cfg.WriteTimeout != 10*time.Second {
		t.Errorf("defaults: max %d reserved %d idle %s line %s write %s", cfg.MaxConns, cfg.ReservedConns, cfg.IdleTimeout, cfg.LineTimeout, cfg.WriteTimeout)
	}
	for _, tt := range []struct{ max, reserved, want int }{{1, 0, 0}, {2, 0, 1}, {2, 5, 1}, {16, 0, 2}, {16, 3, 3}} {
		cfg := NewServer(ServerConfig{Backend: newFakeBackend(), MaxConns: tt.max, ReservedConns: tt.reserved}).cfg
		if cfg.ReservedConns != tt.want {
			t.Errorf("MaxConns %d ReservedConns %d: reserved %d, want %d", tt.max, tt.reserved, cfg.ReservedConns, tt.want)
		}
	}
}

// fillConns opens n raw connections, one after the other (each served
// before the next is opened, so the first is the one idle the longest),
// and sends each the bytes of first (nothing, or half a request line).
func fillConns(t *testing.T, ts *testServer, n int, first string) []*rawConn {
	t.Helper()
	var out []*rawConn
	for range n {
		before := ts.connCount()
		rc := dialRaw(t, ts.path)
		testproc.Eventually(t, "the connection to be served", func() bool { return ts.connCount() == before+1 })
		if first != "" {
			if _, err := rc.c.Write([]byte(first)); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, rc)
	}
	return out
}

// wantClosedWith reads the connection's last line, the error that says
// why the server closed it, then EOF.
func wantClosedWith(t *testing.T, rc *rawConn, code int, text string) {
	t.Helper()
	m := rc.readMsg()
	if string(m.ID) != "null" || m.Error == nil {
		t.Fatalf("got %+v, want an error line with id null", m)
	}
	wantCode(t, m.Error, code)
	if !strings.Contains(m.Error.Message, text) {
		t.Errorf("error %q does not say %q", m.Error.Message, text)
	}
	if line, err := rc.tryReadLine(); !errors.Is(err, io.EOF) {
		t.Errorf("after the error line: %q, %v; want EOF", line, err)
	}
}

// 64 idle connections, or 64 that each sent half a request line, do not
// lock out a 65th operator command: it takes the slot of the connection
// idle the longest, which hears why it was closed; the others stay.
func TestIdleConnectionsDoNotLockOut(t *testing.T) {
	for _, tt := range []struct{ name, first string }{
		{"idle", ""},
		{"half-sent", `{"jsonrpc":"2.0","id":1,"method":"sta`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, newFakeBackend(), ServerConfig{}) // MaxConns 64
			conns := fillConns(t, ts, 64, tt.first)

			cl := dial(t, ts.path)
			if _, err := cl.Status(callCtx(t)); err != nil {
				t.Fatalf("the 65th connection's command: %v", err)
			}
			wantClosedWith(t, conns[0], CodeLimit, "idle the longest")
			testproc.Eventually(t, "64 connections", func() bool { return ts.connCount() == 64 })

			// The others were left alone: the second still finishes its
			// request (or sends one) and is answered.
			rest := `{"jsonrpc":"2.0","id":1,"method":"status"}` + "\n"
			if tt.first != "" {
				rest = strings.TrimPrefix(rest, tt.first)
			}
			if _, err := conns[1].c.Write([]byte(rest)); err != nil {
				t.Fatal(err)
			}
			if m := conns[1].readMsg(); m.Error != nil || string(m.ID) != "1" {
				t.Errorf("the second connection's request: %+v", m)
			}
		})
	}
}

// Connections following events may not take the slots kept for commands:
// with 56 subscribed (64 - ReservedConns), a 57th subscription is
// refused, and a command still finds a slot when the rest are idle.
func TestSubscribersLeaveReservedSlots(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	var subscribed []*Client
	for i := range 56 {
		cl := dial(t, ts.path)
		if _, err := cl.Subscribe(callCtx(t), SubscribeParams{}); err != nil {
			t.Fatalf("subscription %d: %v", i+1, err)
		}
		subscribed = append(subscribed, cl)
	}
	// A second subscription on a connection that already follows is
	// fine: it takes no other slot.
	if _, err := subscribed[0].Subscribe(callCtx(t), SubscribeParams{Types: []string{"approval_*"}}); err != nil {
		t.Fatalf("a second subscription on a following connection: %v", err)
	}
	extra := dial(t, ts.path)
	_, err := extra.Subscribe(callCtx(t), SubscribeParams{})
	wantCode(t, err, CodeLimit)
	if !strings.Contains(err.Error(), "kept for commands") {
		t.Errorf("refusal %q does not say why", err)
	}
	// extra is now idle; fill the other slots with idle connections.
	fillConns(t, ts, 64-ts.connCount(), "")
	if _, err := dial(t, ts.path).Status(callCtx(t)); err != nil {
		t.Fatalf("a command with 56 subscribers and 8 idle connections: %v", err)
	}
	for i, cl := range subscribed {
		select {
		case <-cl.Done():
			t.Fatalf("subscriber %d was closed: %v", i, cl.Err())
		default:
		}
	}
	// Events still reach the subscribers.
	fb.addEvents("approval_queued")
	for i, cl := range subscribed[:3] {
		select {
		case n := <-cl.Notifications():
			if n.Event.Kind != "approval_queued" {
				t.Errorf("subscriber %d got %+v", i, n)
			}
		case <-time.After(hangGuard):
			t.Fatalf("subscriber %d got no event", i)
		}
	}
	// One subscriber gone frees a following slot.
	subscribed[55].Close()
	testproc.Eventually(t, "a following slot to be free", func() bool {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		return ts.srv.following == 55
	})
	if _, err := dial(t, ts.path).Subscribe(callCtx(t), SubscribeParams{}); err != nil {
		t.Errorf("a subscription once a subscriber is gone: %v", err)
	}
}

// A request line begun and not finished within LineTimeout closes the
// connection with an error line, even if bytes keep trickling in; one
// finished in time is answered, and a finished line starts no timer.
func TestHalfSentLineTimesOut(t *testing.T) {
	const line = 300 * time.Millisecond
	ts := startServer(t, newFakeBackend(), ServerConfig{LineTimeout: line})

	t.Run("half a line", func(t *testing.T) {
		rc := dialRaw(t, ts.path)
		start := time.Now()
		if _, err := rc.c.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"status"`)); err != nil {
			t.Fatal(err)
		}
		wantClosedWith(t, rc, CodeInvalidRequest, "not finished")
		if d := time.Since(start); d < line {
			t.Errorf("closed after %s, before LineTimeout %s", d, line)
		}
	})

	t.Run("trickle", func(t *testing.T) {
		rc := dialRaw(t, ts.path)
		stop := make(chan struct{})
		sent := make(chan int, 1)
		go func() { // a byte every 20ms: the line is never finished
			n := 0
			defer func() { sent <- n }()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if _, err := rc.c.Write([]byte("x")); err != nil {
					return
				}
				n++
			}
		}()
		start := time.Now()
		wantClosedWith(t, rc, CodeInvalidRequest, "not finished")
		close(stop)
		if d := time.Since(start); d < line || d > line+hangGuard/2 {
			t.Errorf("closed after %s, want about LineTimeout %s from the first byte", d, line)
		}
		if n := <-sent; n < 3 {
			t.Errorf("only %d bytes were sent before the close", n)
		}
	})

	t.Run("finished in time", func(t *testing.T) {
		rc := dialRaw(t, ts.path)
		req := reqLine(7, MethodStatus, nil) + "\n"
		// Short pauses between the parts: they arrive apart, and a stall
		// of the loaded machine still leaves the line most of its time.
		for _, part := range []string{req[:10], req[10:20], req[20:]} {
			if _, err := rc.c.Write([]byte(part)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(line / 30)
		}
		if m := rc.readMsg(); m.Error != nil || string(m.ID) != "7" {
			t.Fatalf("the request sent in parts: %+v", m)
		}
		time.Sleep(2 * line) // idle, not within a line: no line timer runs
		rc.writeLine(reqLine(8, MethodStatus, nil))
		if m := rc.readMsg(); m.Error != nil || string(m.ID) != "8" {
			t.Fatalf("a request after a quiet spell: %+v", m)
		}
	})
}

// An idle connection (nothing sent, no request in flight, no
// subscription) is closed after IdleTimeout with an error line; a
// request in flight longer than that is not cut, and the idle time
// counts from its answer.
func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	fb, release := busyBackend(t)
	ts := startServer(t, fb, ServerConfig{IdleTimeout: idle})

	t.Run("never sends", func(t *testing.T) {
		rc := dialRaw(t, ts.path)
		start := time.Now()
		wantClosedWith(t, rc, CodeUnavailable, "idle for")
		if d := time.Since(start); d < idle {
			t.Errorf("closed after %s, before IdleTimeout %s", d, idle)
		}
	})

	t.Run("long request", func(t *testing.T) {
		cl := dial(t, ts.path)
		busy := holdBusy(t, fb, cl)
		time.Sleep(3 * idle)
		close(release)
		if err := <-busy; err != nil {
			t.Fatalf("a request in flight for 3 idle timeouts: %v", err)
		}
		answered := time.Now()
		if _, err := cl.Status(callCtx(t)); err != nil {
			t.Fatalf("after the long request: %v", err)
		}
		waitClosed(t, "the idle client's Done", cl.Done())
		wantCode(t, cl.Err(), CodeUnavailable)
		if d := time.Since(answered); d < idle {
			t.Errorf("closed %s after the last answer, before IdleTimeout %s", d, idle)
		}
	})
}

// A connection that follows events is never idle: it is not cut while
// events flow, nor while none do; once it follows nothing it is idle.
func TestSubscribedConnectionNotCut(t *testing.T) {
	const idle = 200 * time.Millisecond
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{IdleTimeout: idle, LineTimeout: idle})
	cl := dial(t, ts.path)
	res, err := cl.Subscribe(callCtx(t), SubscribeParams{})
	if err != nil {
		t.Fatal(err)
	}
	expect := func(kind string) {
		t.Helper()
		select {
		case n, ok := <-cl.Notifications():
			if !ok {
				t.Fatalf("connection closed waiting for %s: %v", kind, cl.Err())
			}
			if n.Event.Kind != kind {
				t.Fatalf("got %s, want %s", n.Event.Kind, kind)
			}
		case <-time.After(hangGuard):
			t.Fatalf("no %s event", kind)
		}
	}
	// Events flowing for 6 idle timeouts, the client sending nothing.
	for i := range 12 {
		time.Sleep(idle / 2)
		kind := []string{"agent_started", "approval_queued"}[i%2]
		fb.addEvents(kind)
		expect(kind)
	}
	// No events for 3 idle timeouts.
	time.Sleep(3 * idle)
	select {
	case <-cl.Done():
		t.Fatalf("a quiet subscribed connection was closed: %v", cl.Err())
	default:
	}
	fb.addEvents("reload_ok")
	expect("reload_ok")
	if _, err := cl.Status(callCtx(t)); err != nil {
		t.Fatalf("a call on the subscribed connection: %v", err)
	}
	// Following nothing, it is idle.
	if err := cl.Unsubscribe(callCtx(t), res.Subscription); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "the unsubscribed client's Done", cl.Done())
	wantCode(t, cl.Err(), CodeUnavailable)
}

// A line that times out while a request is in flight ends the
// connection after that request is answered: the answer comes first,
// then the error line.
func TestLineTimeoutAnswersRequestInFlight(t *testing.T) {
	const line = 200 * time.Millisecond
	fb, release := busyBackend(t)
	ts := startServer(t, fb, ServerConfig{LineTimeout: line})
	rc := dialRaw(t, ts.path)
	rc.writeLine(reqLine(1, MethodAgentsList, nil))
	testproc.Eventually(t, "the Agents call to be in flight", func() bool { return len(fb.callsOf("Agents")) == 1 })
	if _, err := rc.c.Write([]byte(`{"jsonrpc":"2.0","id":2,`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * line)
	close(release)
	if m := rc.readMsg(); m.Error != nil || string(m.ID) != "1" {
		t.Fatalf("first line: %+v, want the answer to request 1", m)
	}
	wantClosedWith(t, rc, CodeInvalidRequest, "not finished")
}
