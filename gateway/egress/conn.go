package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bcpgw/bcpgw/internal/netpolicy"
)

// handler serves one client connection and fills its Record.
type handler struct {
	p      *Proxy
	client *net.UnixConn
	rec    Record
	lr     *io.LimitedReader // under br: bounds the head
	br     *bufio.Reader     // the client's bytes, the head's and after
}

// serve reads the request, checks it, and opens the tunnel or forwards
// the request.
func (h *handler) serve() {
	req := h.readRequest(h.p.cfg.HandshakeTimeout)
	if req == nil {
		return
	}
	t, r := h.target(req)
	if r != nil {
		h.refuse(r)
		return
	}
	h.rec.Destination = t.String()
	if _, ok := netpolicy.Allows(h.p.cfg.Allow, t.host, t.port); !ok {
		h.refuse(&refusal{403, "http_request_denied", OutcomeRefused,
			fmt.Sprintf("%s is not in the network list of agent %s", t, h.p.cfg.Agent)})
		return
	}
	h.rec.Allowed = true
	// DialTimeout bounds the lookup and the connection together; Close
	// cuts both short.
	ctx, cancel := context.WithTimeout(h.p.ctx, h.p.cfg.DialTimeout)
	defer cancel()
	addrs, r := h.p.addresses(ctx, t)
	if r != nil {
		h.refuse(r)
		return
	}
	raw, addr, r := h.p.dial(ctx, addrs, t.port)
	h.rec.Addr = addr
	if r != nil {
		h.refuse(r)
		return
	}
	if !h.p.track(raw) {
		raw.Close()
		h.refuse(&refusal{503, "proxy_internal_error", OutcomeBusy, "the proxy is closing"})
		return
	}
	defer func() {
		raw.Close()
		h.p.untrack(raw)
	}()
	act := &activity{idle: h.p.cfg.IdleTimeout}
	act.touch()
	client := &idleConn{Conn: h.client, act: act}
	dest := &idleConn{Conn: raw, act: act}
	h.lr.R = client // the head is read: the rest of the client's bytes are timed as idle
	defer func() {
		h.rec.BytesUp, h.rec.BytesDown = dest.written.Load(), dest.read.Load()
	}()
	if req.Method == http.MethodConnect {
		h.tunnel(client, dest)
	} else {
		h.forward(req, client, dest)
	}
}

// answerBusy reads the request of a connection over the cap, so that
// the answer is not lost to a reset, and answers 503.
func (h *handler) answerBusy() {
	if req := h.readRequest(min(h.p.cfg.HandshakeTimeout, 2*time.Second)); req != nil {
		if t, r := h.target(req); r == nil {
			h.rec.Destination = t.String()
		}
		h.refuse(&refusal{503, "connection_limit_reached", OutcomeBusy,
			fmt.Sprintf("agent %s has %d connections open, the most allowed at once: close some, or retry later", h.p.cfg.Agent, h.p.cfg.MaxConns)})
	}
}

// readRequest reads a request's head within timeout and at most
// MaxHeaderBytes. On failure the client is answered (if it is still
// there), the Record says why, and the result is nil.
func (h *handler) readRequest(timeout time.Duration) *http.Request {
	limit := int64(h.p.cfg.MaxHeaderBytes)
	h.lr = &io.LimitedReader{R: h.client, N: limit}
	h.br = bufio.NewReaderSize(h.lr, 4096)
	h.client.SetReadDeadline(time.Now().Add(timeout))
	req, err := http.ReadRequest(h.br)
	h.client.SetReadDeadline(time.Time{})
	consumed, full := limit-h.lr.N, h.lr.N == 0
	h.lr.N = math.MaxInt64 // the body or the tunnel's bytes follow
	closing := false
	select {
	case <-h.p.done:
		closing = true
	default:
	}
	switch {
	case err == nil:
		h.rec.Method = req.Method
		return req
	case closing:
		h.rec.Outcome, h.rec.Reason = OutcomeBusy, "the proxy closed"
	case consumed == 0 && !isTimeout(err):
		h.rec.Outcome, h.rec.Reason = OutcomeMalformed, "closed before sending a request"
	case full:
		h.refuse(&refusal{431, "http_request_error", OutcomeMalformed, fmt.Sprintf("request head larger than %d bytes", limit)})
	case isTimeout(err):
		h.refuse(&refusal{408, "http_request_error", OutcomeMalformed, fmt.Sprintf("no complete request within %s", timeout)})
	default:
		h.refuse(&refusal{400, "http_request_error", OutcomeMalformed, "malformed request: " + clip(err.Error())})
	}
	return nil
}

