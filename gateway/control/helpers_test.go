package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the helper process of the peer-credential tests:
// with CONTROL_TEST_HELPER set, the test binary does not run the tests
// but acts as a client of the socket named by CONTROL_TEST_SOCKET (see
// runHelper), so a client can run as another uid without building
// anything.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode, os.Getenv(helperSocketEnv)))
	}
	os.Exit(m.Run())
}

// hangGuard bounds every wait, so a bug shows up as a failure rather
// than as a test binary killed by the global timeout. It is not a claim
// about speed: everything it guards takes milliseconds.
const hangGuard = 15 * time.Second

// fakeCall is one call the fake backend received.
type fakeCall struct {
	Method string
	Peer   Peer // zero for methods that take none
	Params any
}

// fakeBackend is a Backend that records its calls, returns canned
// values, and holds an in-memory event log that follows the store's
// rules (seq from 1, types with a trailing * match a prefix).
type fakeBackend struct {
	mu      sync.Mutex
	calls   []fakeCall
	refused []fakeRefusal
	errs    map[string]error // method name -> error to return
	// hook, if set, runs at the start of every method but Refused and
	// EventsChanged; a non-nil error is returned by the method.
	hook func(ctx context.Context, method string) error

	status    Status
	agents    []Agent
	approval  Approval
	approvals []Approval
	reload    ReloadResult
	report    Report

	events  []Event
	lastSeq int64 // of the newest event ever added
	pruned  int64 // events before this seq were pruned (prune)
	changed chan struct{}
}

type fakeRefusal struct {
	Peer Peer
	Why  string
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{errs: map[string]error{}, changed: make(chan struct{})}
}

// enter records a call and returns the error to answer it with.
func (f *fakeBackend) enter(ctx context.Context, method string, peer Peer, params any) error {
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{Method: method, Peer: peer, Params: params})
	hook, err := f.hook, f.errs[method]
	f.mu.Unlock()
	if hook != nil {
		if herr := hook(ctx, method); herr != nil {
			return herr
		}
	}
	return err
}

func (f *fakeBackend) setErr(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[method] = err
}

func (f *fakeBackend) setHook(h func(ctx context.Context, method string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = h
}

// callsOf returns the recorded calls of one method.
func (f *fakeBackend) callsOf(method string) []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeCall
	for _, c := range f.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeBackend) refusals() []fakeRefusal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRefusal(nil), f.refused...)
}

