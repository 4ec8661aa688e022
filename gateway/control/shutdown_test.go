package control

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// waitClosed fails the test unless ch is closed in time.
func waitClosed[T any](t *testing.T, what string, ch <-chan T) {
	t.Helper()
	timeout := time.After(hangGuard)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestShutdownClosesConnections(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	idle := dial(t, ts.path)
	sub := dial(t, ts.path)
	ctx := callCtx(t)
	if _, err := idle.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(ctx, SubscribeParams{}); err != nil {
		t.Fatal(err)
	}
	raw := dialRaw(t, ts.path)
	testproc.Eventually(t, "three connections", func() bool { return ts.connCount() == 3 })

	if err := ts.stop(t); err != nil {
		t.Fatalf("Serve returned %v after its context was cancelled, want nil", err)
	}
	waitClosed(t, "the idle client's Done", idle.Done())
	waitClosed(t, "the subscriber's Done", sub.Done())
	waitClosed(t, "the subscriber's Notifications", sub.Notifications())
	if idle.Err() == nil {
		t.Error("Client.Err is nil after the connection ended")
	}
	if rest := readToEnd(t, raw); rest != "" {
		t.Errorf("the raw connection got %q", rest)
	}
	if err := idle.Call(ctx, MethodStatus, nil, nil); err == nil {
		t.Error("a call after the shutdown succeeded")
	}
	if _, err := os.Lstat(ts.path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket file after Serve returned: %v, want it removed", err)
	}
	if _, err := Dial(ctx, ts.path); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Dial after the shutdown: %v, want ErrNotRunning", err)
	}
}

// A call whose backend work is under way when the server stops returns
// an error instead of hanging, and the backend sees its context end.
func TestShutdownCallInFlight(t *testing.T) {
	fb := newFakeBackend()
	started := make(chan struct{})
	var once sync.Once
	backendErr := make(chan error, 1)
	fb.setHook(func(ctx context.Context, method string) error {
		if method != "Prompt" {
			return nil
		}
		once.Do(func() { close(started) })
		<-ctx.Done()
		backendErr <- ctx.Err()
		return ctx.Err()
	})
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)

	callErr := make(chan error, 1)
	go func() { callErr <- cl.Prompt(context.Background(), "boss", "long job") }()
	waitClosed(t, "the backend call to start", started)

	if err := ts.stop(t); err != nil {
		t.Fatalf("Serve returned %v, want nil", err)
	}
	select {
	case err := <-callErr:
		if err == nil {
			t.Fatal("the call in flight returned nil after the server stopped")
		}
	case <-time.After(hangGuard):
		t.Fatal("the call in flight hangs after the server stopped")
	}
	if err := <-backendErr; !errors.Is(err, context.Canceled) {
		t.Errorf("backend context ended with %v, want context.Canceled", err)
	}
	waitClosed(t, "the client's Done", cl.Done())
}

// A Call whose own context ends returns ctx.Err, and the connection goes
// on.
func TestCallContextCancelled(t *testing.T) {
	fb := newFakeBackend()
	release := make(chan struct{})
	fb.setHook(func(ctx context.Context, method string) error {
		if method == "Reload" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := cl.Reload(ctx); errc <- err }()
	testproc.Eventually(t, "the reload to reach the backend", func() bool { return len(fb.callsOf("Reload")) == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reload with a cancelled context: %v, want context.Canceled", err)
	}
	close(release) // its late response is dropped by the client
	if _, err := cl.Status(callCtx(t)); err != nil {
		t.Fatalf("status after the cancelled call: %v", err)
	}
}

// Closing the listener under Serve (not through its context) makes Serve
// return an error.
func TestServeListenerClosed(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "state", SocketName)
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ServerConfig{Backend: newFakeBackend()})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), l) }()
	cl := dial(t, path)
	if _, err := cl.Status(callCtx(t)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Serve returned nil after its listener was closed under it")
		}
	case <-time.After(hangGuard):
		t.Fatal("Serve did not return after its listener was closed")
	}
	waitClosed(t, "the client's Done", cl.Done())
}

func TestDialNotRunning(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, dir string) string // returns the path to dial
	}{
		{"missing socket", func(t *testing.T, dir string) string { return filepath.Join(dir, SocketName) }},
		{"missing directory", func(t *testing.T, dir string) string { return filepath.Join(dir, "nope", SocketName) }},
		{"stale socket", func(t *testing.T, dir string) string {
			path := filepath.Join(dir, SocketName)
			makeStaleSocket(t, path)
			return path
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.make(t, shortTempDir(t))
			cl, err := Dial(callCtx(t), path)
			if err == nil {
				cl.Close()
				t.Fatal("Dial succeeded")
			}
			if !errors.Is(err, ErrNotRunning) {
				t.Fatalf("Dial: %v, want an error wrapping ErrNotRunning", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the socket", err)
			}
		})
	}
}

// A subscriber that never reads cannot hold up the server: other
// connections are served meanwhile, and the stuck one is dropped after
// WriteTimeout.
func TestSlowSubscriberDoesNotBlockOthers(t *testing.T) {
	fb := newFakeBackend()
	big := strings.Repeat("x", 1024)
	for range 3000 { // ~3 MB: far more than a socket buffer and the queue
		fb.addEventsDetail(big, "agent_started")
	}
	ts := startServer(t, fb, ServerConfig{WriteTimeout: 300 * time.Millisecond})

	other := dial(t, ts.path)
	ctx := callCtx(t)
	otherSub, err := other.Subscribe(ctx, SubscribeParams{Types: []string{"live_*"}})
	if err != nil {
		t.Fatal(err)
	}

	slow := dialRaw(t, ts.path)
	slow.writeLine(reqLine(1, MethodSubscribe, map[string]any{"since": 0}))
	testproc.Eventually(t, "the slow subscriber's follower to start", func() bool {
		return len(fb.callsOf("Events")) > 0
	})

	// Events keep being stored, and the other client keeps working.
	stopProducing := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopProducing:
				return
			default:
			}
			fb.addEventsDetail(big, "agent_started")
			time.Sleep(time.Millisecond)
		}
	}()
	for i := range 20 {
		if _, err := other.Status(ctx); err != nil {
			t.Fatalf("status %d while a subscriber is stuck: %v", i, err)
		}
	}
	live := fb.addEvents("live_ping")[0]
	if e := notesFor(t, other, otherSub.Subscription, 1)[0]; e.Seq != live.Seq {
		t.Errorf("the other subscriber got event %d, want %d", e.Seq, live.Seq)
	}
	close(stopProducing)
	wg.Wait()

	// The stuck connection is dropped; the other stays.
	testproc.Eventually(t, "the stuck connection to be dropped", func() bool { return ts.connCount() == 1 })
	readToEnd(t, slow) // what was buffered, then the end
	if _, err := other.Status(ctx); err != nil {
		t.Fatalf("status after the stuck connection was dropped: %v", err)
	}
	wantAlive(t, ts)
}