// target returns the destination req asks for: the authority of a
// CONNECT, or the host of an absolute http:// URL.
func (h *handler) target(req *http.Request) (target, *refusal) {
	bad := func(format string, args ...any) (target, *refusal) {
		return target{}, &refusal{400, "http_request_error", OutcomeMalformed, fmt.Sprintf(format, args...)}
	}
	var t target
	var err error
	switch {
	case req.Method == http.MethodConnect:
		if strings.HasPrefix(req.RequestURI, "/") {
			return bad("CONNECT needs host:port, not %q", clip(req.RequestURI))
		}
		t, err = parseTarget(req.RequestURI, 0)
	case !req.URL.IsAbs():
		return bad("%s %s is not a proxy request: write the URL in absolute form (%s http://host/path), or use CONNECT host:port", req.Method, clip(req.RequestURI), req.Method)
	case req.URL.Scheme != "http":
		return bad("%s:// URLs are not forwarded: use CONNECT host:port (an https client does)", clip(req.URL.Scheme))
	default:
		t, err = parseTarget(req.URL.Host, 80)
	}
	if err != nil {
		return bad("destination %v", err)
	}
	return t, nil
}

// refuse answers the client with r and puts it in the Record.
func (h *handler) refuse(r *refusal) {
	h.rec.Outcome, h.rec.Status, h.rec.Reason = r.outcome, r.status, r.reason
	body := "bcpgw egress: " + printable(r.reason) + "\n"
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", r.status, http.StatusText(r.status))
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	b.WriteString("Connection: close\r\n")
	fmt.Fprintf(&b, "Proxy-Status: bcpgw; error=%s; details=\"%s\"\r\n\r\n", r.errType,
		strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(printable(r.reason)))
	b.WriteString(body)
	h.client.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(h.client, b.String()); err != nil {
		return
	}
	// Close gently: a client whose unread bytes (a body, a TLS hello sent
	// early) meet a close may get a reset that loses the answer. Stop
	// sending, then read a little for a moment.
	h.client.CloseWrite()
	h.client.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.CopyN(io.Discard, h.client, 256<<10)
}

// printable keeps the printable ASCII of s (a reason may quote what a
// client wrote), which is all a header may hold.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

// tunnel answers 200 and copies both ways until both ends are done, an
// error, the idle timeout, or Close.
func (h *handler) tunnel(client, dest *idleConn) {
	h.rec.Outcome, h.rec.Status = OutcomeOK, http.StatusOK
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		h.rec.Reason = "client gone: " + err.Error()
		return
	}
	// Up: what the client sent after its head, already buffered or not.
	upErr := make(chan error, 1)
	go func() {
		err := copyBytes(dest, h.br)
		if err == nil {
			dest.CloseWrite() // pass the client's end of data on
		} else {
			dest.Close()
			client.Close()
		}
		upErr <- err
	}()
	downErr := copyBytes(client, dest)
	if downErr == nil {
		client.CloseWrite()
	} else {
		dest.Close()
		client.Close()
	}
	h.rec.Reason = h.endReason(downErr, <-upErr)
}