func (f *fakeBackend) Status(ctx context.Context) (Status, error) {
	err := f.enter(ctx, "Status", Peer{}, nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, err
}

func (f *fakeBackend) Agents(ctx context.Context) ([]Agent, error) {
	err := f.enter(ctx, "Agents", Peer{}, nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agents, err
}

func (f *fakeBackend) StartAgent(ctx context.Context, by Peer, name string) error {
	return f.enter(ctx, "StartAgent", by, name)
}

func (f *fakeBackend) StopAgent(ctx context.Context, by Peer, name string) error {
	return f.enter(ctx, "StopAgent", by, name)
}

func (f *fakeBackend) Prompt(ctx context.Context, by Peer, p PromptParams) error {
	return f.enter(ctx, "Prompt", by, p)
}

// Approvals pages f.approvals as the store does: by Seq, after the
// cursor, at most p.Limit. Status is only recorded.
func (f *fakeBackend) Approvals(ctx context.Context, p ApprovalsParams) ([]Approval, error) {
	err := f.enter(ctx, "Approvals", Peer{}, p)
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Approval
	for _, a := range f.approvals {
		if a.Seq > p.Cursor && len(out) < p.Limit {
			out = append(out, a)
		}
	}
	return out, err
}

func (f *fakeBackend) Approval(ctx context.Context, id string) (Approval, error) {
	err := f.enter(ctx, "Approval", Peer{}, id)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.approval, err
}

func (f *fakeBackend) Approve(ctx context.Context, by Peer, p ApproveParams) (Approval, error) {
	err := f.enter(ctx, "Approve", by, p)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.approval, err
}

func (f *fakeBackend) Reject(ctx context.Context, by Peer, p RejectParams) (Approval, error) {
	err := f.enter(ctx, "Reject", by, p)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.approval, err
}

func (f *fakeBackend) Events(ctx context.Context, p EventsParams) ([]Event, error) {
	if err := f.enter(ctx, "Events", Peer{}, p); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil { // as the store's queries do
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Event
	for _, e := range f.events {
		if e.Seq > p.Since && matchKind(p.Types, e.Kind) && (p.Agent == "" || e.Agent == p.Agent) {
			out = append(out, e)
			if len(out) == p.Limit {
				break
			}
		}
	}
	return out, nil
}

// matchKind is the store's rule: no types matches every kind; a type
// ending in * matches the kinds with that prefix.
func matchKind(types []string, kind string) bool {
	if len(types) == 0 {
		return true
	}
	for _, t := range types {
		if prefix, ok := strings.CutSuffix(t, "*"); ok {
			if strings.HasPrefix(kind, prefix) {
				return true
			}
		} else if t == kind {
			return true
		}
	}
	return false
}

func (f *fakeBackend) LastEventSeq(ctx context.Context) (int64, error) {
	if err := f.enter(ctx, "LastEventSeq", Peer{}, nil); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSeq, nil
}

func (f *fakeBackend) EventsPrunedBefore(ctx context.Context) (int64, error) {
	if err := f.enter(ctx, "EventsPrunedBefore", Peer{}, nil); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pruned, nil
}

// prune deletes the events before seq, as the store's retention does.
func (f *fakeBackend) prune(seq int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var kept []Event
	for _, e := range f.events {
		if e.Seq >= seq {
			kept = append(kept, e)
		}
	}
	f.events, f.pruned = kept, seq
}

func (f *fakeBackend) FlushEvents(ctx context.Context) error {
	return f.enter(ctx, "FlushEvents", Peer{}, nil)
}

func (f *fakeBackend) EventsChanged() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// addEvents stores one event per kind (seq continuing the log) and
// wakes the followers, as the store does on commit. It returns the
// events stored.
func (f *fakeBackend) addEvents(kinds ...string) []Event {
	return f.addEventsDetail("", kinds...)
}

func (f *fakeBackend) addEventsDetail(detail string, kinds ...string) []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var added []Event
	for _, k := range kinds {
		f.lastSeq++
		e := Event{
			Seq:    f.lastSeq,
			Time:   time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(f.lastSeq-1) * time.Second),
			Kind:   k,
			Agent:  "agent-" + k,
			Detail: detail,
		}
		f.events = append(f.events, e)
		added = append(added, e)
	}
	close(f.changed)
	f.changed = make(chan struct{})
	return added
}

func (f *fakeBackend) Reload(ctx context.Context, by Peer) (ReloadResult, error) {
	err := f.enter(ctx, "Reload", by, nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reload, err
}

func (f *fakeBackend) Report(ctx context.Context, p ReportParams) (Report, error) {
	err := f.enter(ctx, "Report", Peer{}, p)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.report, err
}

func (f *fakeBackend) Refused(p Peer, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = append(f.refused, fakeRefusal{p, why})
}

// shortTempDir returns a fresh directory with a short path: a Unix
// socket path must fit in about 108 bytes, which t.TempDir (named after
// the test) does not promise.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testServer is a Server serving a fake backend on a real socket.
type testServer struct {
	srv    *Server
	fb     *fakeBackend
	path   string
	cancel context.CancelFunc
	done   chan error // Serve's result
}

// startServer listens on a fresh socket and serves fb until the test
// ends (or stop is called). cfg's Backend is set to fb.
func startServer(t *testing.T, fb *fakeBackend, cfg ServerConfig) *testServer {
	t.Helper()
	path := filepath.Join(shortTempDir(t), "state", SocketName)
	return startServerAt(t, path, fb, cfg)
}

func startServerAt(t *testing.T, path string, fb *fakeBackend, cfg ServerConfig) *testServer {
	t.Helper()
	l, err := ListenGroup(path, cfg.OperatorGroup)
	if err != nil {
		t.Fatalf("Listen(%s): %v", path, err)
	}
	cfg.Backend = fb
	ts := &testServer{srv: NewServer(cfg), fb: fb, path: path, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	go func() { ts.done <- ts.srv.Serve(ctx, l) }()
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

// stop cancels Serve and returns its result; later calls return nil.
func (ts *testServer) stop(t *testing.T) error {
	t.Helper()
	ts.cancel()
	select {
	case err, ok := <-ts.done:
		if !ok {
			return nil
		}
		close(ts.done)
		return err
	case <-time.After(hangGuard):
		t.Fatal("Serve did not return after its context was cancelled")
		return nil
	}
}

// connCount is how many connections the server is serving.
func (ts *testServer) connCount() int {
	ts.srv.mu.Lock()
	defer ts.srv.mu.Unlock()
	return len(ts.srv.conns)
}

// dial connects a Client, closed when the test ends.
func dial(t *testing.T, path string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cl, err := Dial(ctx, path)
	if err != nil {
		t.Fatalf("Dial(%s): %v", path, err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// callCtx is the context of one call in a test.
func callCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// rawConn is a hand-driven connection: lines written and read as they
// are.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, path string) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, r: bufio.NewReaderSize(c, 64*1024)}
}

func (rc *rawConn) writeLine(line string) {
	rc.t.Helper()
	if _, err := rc.c.Write([]byte(line + "\n")); err != nil {
		rc.t.Fatalf("write %q: %v", line, err)
	}
}

// readLine reads one line; it fails the test on error or when nothing
// arrives.
func (rc *rawConn) readLine() string {
	rc.t.Helper()
	line, err := rc.tryReadLine()
	if err != nil {
		rc.t.Fatalf("read a line: %v", err)
	}
	return line
}

func (rc *rawConn) tryReadLine() (string, error) {
	_ = rc.c.SetReadDeadline(time.Now().Add(hangGuard))
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return line, err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// wireMsg is any line from the server: a response or a notification.
type wireMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *Error          `json:"error"`
}

func (rc *rawConn) readMsg() wireMsg {
	rc.t.Helper()
	line := rc.readLine()
	var m wireMsg
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		rc.t.Fatalf("reply %q is not JSON: %v", line, err)
	}
	if m.JSONRPC != "2.0" {
		rc.t.Fatalf("reply %q: jsonrpc = %q, want 2.0", line, m.JSONRPC)
	}
	return m
}

// notification decodes an event notification.
func (m wireMsg) notification(t *testing.T) EventNotification {
	t.Helper()
	if m.Method != NotificationEvent || m.ID != nil {
		t.Fatalf("got %+v, want an %q notification", m, NotificationEvent)
	}
	var n EventNotification
	if err := json.Unmarshal(m.Params, &n); err != nil {
		t.Fatalf("notification params %s: %v", m.Params, err)
	}
	return n
}

// reqLine renders a JSON-RPC request line.
func reqLine(id int, method string, params any) string {
	r := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		r["params"] = params
	}
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// asJSON renders v for comparisons that should not depend on Go
// representation details (time locations, nil versus empty).
func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return string(b)
}

// wantCode checks that err is an *Error with the code and its reason.
func wantCode(t *testing.T, err error, code int) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want code %d", code)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want an *Error with code %d", err, err, code)
	}
	if e.Code != code || e.Reason() != reasons[code] {
		t.Fatalf("err = %v: code %d reason %q, want code %d reason %q", err, e.Code, e.Reason(), code, reasons[code])
	}
}

func seqs(evs []Event) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, e.Seq)
	}
	return b.String()
}

