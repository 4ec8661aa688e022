package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/user"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Backend is what the control API operates on: the gateway. The gateway
// package implements it; tests may use a fake. Errors that are *Error
// reach the client as they are; others become CodeInternal.
type Backend interface {
	Status(ctx context.Context) (Status, error)
	Agents(ctx context.Context) ([]Agent, error)
	StartAgent(ctx context.Context, by Peer, name string) error
	StopAgent(ctx context.Context, by Peer, name string) error
	Prompt(ctx context.Context, by Peer, p PromptParams) error
	// Approvals returns at most p.Limit items of p.Status with seq
	// greater than p.Cursor, oldest first (the server asks for one more
	// than a page, to know whether more follow).
	Approvals(ctx context.Context, p ApprovalsParams) ([]Approval, error)
	Approval(ctx context.Context, id string) (Approval, error)
	Approve(ctx context.Context, by Peer, p ApproveParams) (Approval, error)
	Reject(ctx context.Context, by Peer, p RejectParams) (Approval, error)
	// Events returns at most p.Limit events with seq greater than
	// p.Since, of p.Types and about p.Agent when set, oldest first.
	Events(ctx context.Context, p EventsParams) ([]Event, error)
	LastEventSeq(ctx context.Context) (int64, error)
	// EventsPrunedBefore returns the seq before which every event was
	// pruned (bcpgw run --retain), 0 if none ever was.
	EventsPrunedBefore(ctx context.Context) (int64, error)
	// EventsChanged returns a channel closed when new events are stored.
	EventsChanged() <-chan struct{}
	// FlushEvents waits until the events recorded so far are stored: the
	// gateway writes most of them without waiting.
	FlushEvents(ctx context.Context) error
	Reload(ctx context.Context, by Peer) (ReloadResult, error)
	Report(ctx context.Context, p ReportParams) (Report, error)
	// Refused records a connection refused for its credentials.
	Refused(p Peer, why string)
	DeliveriesBackend
	SubscriptionsBackend
	// Backup writes a copy of the state file to p.Path.
	Backup(ctx context.Context, by Peer, p BackupParams) (BackupResult, error)
}

// ServerConfig configures a Server.
type ServerConfig struct {
	Backend Backend
	Logger  hclog.Logger
	Version string // reported by status
	// MaxConns bounds concurrent connections; default 64. A connection
	// over it takes the slot of the one idle the longest; if none is
	// idle it is refused with CodeLimit (see Server).
	MaxConns int
	// ReservedConns is how many of MaxConns no connection following
	// events may hold: they stay for commands. Default MaxConns/8 (at
	// least 1, and less than MaxConns): 8 of 64.
	ReservedConns int
	// WriteTimeout is how long a client may leave a line unread before
	// its connection is closed; default 10s. A client that stops reading
	// cannot hold up the gateway.
	WriteTimeout time.Duration
	// IdleTimeout closes a connection that has sent nothing, has no
	// request being answered and follows no events for that long;
	// default 5m. A connection following events is never idle.
	IdleTimeout time.Duration
	// LineTimeout closes a connection whose request line, once begun,
	// is not complete (its newline read) within it; default 10s.
	LineTimeout time.Duration
	// PeerPolicy checks the process behind each connection that passes
	// the uid check: no runtime, nothing a runtime started, nothing in
	// another user or pid namespace. The zero value is the running
	// gateway's policy (os.Getpid(), /proc); tests set GatewayPID to
	// another process so that their own children may connect.
	PeerPolicy PeerPolicy
	// OperatorGroup, when above 0, is a group whose members may use the
	// socket too (bcpgw run --operator-group): other operators, so that
	// an approval policy can require distinct deciders. A member is
	// checked like the gateway's own user (PeerPolicy), and must hold the
	// group as its primary or a supplementary group. Listen the socket
	// with ListenConfig.Group set to the same group, or members cannot
	// reach it. Only a gateway running as root can check another user's
	// process (its namespaces), so NewServer's caller must refuse the
	// setting otherwise (CheckOperatorGroup).
	OperatorGroup int
}

// CheckOperatorGroup says whether a gateway running as uid self can serve
// the members of group gid: it must run as root (only root can read
// another user's namespaces, which the peer policy compares), and gid
// must be a gid (below 2^32-1) other than root's group.
func CheckOperatorGroup(gid, self int) error {
	switch {
	case gid <= 0:
		return fmt.Errorf("operator group %d: give a group other than root's (gid 0)", gid)
	case gid >= math.MaxUint32:
		// chown takes a 32-bit gid: a larger one would wrap (2^32 is
		// root's group again), and 2^32-1 means "leave the group as it is".
		return fmt.Errorf("operator group %d: not a gid (at most %d)", gid, math.MaxUint32-1)
	case self != 0:
		return fmt.Errorf("operator group %d: only a gateway running as root can check other users' processes before it trusts them; run bcpgw as root, or decide as the gateway's user", gid)
	}
	return nil
}

