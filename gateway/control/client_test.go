package control

import (
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// Close returns even while the reader is stuck delivering to a full,
// unread Notifications channel, and is safe to call twice.
func TestClientCloseWithUnreadNotifications(t *testing.T) {
	fb := newFakeBackend()
	for range 1000 {
		fb.addEvents("agent_started")
	}
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	zero := int64(0)
	if _, err := cl.Subscribe(callCtx(t), SubscribeParams{Since: &zero}); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "the notification channel to fill", func() bool {
		return len(cl.Notifications()) == cap(cl.Notifications())
	})

	closed := make(chan error, 1)
	go func() { closed <- cl.Close() }()
	select {
	case <-closed:
	case <-time.After(hangGuard):
		// Unstick the reader so that the cleanups can finish.
		go func() {
			for range cl.Notifications() {
			}
		}()
		t.Fatal("Close hangs while notifications are unread")
	}
	waitClosed(t, "Done", cl.Done())
	second := make(chan error, 1)
	go func() { second <- cl.Close() }()
	select {
	case <-second:
	case <-time.After(hangGuard):
		t.Fatal("a second Close hangs")
	}
	if err := cl.Call(callCtx(t), MethodStatus, nil, nil); err == nil {
		t.Error("a call after Close succeeded")
	}
	// The server notices and drops the connection.
	testproc.Eventually(t, "the server to drop the connection", func() bool { return ts.connCount() == 0 })
}