// The helper process: the test binary re-executed (as another uid) to be
// a client of a socket.
const (
	helperEnv        = "CONTROL_TEST_HELPER"
	helperSocketEnv  = "CONTROL_TEST_SOCKET"
	helperRequestEnv = "CONTROL_TEST_REQUEST" // mode "request": the line to send
)

// runHelper dials the socket at path, sends a status request (mode
// "status") or the line in CONTROL_TEST_REQUEST (mode "request") and
// prints the first line it gets back as "REPLY <line>". A failed connect
// prints "DIAL-ERROR eacces=<bool>: <error>".
func runHelper(mode, path string) int {
	line := reqLine(1, MethodStatus, nil)
	switch mode {
	case "status":
	case "request":
		line = os.Getenv(helperRequestEnv)
	default:
		fmt.Printf("HELPER-ERROR: unknown mode %q\n", mode)
		return 2
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Printf("DIAL-ERROR eacces=%t: %v\n", errors.Is(err, syscall.EACCES), err)
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(hangGuard))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		// The server may have refused and closed already; the reply
		// below still tells.
		fmt.Fprintf(os.Stderr, "write: %v\n", err)
	}
	line, err = bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		fmt.Printf("READ-ERROR: %v\n", err)
		return 0
	}
	fmt.Printf("REPLY %s\n", strings.TrimSpace(line))
	return 0
}