// The defaults of ServerConfig's timeouts (see the package doc).
const (
	DefaultWriteTimeout = 10 * time.Second
	DefaultIdleTimeout  = 5 * time.Minute
	DefaultLineTimeout  = 10 * time.Second
)

// Limits of one connection.
const (
	maxLine     = 1 << 20 // bytes of one request
	maxInFlight = 8       // requests of one connection handled at once
	outQueue    = 64      // lines waiting for the writer
)

// Server answers JSON-RPC 2.0 requests, one JSON object per line, on the
// control socket. Each connection is checked with its peer credentials
// first: only the gateway's own uid, root and the members of its operator
// group (if it has one) may use it, and then only from a process that is
// neither the gateway's descendant nor in another user or pid namespace
// (PeerPolicy).
//
// No set of connections can lock an operator out. A connection is idle
// when it has sent nothing since its last request was answered (or since
// it connected), has no request in flight and follows no events; an idle
// one is closed after IdleTimeout, and a request line begun must be
// complete within LineTimeout. That alone would still let MaxConns
// connections hold every slot for IdleTimeout, so two rules keep one for
// a new command at once:
//
//   - a connection over MaxConns takes the slot of the connection idle
//     the longest (idle, or with half a line sent), which is closed with
//     a CodeLimit error line saying why; only when none is idle is the
//     new one refused;
//   - connections that follow events are never idle (the approvals TUI
//     and bcpgw events --follow wait for hours, and must not be cut
//     while events flow or while none do), so they could fill every
//     slot; subscribe is refused with CodeLimit on a connection that
//     would be the (MaxConns-ReservedConns+1)th following, which keeps
//     ReservedConns slots for everything else.
//
// Either rule alone fails: eviction cannot make room among subscribers,
// and a reserve can be filled by idle connections until they time out.
// Together an operator's command finds a slot unless ReservedConns
// requests are being answered at that very moment, which ends as they
// do. Only the gateway's operators can connect at all: this guards
// against a leaking script or a stuck client, not a stranger.
type Server struct {
	cfg     ServerConfig
	log     hclog.Logger
	uid     int
	started time.Time

	// mu is taken before any conn's mu, never while holding one.
	mu      sync.Mutex
	path    string      // the socket, once serving
	closing atomic.Bool // Serve is closing every connection
	conns   map[*conn]struct{}
	// following counts the connections with a live subscription.
	following int
	wg        sync.WaitGroup // connections
}

// NewServer returns a server; call Serve.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 64
	}
	if cfg.ReservedConns <= 0 {
		cfg.ReservedConns = max(1, cfg.MaxConns/8)
	}
	cfg.ReservedConns = min(cfg.ReservedConns, cfg.MaxConns-1)
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.LineTimeout <= 0 {
		cfg.LineTimeout = DefaultLineTimeout
	}
	cfg.PeerPolicy = cfg.PeerPolicy.withDefaults()
	return &Server{cfg: cfg, log: cfg.Logger, uid: os.Getuid(), started: time.Now(), conns: map[*conn]struct{}{}}
}

// Authorize decides whether a peer may use the control socket of a
// gateway running as uid self: only the same uid, and root.
func Authorize(p Peer, self int) error {
	if p.UID == self || p.UID == 0 {
		return nil
	}
	if self == 0 {
		return Errorf(CodePermission, "uid %d may not use this control socket: the gateway runs as root, and only root may", p.UID)
	}
	return Errorf(CodePermission, "uid %d may not use this control socket: only uid %d (the gateway's user) and root may", p.UID, self)
}

// Serve accepts connections on l until ctx ends, then closes l (removing
// the socket file), closes every connection and waits for their
// goroutines.
func (s *Server) Serve(ctx context.Context, l *Listener) error {
	s.mu.Lock()
	s.path = l.Path
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var err error
	var delay time.Duration // after a failed accept
	for {
		var c *net.UnixConn
		c, err = l.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			// Out of file descriptors, an aborted connection: the
			// operator's socket must outlive them, as net/http's does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Error("control socket: accept failed; retrying", "error", err, "in", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			continue
		}
		delay = 0
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(ctx, c)
		}()
	}
	l.Close()
	s.mu.Lock()
	s.closing.Store(true)
	for c := range s.conns {
		c.close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("control socket: %w", err)
}

