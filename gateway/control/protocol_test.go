package control

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// wantAlive checks that the server still serves a fresh client.
func wantAlive(t *testing.T, ts *testServer) {
	t.Helper()
	if _, err := dial(t, ts.path).Status(callCtx(t)); err != nil {
		t.Fatalf("status from a fresh client: %v", err)
	}
}

func TestProtocolErrors(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	rc := dialRaw(t, ts.path)

	tests := []struct {
		name     string
		line     string
		wantCode int
		wantID   string // the id of the reply, as JSON
	}{
		{"not JSON", `hello there`, CodeParseError, `null`},
		{"truncated JSON", `{"jsonrpc":"2.0","id":1,"method":`, CodeParseError, `null`},
		{"missing jsonrpc", `{"id":1,"method":"status"}`, CodeInvalidRequest, `1`},
		{"wrong version", `{"jsonrpc":"1.0","id":"abc","method":"status"}`, CodeInvalidRequest, `"abc"`},
		{"version as number", `{"jsonrpc":2.0,"id":3,"method":"status"}`, CodeInvalidRequest, `null`},
		{"missing method", `{"jsonrpc":"2.0","id":4}`, CodeInvalidRequest, `4`},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"status"}`, CodeInvalidRequest, `null`},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"status"}`, CodeInvalidRequest, `null`},
		{"not an object", `42`, CodeInvalidRequest, `null`},
		{"batch", `[{"jsonrpc":"2.0","id":5,"method":"status"}]`, CodeInvalidRequest, `null`},
		{"empty batch", `[]`, CodeInvalidRequest, `null`},
		{"unknown method", `{"jsonrpc":"2.0","id":6,"method":"agents.destroy"}`, CodeMethodNotFound, `6`},
		{"unknown field in params", `{"jsonrpc":"2.0","id":7,"method":"agents.start","params":{"name":"web","force":true}}`, CodeInvalidParams, `7`},
		{"misspelt field", `{"jsonrpc":"2.0","id":8,"method":"approvals.approve","params":{"id":"ap-1","sha":"h"}}`, CodeInvalidParams, `8`},
		{"params as an array", `{"jsonrpc":"2.0","id":9,"method":"agents.start","params":["web"]}`, CodeInvalidParams, `9`},
		{"params as a string", `{"jsonrpc":"2.0","id":10,"method":"approvals.get","params":"ap-1"}`, CodeInvalidParams, `10`},
		{"params of the wrong type", `{"jsonrpc":"2.0","id":11,"method":"events.list","params":{"since":"yesterday"}}`, CodeInvalidParams, `11`},
		{"a key given twice", `{"jsonrpc":"2.0","id":21,"method":"approvals.approve","params":{"id":"ap-1","sha256":"h","id":"ap-2"}}`, CodeInvalidParams, `21`},
		{"a key in another case", `{"jsonrpc":"2.0","id":22,"method":"approvals.get","params":{"ID":"ap-1"}}`, CodeInvalidParams, `22`},
		{"string id is echoed", `{"jsonrpc":"2.0","id":"x-1","method":"nope"}`, CodeMethodNotFound, `"x-1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc.t = t
			rc.writeLine(tt.line)
			m := rc.readMsg()
			if m.Error == nil {
				t.Fatalf("reply %+v has no error, want code %d", m, tt.wantCode)
			}
			if m.Error.Code != tt.wantCode || m.Error.Reason() != reasons[tt.wantCode] || m.Error.Data == nil {
				t.Errorf("error = %+v (reason %q), want code %d with data.reason %q", m.Error, m.Error.Reason(), tt.wantCode, reasons[tt.wantCode])
			}
			if string(m.ID) != tt.wantID {
				t.Errorf("reply id = %s, want %s", m.ID, tt.wantID)
			}
			if m.Result != nil {
				t.Errorf("an error reply has a result: %s", m.Result)
			}
		})
	}
	rc.t = t
	// Blank lines are skipped, and the same connection still works.
	rc.writeLine("")
	rc.writeLine("   ")
	rc.writeLine(reqLine(100, MethodStatus, nil))
	if m := rc.readMsg(); string(m.ID) != "100" || m.Error != nil {
		t.Fatalf("status on the same connection: %+v", m)
	}
	for _, name := range []string{"StartAgent", "Approve", "Approval", "Events"} {
		if n := len(fb.callsOf(name)); n != 0 {
			t.Errorf("backend %s called %d times by malformed requests", name, n)
		}
	}
	wantAlive(t, ts)
}

func TestNotificationGetsNoReply(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	rc := dialRaw(t, ts.path)

	// Notifications (no id) are carried out but never answered: not
	// when they succeed, not when the method is unknown or the backend
	// fails.
	fb.setErr("StopAgent", Errorf(CodeNotFound, "no agent"))
	rc.writeLine(`{"jsonrpc":"2.0","method":"agents.start","params":{"name":"web"}}`)
	rc.writeLine(`{"jsonrpc":"2.0","method":"agents.stop","params":{"name":"ghost"}}`)
	rc.writeLine(`{"jsonrpc":"2.0","method":"no.such.method"}`)
	rc.writeLine(reqLine(7, MethodStatus, nil))
	if m := rc.readMsg(); string(m.ID) != "7" || m.Error != nil {
		t.Fatalf("first reply = %+v, want the status response (id 7)", m)
	}
	testproc.Eventually(t, "the notifications to reach the backend", func() bool {
		return len(fb.callsOf("StartAgent")) == 1 && len(fb.callsOf("StopAgent")) == 1
	})
	if got := fb.callsOf("StartAgent")[0]; got.Params != "web" {
		t.Errorf("StartAgent(%v), want web", got.Params)
	}
	wantPeer(t, fb.callsOf("StartAgent")[0].Peer)
	// Nothing was queued for them meanwhile either.
	rc.writeLine(reqLine(8, MethodStatus, nil))
	if m := rc.readMsg(); string(m.ID) != "8" || m.Error != nil {
		t.Fatalf("next reply = %+v, want the status response (id 8)", m)
	}
}

// sendOverlong writes a request longer than maxLine on rc.
func sendOverlong(rc *rawConn) {
	long := `{"jsonrpc":"2.0","id":1,"method":"agents.prompt","params":{"name":"boss","text":"` +
		strings.Repeat("a", maxLine+maxLine/2) + `"}}` + "\n"
	// The server stops reading mid-line, so the write may never
	// complete; it fails once the server closes the connection.
	go rc.c.Write([]byte(long))
}

// readToEnd reads what is left on rc until the server closes it: EOF,
// or a reset when the server closed with unread input.
func readToEnd(t *testing.T, rc *rawConn) string {
	t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(hangGuard))
	rest, err := io.ReadAll(rc.r)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read until the connection closes: got %q, %v", rest, err)
	}
	return string(rest)
}