// forward sends the request to the destination and its answer back.
func (h *handler) forward(req *http.Request, client, dest *idleConn) {
	removeHopByHop(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // Write would add Go's own
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// Answered here, so that the client sends its body now.
		req.Header.Del("Expect")
		if _, err := io.WriteString(client, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			h.refuse(&refusal{400, "http_request_error", OutcomeMalformed, "client gone: " + err.Error()})
			return
		}
	}
	req.Close = true // one request per connection, both sides
	if err := req.Write(dest); err != nil {
		h.refuse(&refusal{502, "http_request_error", OutcomeFailed, fmt.Sprintf("send the request to %s: %v", h.rec.Destination, err)})
		return
	}
	dlr := &io.LimitedReader{R: dest, N: maxResponseHead}
	dbr := bufio.NewReaderSize(dlr, 4096)
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(dbr, req)
		if err != nil {
			errType := "http_protocol_error"
			switch {
			case dlr.N == 0:
				errType = "http_response_header_section_size"
			case isTimeout(err):
				errType = "http_response_timeout"
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				errType = "http_response_incomplete"
			}
			h.refuse(&refusal{502, errType, OutcomeFailed, fmt.Sprintf("no answer from %s: %v", h.rec.Destination, err)})
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			h.refuse(&refusal{502, "http_upgrade_failed", OutcomeFailed, fmt.Sprintf("%s switched protocols, which the proxy does not forward", h.rec.Destination)})
			return
		}
		if resp.StatusCode >= 200 {
			break
		}
		// An interim answer (103 Early Hints): passed on as it is.
		var b strings.Builder
		fmt.Fprintf(&b, "HTTP/1.1 %s\r\n", resp.Status)
		removeHopByHop(resp.Header)
		resp.Header.Write(&b)
		b.WriteString("\r\n")
		if _, err := io.WriteString(client, b.String()); err != nil {
			h.rec.Outcome, h.rec.Reason = OutcomeOK, "client gone: "+err.Error()
			return
		}
	}
	dlr.N = math.MaxInt64
	defer resp.Body.Close()
	removeHopByHop(resp.Header)
	resp.Close = true
	h.rec.Outcome, h.rec.Status = OutcomeOK, resp.StatusCode
	if err := resp.Write(client); err != nil {
		h.rec.Reason = h.endReason(err)
	}
}

// maxResponseHead bounds the head of a destination's answer.
const maxResponseHead = 1 << 20

// hopByHop are the headers of one connection, not of the message (RFC
// 9110 section 7.6.1, and Proxy-Connection, Keep-Alive of old clients).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopByHop drops the hop-by-hop headers, those the Connection
// header names, and every Proxy-* header: credentials or instructions
// meant for the proxy must not reach the destination.
func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
	for k := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "Proxy-") {
			delete(h, k)
		}
	}
}

// endReason says how an opened connection ended, from the errors of its
// directions: "" for a clean end, else the first error that is not the
// closing of one side by the other.
func (h *handler) endReason(errs ...error) string {
	select {
	case <-h.p.done:
		return "the proxy closed"
	default:
	}
	for _, err := range errs {
		var idle *idleError
		switch {
		case err == nil, errors.Is(err, net.ErrClosed):
		case errors.As(err, &idle):
			return idle.Error()
		default:
			return err.Error()
		}
	}
	return ""
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBytes copies src to dst until src ends (nil) or an error.
func copyBytes(dst io.Writer, src io.Reader) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	// Hide src's WriteTo (a bufio.Reader's would copy through its small
	// buffer) and dst's ReadFrom: the copy goes through the idle checks.
	_, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
	return err
}

// activity is the last time a connection carried a byte either way.
type activity struct {
	idle time.Duration
	last atomic.Int64 // Unix nanoseconds
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

func (a *activity) idleFor() time.Duration { return time.Since(time.Unix(0, a.last.Load())) }

// idleError ends a connection that carried no byte either way for the
// idle timeout.
type idleError struct{ d time.Duration }

func (e *idleError) Error() string   { return fmt.Sprintf("idle: no byte either way for %s", e.d) }
func (e *idleError) Timeout() bool   { return true }
func (e *idleError) Temporary() bool { return false }

// idleConn times out when both directions of a connection are idle, not
// one: a client that waits minutes for a model's answer sends nothing
// meanwhile, and that is not idle. It also counts bytes.
type idleConn struct {
	net.Conn
	act           *activity
	read, written atomic.Int64
}

func (c *idleConn) Read(b []byte) (int, error) {
	for {
		c.Conn.SetReadDeadline(time.Now().Add(c.act.idle))
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.read.Add(int64(n))
			c.act.touch()
		}
		if n == 0 && err != nil && isTimeout(err) {
			if c.act.idleFor() < c.act.idle {
				continue // the other direction was busy
			}
			return 0, &idleError{c.act.idle}
		}
		return n, err
	}
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.act.idle))
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.written.Add(int64(n))
		c.act.touch()
	}
	if err != nil && isTimeout(err) {
		err = &idleError{c.act.idle}
	}
	return n, err
}

// CloseWrite half-closes, when the connection can.
func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