// conn is one client connection. Its reader goroutine (serveConn) parses
// requests and starts a goroutine per request; one writer goroutine owns
// the socket's write side.
type conn struct {
	s    *Server
	c    *net.UnixConn
	peer Peer
	// member is a peer served only as a member of the operator group
	// (ServerConfig.OperatorGroup), not as the gateway's user or root.
	member bool

	ctx       context.Context // ends when the connection closes
	cancel    context.CancelFunc
	out       chan []byte
	requests  sync.WaitGroup // requests being handled
	followers sync.WaitGroup // subscriptions' followers
	slots     chan struct{}  // bounds requests in flight

	mu   sync.Mutex
	subs map[string]*subscription
	next int
	// What makes the connection idle or not (see Server), and the read
	// deadline that follows from it (rearm).
	inFlight   int       // requests read and not yet answered
	following  int       // followers running
	partial    bool      // part of a request line has been read
	lineStart  time.Time // when that part began
	lastActive time.Time // the last byte read or the last answer given
	// end, once set, is why the server ended the connection: the error
	// line its client gets last.
	end *Error
}

// subscription is one follower of the event log.
type subscription struct {
	stop context.CancelFunc
	done chan struct{} // closed when the follower has returned
}

func (s *Server) serveConn(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	peer, err := peerCred(c)
	member := false
	if err != nil {
		peer = Peer{UID: -1, GID: -1} // unknown: refused
	} else if err = Authorize(peer, s.uid); err == nil || s.cfg.OperatorGroup > 0 {
		// The uid first: another user learns nothing from the policy's
		// reasons. Then the process: a runtime has the gateway's uid. A
		// user who is neither must hold the operator group; the process
		// is held (its pidfd) while its groups are read, so its pid
		// cannot be another's by then.
		member = err != nil
		err = checkPeerProcess(c, peer.PID, func(pid int) error {
			if member {
				if err := s.cfg.PeerPolicy.member(pid, peer.UID, s.cfg.OperatorGroup); err != nil {
					return err
				}
			}
			return s.cfg.PeerPolicy.Check(pid)
		})
	}
	if err != nil {
		s.log.Warn("control connection refused", "uid", peer.UID, "pid", peer.PID, "error", err)
		s.cfg.Backend.Refused(peer, err.Error())
		s.refuse(c, CodePermission, err.Error())
		return
	}
	peer.User = userName(peer.UID)
	cc := &conn{s: s, c: c, peer: peer, member: member, out: make(chan []byte, outQueue), slots: make(chan struct{}, maxInFlight), subs: map[string]*subscription{}}
	cc.ctx, cc.cancel = context.WithCancel(ctx)
	defer cc.cancel()
	cc.lastActive = time.Now()
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return
	}
	var victim *conn
	if s.liveConnsLocked() >= s.cfg.MaxConns {
		if victim = s.idlestLocked(); victim == nil {
			s.mu.Unlock()
			s.refuse(c, CodeLimit, fmt.Sprintf("all %d control connections are busy answering requests or following events; retry in a moment", s.cfg.MaxConns))
			return
		}
	}
	s.conns[cc] = struct{}{}
	s.mu.Unlock()
	if victim != nil {
		s.log.Info("control connection closed to make room for a new one: it was the one idle the longest",
			"uid", victim.peer.UID, "pid", victim.peer.PID, "max_conns", s.cfg.MaxConns)
		victim.close()
	}
	defer func() {
		s.mu.Lock()
		delete(s.conns, cc)
		s.mu.Unlock()
	}()
	s.log.Debug("control connection", "user", peer.User, "uid", peer.UID, "pid", peer.PID)

	written := make(chan struct{})
	go func() {
		defer close(written)
		cc.writer()
	}()
	cc.read()
	// A client may send its requests and close its side: they are
	// answered before the connection ends. Subscriptions end with it.
	cc.requests.Wait()
	cc.mu.Lock()
	end := cc.end
	cc.mu.Unlock()
	if end != nil {
		// After the answers: the client reads nothing past this line.
		cc.sendCtx(context.Background(), response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: end})
	}
	cc.cancel()
	cc.followers.Wait()
	close(cc.out)
	<-written
}

// refuse answers a connection that may not be served with one error line
// and closes it.
func (s *Server) refuse(c *net.UnixConn, code int, msg string) {
	line, _ := json.Marshal(response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: Errorf(code, "%s", msg)})
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(append(line, '\n'))
}

// close ends the connection: the reader sees EOF, requests see ctx end.
func (cc *conn) close() {
	cc.cancel()
	_ = cc.c.CloseRead()
}