func TestOverlongLineClosesConnection(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	rc := dialRaw(t, ts.path)
	sendOverlong(rc)
	// Whatever was sent (see TestOverlongLineGetsError), the connection
	// ends, and the request never reaches the backend.
	rest := readToEnd(t, rc)
	for _, line := range strings.Split(strings.TrimSpace(rest), "\n") {
		if line != "" && !strings.Contains(line, `"code":-32600`) {
			t.Errorf("server sent %q, want nothing or an invalid_request error", line)
		}
	}
	if n := len(fb.callsOf("Prompt")); n != 0 {
		t.Errorf("the over-long request reached the backend %d times", n)
	}
	testproc.Eventually(t, "the connection to be dropped", func() bool { return ts.connCount() == 0 })
	wantAlive(t, ts)
}

func TestOverlongLineGetsError(t *testing.T) {
	ts := startServer(t, newFakeBackend(), ServerConfig{})
	rc := dialRaw(t, ts.path)
	sendOverlong(rc)

	m := rc.readMsg()
	if m.Error == nil || m.Error.Code != CodeInvalidRequest || string(m.ID) != "null" {
		t.Fatalf("reply = %+v, want an invalid_request error with id null", m)
	}
	if !strings.Contains(m.Error.Message, "longer than") {
		t.Errorf("message %q does not say the request is too long", m.Error.Message)
	}
	if rest := readToEnd(t, rc); rest != "" {
		t.Errorf("after the error the server sent %q", rest)
	}
	wantAlive(t, ts)
}

// A client may write its requests and close its side: every request is
// still answered (server.go: "they are answered before the connection
// ends").
func TestHalfCloseRequestsAnswered(t *testing.T) {
	ts := startServer(t, newFakeBackend(), ServerConfig{})
	rc := dialRaw(t, ts.path)
	const n = 5
	for i := 1; i <= n; i++ {
		rc.writeLine(reqLine(i, MethodStatus, nil))
	}
	if err := rc.c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(readToEnd(t, rc)), "\n") {
		if line == "" {
			continue
		}
		var m wireMsg
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.Error != nil {
			t.Fatalf("reply %q: %v", line, err)
		}
		seen[string(m.ID)] = true
	}
	for i := 1; i <= n; i++ {
		if !seen[strconv.Itoa(i)] {
			t.Errorf("request %d was not answered before the connection closed", i)
		}
	}
}
