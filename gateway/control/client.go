package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// ErrNotRunning is returned by Dial when no gateway answers on the
// socket.
var ErrNotRunning = errors.New("the gateway is not running")

// Client is a connection to the control socket. Calls may be made from
// several goroutines; responses are matched to them by id. Notifications
// arrive on Notifications.
type Client struct {
	c       net.Conn
	wmu     sync.Mutex // serializes writes
	done    chan struct{}
	closing chan struct{} // closed by Close: the reader stops waiting on notes
	once    sync.Once

	mu      sync.Mutex
	next    int
	pending map[string]chan rpcReply
	err     error // why the connection ended

	notes chan EventNotification
}

type rpcReply struct {
	Result json.RawMessage `json:"result"`
	Error  *Error          `json:"error"`
}

// maxResponseLine is the longest line a Client reads: an answer or a
// notification longer than that ends the connection (bufio.Scanner:
// token too long). The server keeps the answers to lists under it by
// paging them: an approvals.list page is cut by size (see ApprovalsPage),
// and an events.list page holds at most MaxEventsPage events, each at
// most about 40 KiB of JSON (the store clips an event's detail to 4 KiB,
// its payload to 1 KiB and its names to 256 bytes; escaping multiplies
// that by six at most): under 40 MiB.
const maxResponseLine = 64 << 20

// Dial connects to the control socket at path. If nothing listens there,
// the error wraps ErrNotRunning and says how to start the gateway.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: nothing answers on %s (start it with bcpgw run, or check --state)", ErrNotRunning, path)
		}
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("control socket %s: %w: only the user running the gateway (and root) may use it", path, fs.ErrPermission)
		}
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := trustServer(c); err != nil {
		c.Close()
		return nil, err
	}
	cl := &Client{c: c, done: make(chan struct{}), closing: make(chan struct{}), pending: map[string]chan rpcReply{}, notes: make(chan EventNotification, 256)}
	go cl.read()
	return cl, nil
}

// Close closes the connection; pending calls fail. Safe to call more than
// once.
func (cl *Client) Close() error {
	var err error
	cl.once.Do(func() {
		close(cl.closing)
		err = cl.c.Close()
	})
	<-cl.done
	return err
}

// Done is closed when the connection has ended (Err says why).
func (cl *Client) Done() <-chan struct{} { return cl.done }

// Err is why the connection ended, once Done is closed.
func (cl *Client) Err() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.err
}

// Notifications delivers subscribed events. It is closed when the
// connection ends. A client that subscribes must keep reading it: while
// it is full, responses to calls wait too.
func (cl *Client) Notifications() <-chan EventNotification { return cl.notes }

// read owns the connection's read side.
func (cl *Client) read() {
	defer close(cl.done)
	defer close(cl.notes)
	sc := bufio.NewScanner(cl.c)
	sc.Buffer(make([]byte, 0, 64*1024), maxResponseLine)
	var err error
	for sc.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			rpcReply
		}
		if err = json.Unmarshal(sc.Bytes(), &msg); err != nil {
			err = fmt.Errorf("control socket: bad line from the gateway: %w", err)
			break
		}
		if msg.Method != "" { // a notification
			var n EventNotification
			if msg.Method == NotificationEvent && json.Unmarshal(msg.Params, &n) == nil {
				select {
				case cl.notes <- n:
				case <-cl.closing:
				}
			}
			continue
		}
		if string(msg.ID) == "null" && msg.Error != nil {
			err = msg.Error // the gateway refused the connection
			break
		}
		cl.mu.Lock()
		ch, ok := cl.pending[string(msg.ID)]
		delete(cl.pending, string(msg.ID))
		cl.mu.Unlock()
		if ok {
			ch <- msg.rpcReply
		}
	}
	if err == nil {
		err = sc.Err()
	}
	if err == nil {
		err = errors.New("control socket: the gateway closed the connection")
	}
	cl.mu.Lock()
	cl.err = err
	for id, ch := range cl.pending {
		close(ch)
		delete(cl.pending, id)
	}
	cl.mu.Unlock()
}

// Call sends a request and decodes its result into result (which may be
// nil). An error from the gateway is an *Error.
func (cl *Client) Call(ctx context.Context, method string, params, result any) error {
	cl.mu.Lock()
	if cl.err != nil {
		err := cl.err
		cl.mu.Unlock()
		return err
	}
	cl.next++
	n := cl.next
	id := strconv.Itoa(n)
	ch := make(chan rpcReply, 1)
	cl.pending[id] = ch
	cl.mu.Unlock()
	line, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int    `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", n, method, params})
	if err != nil {
		cl.forget(id)
		return fmt.Errorf("%s: %w", method, err)
	}
	cl.wmu.Lock()
	_, err = cl.c.Write(append(line, '\n'))
	cl.wmu.Unlock()
	if err != nil {
		cl.forget(id)
		// The gateway may have refused the connection before reading
		// (permission, too many connections): its reason beats EPIPE.
		select {
		case <-cl.done:
			var e *Error
			if errors.As(cl.Err(), &e) {
				return e
			}
		case <-ctx.Done():
		}
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return cl.Err()
		}
		if r.Error != nil {
			return r.Error
		}
		if result == nil {
			return nil
		}
		if err := json.Unmarshal(r.Result, result); err != nil {
			return fmt.Errorf("%s: decode result: %w", method, err)
		}
		return nil
	case <-ctx.Done():
		cl.forget(id)
		return ctx.Err()
	}
}

func (cl *Client) forget(id string) {
	cl.mu.Lock()
	delete(cl.pending, id)
	cl.mu.Unlock()
}

// trustServer checks who serves the socket: this user, or root. A socket
// another user planted would otherwise show a fake approval queue.
func trustServer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	p, err := peerCred(uc)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	// The rule the server applies to clients, except that root may talk
	// to any user's gateway.
	if self := os.Getuid(); self != 0 && Authorize(p, self) != nil {
		return fmt.Errorf("control socket %s is served by uid %d, not by this user (uid %d) or root: refusing to talk to it", uc.RemoteAddr(), p.UID, self)
	}
	return nil
}