// liveConnsLocked counts the connections that hold a slot: all but those
// the server has ended (timed out, closed to make room), which are on
// their way out. s.mu is held.
func (s *Server) liveConnsLocked() int {
	n := 0
	for c := range s.conns {
		c.mu.Lock()
		if c.end == nil {
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// idlestLocked picks the connection idle the longest (with half a line
// sent counting as idle since its last byte), marks it closed to make
// room and returns it; nil if no connection is idle. s.mu is held.
func (s *Server) idlestLocked() *conn {
	var victim *conn
	var since time.Time
	for c := range s.conns {
		c.mu.Lock()
		if c.end == nil && c.inFlight == 0 && c.following == 0 && (victim == nil || c.lastActive.Before(since)) {
			victim, since = c, c.lastActive
		}
		c.mu.Unlock()
	}
	if victim != nil {
		victim.mu.Lock()
		victim.end = Errorf(CodeLimit, "connection closed: all %d control connections were in use and this one had been idle the longest (since %s); reconnect to go on",
			s.cfg.MaxConns, since.Format(time.TimeOnly))
		victim.mu.Unlock()
	}
	return victim
}

// deadlineLocked is the read deadline the connection's state calls for:
// the end of LineTimeout within a line, of IdleTimeout when idle, none
// otherwise. cc.mu is held.
func (cc *conn) deadlineLocked() time.Time {
	switch {
	case cc.partial:
		return cc.lineStart.Add(cc.s.cfg.LineTimeout)
	case cc.inFlight == 0 && cc.following == 0:
		return cc.lastActive.Add(cc.s.cfg.IdleTimeout)
	}
	return time.Time{}
}

// rearmLocked sets the read deadline from the connection's state; every
// change of that state calls it, so a Read in progress always waits
// under the current one. cc.mu is held.
func (cc *conn) rearmLocked() { _ = cc.c.SetReadDeadline(cc.deadlineLocked()) }

// errEnded stops read's scanner on a connection the server ended.
var errEnded = errors.New("connection ended by the server")

// ended reports whether the server ended the connection (end is set).
func (cc *conn) ended() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.end != nil
}

// done marks a request answered: the connection may become idle.
func (cc *conn) done() {
	cc.mu.Lock()
	cc.inFlight--
	cc.lastActive = time.Now()
	cc.rearmLocked()
	cc.mu.Unlock()
}

// Read reads the connection for read's scanner, keeping track of the
// line in progress and of activity, under the read deadline of the
// moment. A deadline that passed only because the state changed while
// Read waited (a request was answered just then) is not a timeout: Read
// goes on with the new one. A real timeout ends the connection with end
// set.
func (cc *conn) Read(p []byte) (int, error) {
	for {
		cc.mu.Lock()
		cc.rearmLocked()
		cc.mu.Unlock()
		n, err := cc.c.Read(p)
		now := time.Now()
		cc.mu.Lock()
		if n > 0 {
			cc.lastActive = now
			if i := bytes.LastIndexByte(p[:n], '\n'); i >= 0 {
				cc.partial = i < n-1
				cc.lineStart = now
			} else if !cc.partial {
				cc.partial, cc.lineStart = true, now
			}
		}
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			if d := cc.deadlineLocked(); d.IsZero() || now.Before(d) {
				cc.mu.Unlock()
				if n > 0 {
					return n, nil
				}
				continue
			}
			if cc.end == nil {
				if cc.partial {
					cc.end = Errorf(CodeInvalidRequest, "connection closed: a request line was begun %s ago and not finished (no newline); send each request as one line, within %s",
						cc.s.cfg.LineTimeout, cc.s.cfg.LineTimeout)
				} else {
					cc.end = Errorf(CodeUnavailable, "connection closed: idle for %s (no request, no subscription); reconnect to go on", cc.s.cfg.IdleTimeout)
				}
			}
			cc.s.log.Debug("control connection timed out", "uid", cc.peer.UID, "pid", cc.peer.PID, "reason", cc.end.Message)
		}
		cc.mu.Unlock()
		return n, err
	}
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// request is a JSON-RPC 2.0 request or notification (no id).
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
}

// read parses lines until EOF or an overlong line, and runs each request
// on a goroutine of its own (at most maxInFlight at once).
func (cc *conn) read() {
	sc := bufio.NewScanner(cc) // cc.Read: deadlines, see Server
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		// A client that closes its side after a last line without a
		// newline has that line answered; the half line of a connection
		// the server ended (timed out, closed to make room) is dropped.
		if atEOF && cc.ended() {
			return 0, nil, errEnded
		}
		return bufio.ScanLines(data, atEOF)
	})
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		req, rerr := parseRequest(line)
		if rerr != nil {
			id := json.RawMessage("null")
			if req != nil && req.ID != nil {
				id = req.ID
			}
			cc.send(response{JSONRPC: "2.0", ID: id, Error: rerr})
			continue
		}
		cc.mu.Lock()
		cc.inFlight++ // before the next Read arms an idle deadline
		cc.mu.Unlock()
		select {
		case cc.slots <- struct{}{}:
		case <-cc.ctx.Done():
			cc.done()
			return
		}
		cc.requests.Add(1)
		go func() {
			defer cc.requests.Done()
			defer cc.done()
			defer func() { <-cc.slots }()
			cc.handle(req)
		}()
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		cc.send(response{JSONRPC: "2.0", ID: json.RawMessage("null"),
			Error: Errorf(CodeInvalidRequest, "request longer than %d bytes; closing the connection", maxLine)})
	}
}

// parseRequest checks the JSON-RPC envelope. On an error, the request is
// returned too when its id could be read, so the error can name it.
func parseRequest(line []byte) (*request, *Error) {
	if line[0] == '[' {
		return nil, Errorf(CodeInvalidRequest, "batch requests are not supported: send one request per line")
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(line) {
			return nil, Errorf(CodeParseError, "not JSON: %v", err)
		}
		return nil, Errorf(CodeInvalidRequest, "not a JSON-RPC request: %v", err)
	}
	if req.ID != nil && !validID(req.ID) {
		return nil, Errorf(CodeInvalidRequest, "id must be a string, a number or null")
	}
	switch {
	case req.JSONRPC != "2.0":
		return &req, Errorf(CodeInvalidRequest, `"jsonrpc" must be "2.0"`)
	case req.Method == "":
		return &req, Errorf(CodeInvalidRequest, `"method" is missing`)
	}
	return &req, nil
}

func validID(id json.RawMessage) bool {
	switch id[0] {
	case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// handle runs one request and answers it, unless it is a notification.
func (cc *conn) handle(req *request) {
	result, after, err := cc.call(req)
	if req.ID == nil {
		if after != nil {
			after()
		}
		return
	}
	resp := response{JSONRPC: "2.0", ID: req.ID}
	if err != nil {
		resp.Error = cc.asError(req.Method, err)
	} else {
		if result == nil {
			result = struct{}{}
		}
		resp.Result = result
	}
	cc.send(resp)
	if after != nil && err == nil {
		after() // a subscription's notifications start after its response
	}
}

func (cc *conn) asError(method string, err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case cc.ctx.Err() != nil:
		return Errorf(CodeUnavailable, "the gateway is shutting down")
	}
	cc.s.log.Error("control request failed", "method", method, "error", err)
	return Errorf(CodeInternal, "%s: %v", method, err)
}

// decode reads params into v, strictly: unknown fields are an error, so a
// misspelt option is not silently ignored.
func decode(params json.RawMessage, v any) error {
	if len(params) == 0 || string(params) == "null" {
		return nil
	}
	if params[0] != '{' {
		return Errorf(CodeInvalidParams, "params must be an object")
	}
	if err := checkKeys(params, v); err != nil {
		return Errorf(CodeInvalidParams, "params: %v", err)
	}
	d := json.NewDecoder(bytes.NewReader(params))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return Errorf(CodeInvalidParams, "params: %v", err)
	}
	return nil
}

// checkKeys refuses what encoding/json would let through: a key given
// twice (which one counts?) and a key in another case than its field's
// name ("ID" for "id").
func checkKeys(params json.RawMessage, v any) error {
	names := map[string]bool{}
	t := reflect.TypeOf(v).Elem()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" {
			names[name] = true
		}
	}
	d := json.NewDecoder(bytes.NewReader(params))
	if _, err := d.Token(); err != nil { // {
		return err
	}
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		switch {
		case seen[key]:
			return fmt.Errorf("%q given twice", key)
		case !names[key]:
			return fmt.Errorf("unknown field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// call dispatches a request. after, if not nil, runs once the response is
// queued.
func (cc *conn) call(req *request) (result any, after func(), err error) {
	ctx, b, peer := cc.ctx, cc.s.cfg.Backend, cc.peer
	switch req.Method {
	case MethodStatus:
		if err := decode(req.Params, &struct{}{}); err != nil {
			return nil, nil, err
		}
		st, err := b.Status(ctx)
		st.Version, st.PID, st.StartedAt = cc.s.cfg.Version, os.Getpid(), cc.s.started
		cc.s.mu.Lock()
		st.Socket = cc.s.path
		cc.s.mu.Unlock()
		return st, nil, err
	case MethodAgentsList:
		if err := decode(req.Params, &struct{}{}); err != nil {
			return nil, nil, err
		}
		all, err := b.Agents(ctx)
		return all, nil, err
	case MethodAgentsStart, MethodAgentsStop:
		var p AgentParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		if p.Name == "" {
			return nil, nil, Errorf(CodeInvalidParams, `"name" is required`)
		}
		if req.Method == MethodAgentsStart {
			return nil, nil, b.StartAgent(ctx, peer, p.Name)
		}
		return nil, nil, b.StopAgent(ctx, peer, p.Name)
	case MethodAgentsPrompt:
		var p PromptParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		if p.Name == "" || p.Text == "" {
			return nil, nil, Errorf(CodeInvalidParams, `"name" and "text" are required`)
		}
		return nil, nil, b.Prompt(ctx, peer, p)
	case MethodApprovalsList:
		var p ApprovalsParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		return approvalsPage(ctx, b, p)
	case MethodBackup:
		result, err := cc.backupCall(req)
		return result, nil, err
	case MethodNotifyTest:
		result, err := cc.notifyCall(req)
		return result, nil, err
	case MethodDeliveriesList, MethodDeliveriesRetry, MethodDeliveriesDiscard:
		result, err := cc.deliveriesCall(req)
		return result, nil, err
	case MethodSubscriptionsList, MethodSubscriptionsRevoke:
		result, err := cc.subscriptionsCall(req)
		return result, nil, err
	case MethodApprovalsGet:
		var p IDParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		if p.ID == "" {
			return nil, nil, Errorf(CodeInvalidParams, `"id" is required`)
		}
		a, err := b.Approval(ctx, p.ID)
		return a, nil, err
	case MethodApprovalsApprove:
		var p ApproveParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		if p.ID == "" || p.SHA256 == "" {
			return nil, nil, Errorf(CodeInvalidParams, `"id" and "sha256" (the hash of the content shown) are required`)
		}
		a, err := b.Approve(ctx, peer, p)
		return a, nil, err
	case MethodApprovalsReject:
		var p RejectParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		if p.ID == "" || p.Reason == "" {
			return nil, nil, Errorf(CodeInvalidParams, `"id" and "reason" are required`)
		}
		a, err := b.Reject(ctx, peer, p)
		return a, nil, err
	case MethodEventsList:
		var p EventsParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		page, err := eventsPage(ctx, b, p)
		return page, nil, err
	case MethodSubscribe:
		return cc.subscribe(req.Params)
	case MethodUnsubscribe:
		var p UnsubscribeParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		cc.mu.Lock()
		sub, ok := cc.subs[p.Subscription]
		delete(cc.subs, p.Subscription)
		cc.mu.Unlock()
		if !ok {
			return nil, nil, Errorf(CodeNotFound, "no subscription %q on this connection", p.Subscription)
		}
		// Once the follower has returned, nothing of it follows the
		// response.
		sub.stop()
		<-sub.done
		return nil, nil, nil
	case MethodReload:
		if err := decode(req.Params, &struct{}{}); err != nil {
			return nil, nil, err
		}
		r, err := b.Reload(ctx, peer)
		return r, nil, err
	case MethodReport:
		var p ReportParams
		if err := decode(req.Params, &p); err != nil {
			return nil, nil, err
		}
		r, err := b.Report(ctx, p)
		return r, nil, err
	}
	return nil, nil, Errorf(CodeMethodNotFound, "no method %q", req.Method)
}

// eventsPage answers events.list.
func eventsPage(ctx context.Context, b ReadBackend, p EventsParams) (EventsPage, error) {
	if err := checkTypes(p.Types); err != nil {
		return EventsPage{}, err
	}
	if err := checkAgent(p.Agent); err != nil {
		return EventsPage{}, err
	}
	if p.Limit <= 0 || p.Limit > MaxEventsPage {
		p.Limit = MaxEventsPage
	}
	// An operator who asks right after something happened must see
	// it. (Subscriptions need not: they are woken by the commit.)
	if err := b.FlushEvents(ctx); err != nil {
		return EventsPage{}, err
	}
	evs, err := b.Events(ctx, p)
	if err != nil {
		return EventsPage{}, err
	}
	page := EventsPage{Events: evs, Next: p.Since}
	if page.Events == nil {
		page.Events = []Event{}
	}
	if n := len(evs); n > 0 {
		page.Next = evs[n-1].Seq
	}
	// Read after the events: only a prefix of the log is pruned, so
	// if events after since are gone now, this says so even when the
	// pruning came while they were being read.
	pruned, err := prunedAfter(ctx, b, p.Since)
	if pruned > 0 {
		page.PrunedBefore, page.Notice = pruned, prunedNotice(pruned)
		page.Next = max(page.Next, pruned-1)
	}
	return page, err
}

// prunedAfter returns the seq before which events were pruned if that
// left a gap after cursor, else 0.
func prunedAfter(ctx context.Context, b ReadBackend, cursor int64) (int64, error) {
	pruned, err := b.EventsPrunedBefore(ctx)
	if err != nil || pruned <= cursor+1 {
		return 0, err
	}
	return pruned, nil
}

func prunedNotice(pruned int64) string {
	return fmt.Sprintf("events before %d were pruned (bcpgw run --retain); the oldest kept is %d", pruned, pruned)
}

// maxApprovalsPageBytes is how much item JSON an approvals.list page
// holds at most (besides a first item larger than that alone), far from
// the client's maxResponseLine (see ApprovalsPage).
const maxApprovalsPageBytes = 8 << 20

// wireApprovalsPage is ApprovalsPage with its items already encoded:
// approvalsPage measures each one to cut the page.
type wireApprovalsPage struct {
	Items []json.RawMessage `json:"items"`
	Next  int64             `json:"next,omitempty"`
}

// approvalsPage answers approvals.list: up to p.Limit items after
// p.Cursor, fewer if their JSON would pass maxApprovalsPageBytes, with
// the cursor of the next page when more follow.
func approvalsPage(ctx context.Context, b ReadBackend, p ApprovalsParams) (any, func(), error) {
	_, lines, next, err := approvalItems(ctx, b, p)
	if err != nil {
		return nil, nil, err
	}
	return wireApprovalsPage{Items: lines, Next: next}, nil, nil
}

// approvalItems reads the page approvals.list answers: its items, their
// JSON, and the cursor of the next page (0 if none follows). The backend
// is asked for one item more than the page, which says whether more
// follow without counting them; items has it, lines (the page) does not.
func approvalItems(ctx context.Context, b ReadBackend, p ApprovalsParams) (items []Approval, lines []json.RawMessage, next int64, err error) {
	switch {
	case p.Limit < 0 || p.Cursor < 0:
		return nil, nil, 0, Errorf(CodeInvalidParams, `"limit" and "cursor" must not be negative`)
	case p.Limit == 0:
		p.Limit = DefaultApprovalsPage
	case p.Limit > MaxApprovalsPage:
		p.Limit = MaxApprovalsPage
	}
	limit := p.Limit
	p.Limit++
	items, err = b.Approvals(ctx, p)
	if err != nil {
		return nil, nil, 0, err
	}
	lines = []json.RawMessage{}
	size := 0
	for i, a := range items {
		if i == limit {
			next = items[i-1].Seq
			break
		}
		line, err := json.Marshal(a)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("approvals.list: encode item %s: %w", a.ID, err)
		}
		if i > 0 && size+len(line) > maxApprovalsPageBytes {
			next = items[i-1].Seq
			break
		}
		if len(line) > maxResponseLine-4096 {
			// Cannot happen (see ApprovalsPage); were it to, the client
			// would drop the connection on this line, so say why instead.
			return nil, nil, 0, Errorf(CodeInternal, "approval item %s takes %d bytes of JSON, more than a control line may", a.ID, len(line))
		}
		size += len(line) + 1 // and a comma
		lines = append(lines, line)
	}
	return items, lines, next, nil
}

// maxAgentName bounds an agent name in a request: longer ones name no
// agent (the store clips the names it keeps to 256 bytes).
const maxAgentName = 256

func checkAgent(agent string) error {
	if len(agent) > maxAgentName {
		return Errorf(CodeInvalidParams, "agent name of %d bytes: no agent has a name that long", len(agent))
	}
	return nil
}

var typeRule = regexp.MustCompile(`^[a-z0-9_]{1,64}\*?$`)

func checkTypes(types []string) error {
	for _, t := range types {
		if !typeRule.MatchString(t) {
			return Errorf(CodeInvalidParams, "event type %q: use a kind such as approval_queued, or a prefix such as approval_*", t)
		}
	}
	return nil
}

// subscribe registers a subscription; its follower starts after the
// response is queued, so the client hears the id before any event.
func (cc *conn) subscribe(params json.RawMessage) (any, func(), error) {
	var p SubscribeParams
	if err := decode(params, &p); err != nil {
		return nil, nil, err
	}
	if err := checkTypes(p.Types); err != nil {
		return nil, nil, err
	}
	if err := checkAgent(p.Agent); err != nil {
		return nil, nil, err
	}
	var cursor, pruned int64
	if p.Since != nil {
		cursor = max(*p.Since, 0)
		var err error
		if pruned, err = prunedAfter(cc.ctx, cc.s.cfg.Backend, cursor); err != nil {
			return nil, nil, err
		}
	} else {
		seq, err := cc.s.cfg.Backend.LastEventSeq(cc.ctx)
		if err != nil {
			return nil, nil, err
		}
		cursor = seq
	}
	s := cc.s
	s.mu.Lock()
	cc.mu.Lock()
	if len(cc.subs) >= MaxSubscriptions {
		cc.mu.Unlock()
		s.mu.Unlock()
		return nil, nil, Errorf(CodeLimit, "at most %d subscriptions per connection", MaxSubscriptions)
	}
	if cc.following == 0 && s.following >= s.cfg.MaxConns-s.cfg.ReservedConns {
		cc.mu.Unlock()
		s.mu.Unlock()
		return nil, nil, Errorf(CodeLimit, "%d control connections already follow events, the most allowed (%d of %d are kept for commands): subscribe on one of them, or end one (bcpgw events --follow, bcpgw approvals)",
			s.cfg.MaxConns-s.cfg.ReservedConns, s.cfg.ReservedConns, s.cfg.MaxConns)
	}
	if cc.following == 0 {
		s.following++
	}
	cc.following++ // never idle from now until its follower returns
	cc.next++
	id := "sub-" + strconv.Itoa(cc.next)
	ctx, stop := context.WithCancel(cc.ctx)
	sub := &subscription{stop: stop, done: make(chan struct{})}
	cc.subs[id] = sub
	cc.followers.Add(1) // before the response, so the connection's end waits for the follower
	cc.mu.Unlock()
	s.mu.Unlock()
	start := func() {
		go func() {
			defer cc.followers.Done()
			defer close(sub.done)
			defer cc.unfollow()
			defer stop()
			cc.follow(ctx, id, cursor, p.Types, p.Agent)
		}()
	}
	res := SubscribeResult{Subscription: id, Cursor: cursor}
	if pruned > 0 {
		res.PrunedBefore, res.Notice = pruned, prunedNotice(pruned)
	}
	return res, start, nil
}

// unfollow counts a follower gone; the connection may become idle.
func (cc *conn) unfollow() {
	cc.s.mu.Lock()
	cc.mu.Lock()
	if cc.following--; cc.following == 0 {
		cc.s.following--
	}
	cc.lastActive = time.Now()
	cc.rearmLocked()
	cc.mu.Unlock()
	cc.s.mu.Unlock()
}

// follow sends every event after cursor, then each new one as it is
// stored, until ctx ends. It reads from the store rather than from a
// queue of its own, so a slow client falls behind without the gateway
// holding anything for it, and catches up without gaps.
func (cc *conn) follow(ctx context.Context, id string, cursor int64, types []string, agent string) {
	b := cc.s.cfg.Backend
	for {
		changed := b.EventsChanged()
		evs, err := b.Events(ctx, EventsParams{Since: cursor, Limit: 256, Types: types, Agent: agent})
		if err != nil {
			if ctx.Err() == nil {
				cc.s.log.Error("control subscription: read events", "error", err)
			}
			return
		}
		for _, e := range evs {
			if !cc.sendCtx(ctx, notification{JSONRPC: "2.0", Method: NotificationEvent, Params: EventNotification{Subscription: id, Event: e}}) {
				return
			}
			cursor = e.Seq
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// send queues one line for the writer; false once the connection is
// closing.
func (cc *conn) send(v any) bool { return cc.sendCtx(cc.ctx, v) }

// sendCtx is send that also gives up when ctx ends (a subscription's).
func (cc *conn) sendCtx(ctx context.Context, v any) bool {
	line, err := json.Marshal(v)
	if err != nil {
		cc.s.log.Error("control: encode", "error", err)
		line, _ = json.Marshal(response{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: Errorf(CodeInternal, "encode: %v", err)})
	}
	select {
	case cc.out <- append(line, '\n'):
		return true
	case <-ctx.Done():
		return false
	}
}

// writer writes queued lines until the queue closes, including the ones
// queued as the connection ends (answers to a client that closed its
// side, the error for an overlong line). A client that does not read
// within WriteTimeout is disconnected; after a failed write, and once the
// server is shutting down, the rest is discarded.
func (cc *conn) writer() {
	broken := false
	for line := range cc.out {
		if broken || cc.s.closing.Load() {
			continue
		}
		_ = cc.c.SetWriteDeadline(time.Now().Add(cc.s.cfg.WriteTimeout))
		if _, err := cc.c.Write(line); err != nil {
			cc.s.log.Debug("control connection: write", "error", err)
			broken = true
			cc.close()
		}
	}
}
