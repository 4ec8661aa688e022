package egress

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/internal/netpolicy"
)

// Defaults of Config.
const (
	DefaultMaxConns         = 64
	DefaultMaxHeaderBytes   = 16 << 10
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultDialTimeout      = 10 * time.Second
	// DefaultIdleTimeout is long because a model's answer, not streamed,
	// can keep a connection silent for minutes while it is written.
	DefaultIdleTimeout = 10 * time.Minute
)

// busyAnswerers is how many connections over Config.MaxConns are read
// and answered 503 at once; connections beyond those are closed
// unanswered, so that a flood costs no more goroutines.
const busyAnswerers = 8

// Config configures a Proxy. Zero fields take their defaults.
type Config struct {
	// Agent is the agent the socket belongs to: every connection on it
	// is this agent's. Required.
	Agent string
	// Allow lists the destinations the agent may reach; empty allows
	// nothing.
	Allow []netpolicy.Destination
	// Logger receives one line per connection: Debug for the ones that
	// went through, Info for refusals and failures (default: none).
	Logger hclog.Logger
	// OnConn receives the Record of each connection when it ends, on
	// that connection's goroutine (default: none). It must not block for
	// long, and must not call Close, which waits for it.
	OnConn func(Record)
	// Dial connects to an address the proxy checked, always an IP
	// address and port, never a name (default: a net.Dialer). Tests use
	// it to stand a loopback server in for a public address.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Resolver looks up the destinations allowed by name (default
	// net.DefaultResolver).
	Resolver Resolver
	// Now is the clock of the Records (default time.Now).
	Now func() time.Time
	// MaxConns bounds the connections served at once (default
	// DefaultMaxConns).
	MaxConns int
	// MaxHeaderBytes bounds a request's head, request line included
	// (default DefaultMaxHeaderBytes); a longer one is answered 431.
	MaxHeaderBytes int
	// HandshakeTimeout bounds the wait for a request's head after the
	// connection is accepted (default DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// DialTimeout bounds the lookup and the connection to a destination
	// (default DefaultDialTimeout).
	DialTimeout time.Duration
	// IdleTimeout closes a connection that carried no byte either way
	// for this long (default DefaultIdleTimeout).
	IdleTimeout time.Duration
}

// Resolver looks up a host name's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Outcome says how a connection went.
type Outcome string

// The outcomes of a connection. They are the values of the metrics'
// outcome label: keep them few and stable.
const (
	// OutcomeOK: a tunnel was opened, or a request forwarded and
	// answered (whatever the destination's status).
	OutcomeOK Outcome = "ok"
	// OutcomeRefused: the destination is not in the list, or its name
	// leads to an address a name may not lead to (403).
	OutcomeRefused Outcome = "refused"
	// OutcomeFailed: allowed, but the destination could not be looked up
	// or reached, or its answer was unreadable (502, 504).
	OutcomeFailed Outcome = "failed"
	// OutcomeMalformed: not a proxy request this proxy serves (400, 408,
	// 431), or none at all.
	OutcomeMalformed Outcome = "malformed"
	// OutcomeBusy: over the concurrency cap, or the proxy was closing (503
	// or no answer).
	OutcomeBusy Outcome = "busy"
)

// Record is the account of one connection, reported once when it ends.
type Record struct {
	// Agent is the agent of the socket.
	Agent string
	// Method is CONNECT or the forwarded request's method; "" when no
	// request was read.
	Method string
	// Destination is host:port as the client asked for it (lower-cased);
	// "" when the request named none that could be read.
	Destination string
	// Addr is the address dialled; invalid if none was.
	Addr netip.AddrPort
	// Allowed says whether the list allowed Destination. An allowed
	// connection may still be refused by the address check or fail.
	Allowed bool
	// Outcome says how it went.
	Outcome Outcome
	// Status is what the client was answered: 200 for a tunnel, the
	// destination's status for a forwarded request, the proxy's own for
	// a refusal; 0 when nothing was answered.
	Status int
	// Reason says why the connection was refused or failed, or how an
	// opened one ended abnormally (an idle timeout, a reset); "" otherwise.
	Reason string
	// BytesUp and BytesDown count the bytes sent to and received from the
	// destination: what left the sandbox and what came in. A refused
	// connection has none.
	BytesUp, BytesDown int64
	// Started is when the connection was accepted; Duration how long it
	// lasted.
	Started  time.Time
	Duration time.Duration
}

// ErrInUse is returned by Listen when a proxy already answers on the
// socket's path.
var ErrInUse = errors.New("another egress proxy answers on this socket")

// Proxy is the egress proxy of one agent, listening on its unix socket.
type Proxy struct {
	cfg  Config
	log  hclog.Logger
	ln   *net.UnixListener
	path string
	file fs.FileInfo // the socket as bound, to remove only that

	// ctx ends when the proxy closes: it bounds lookups and dials.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed by shutdown

	mu       sync.Mutex
	closed   bool
	serving  bool
	conns    map[net.Conn]struct{} // open client and destination connections
	tunnels  int                   // connections served
	busy     int                   // connections being answered 503
	closeErr error

	shutOnce sync.Once
	// wg counts Serve's accept loop and every connection's goroutine.
	wg sync.WaitGroup
}

// Listen creates the socket at path (0600 from the start) and returns the
// proxy that will serve it; call Serve. A stale socket at path (nobody
// answers on it) is replaced; a socket that answers is ErrInUse; anything
// else at path is refused and left alone. The directory of path must be
// writable: the socket is bound in a fresh private directory there and
// renamed into place, since the process umask is process-wide and so not
// ours to change.
func Listen(path string, cfg Config) (*Proxy, error) {
	if cfg.Agent == "" {
		return nil, errors.New("egress: Config.Agent is empty: a proxy serves one named agent")
	}
	cfg = withDefaults(cfg)
	ln, fi, err := listenUnix(path)
	if err != nil {
		return nil, fmt.Errorf("egress proxy of %s: %w", cfg.Agent, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxy{
		cfg:    cfg,
		log:    cfg.Logger,
		ln:     ln,
		path:   path,
		file:   fi,
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		conns:  map[net.Conn]struct{}{},
	}, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.OnConn == nil {
		cfg.OnConn = func(Record) {}
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout}
		cfg.Dial = d.DialContext
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	return cfg
}

// Path returns the socket's path.
func (p *Proxy) Path() string { return p.path }

// Serve accepts and serves connections until ctx ends or Close is
// called, then closes every open connection and returns nil once they
// have all ended and been reported. It returns an error if accepting
// fails for good (the proxy is then closed), or if Serve was called
// before.
func (p *Proxy) Serve(ctx context.Context) error {
	p.mu.Lock()
	if p.serving {
		p.mu.Unlock()
		return errors.New("egress: Serve called twice")
	}
	p.serving = true
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.wg.Add(1) // the accept loop: Close waits for it too
	p.mu.Unlock()

	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			p.shutdown()
		case <-p.done:
		}
	}()
	err := p.accept()
	p.wg.Done()
	p.shutdown() // after a failed accept; a no-op otherwise
	p.wg.Wait()
	<-watched
	return err
}

// accept runs the accept loop until the listener is closed (nil) or
// fails for good.
func (p *Proxy) accept() error {
	var backoff time.Duration
	for {
		c, err := p.ln.AcceptUnix()
		if err != nil {
			select {
			case <-p.done:
				return nil
			default:
			}
			if !temporary(err) {
				return fmt.Errorf("egress proxy of %s: accept on %s: %w", p.cfg.Agent, p.path, err)
			}
			// Out of descriptors, most likely: wait for connections to
			// end, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("egress: accept failed; retrying", "agent", p.cfg.Agent, "error", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-p.done:
				return nil
			}
			continue
		}
		backoff = 0
		p.admit(c)
	}
}

func temporary(err error) bool {
	var ne net.Error
	return (errors.As(err, &ne) && ne.Timeout()) ||
		errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EINTR)
}

// admit starts the goroutine of a new connection: one that serves it if
// fewer than MaxConns are served, else one that answers it 503 if fewer
// than busyAnswerers do; else it is closed at once.
func (p *Proxy) admit(c *net.UnixConn) {
	started := p.cfg.Now()
	p.mu.Lock()
	var refuse string
	busy := false
	switch {
	case p.closed:
		refuse = "the proxy is closing"
	case p.tunnels < p.cfg.MaxConns:
		p.tunnels++
	case p.busy < busyAnswerers:
		p.busy++
		busy = true
	default:
		refuse = fmt.Sprintf("more than %d connections at once: closed unanswered", p.cfg.MaxConns)
	}
	if refuse == "" {
		p.conns[c] = struct{}{}
		p.wg.Add(1)
	}
	p.mu.Unlock()
	if refuse != "" {
		c.Close()
		p.report(Record{Agent: p.cfg.Agent, Outcome: OutcomeBusy, Reason: refuse, Started: started})
		return
	}
	go func() {
		defer p.wg.Done()
		h := &handler{p: p, client: c, rec: Record{Agent: p.cfg.Agent, Started: started}}
		if busy {
			h.answerBusy()
		} else {
			h.serve()
		}
		c.Close()
		p.mu.Lock()
		delete(p.conns, c)
		if busy {
			p.busy--
		} else {
			p.tunnels--
		}
		p.mu.Unlock()
		p.report(h.rec)
	}()
}

// report completes r and hands it to OnConn, and logs it.
func (p *Proxy) report(r Record) {
	r.Duration = max(0, p.cfg.Now().Sub(r.Started))
	args := []any{"agent", r.Agent, "outcome", r.Outcome}
	if r.Method != "" {
		args = append(args, "method", r.Method)
	}
	if r.Destination != "" {
		args = append(args, "destination", r.Destination)
	}
	if r.Addr.IsValid() {
		args = append(args, "addr", r.Addr.String())
	}
	if r.Status != 0 {
		args = append(args, "status", r.Status)
	}
	if r.Reason != "" {
		args = append(args, "reason", r.Reason)
	}
	args = append(args, "up", r.BytesUp, "down", r.BytesDown, "duration", r.Duration)
	if r.Outcome == OutcomeOK {
		p.log.Debug("egress connection", args...)
	} else {
		p.log.Info("egress connection", args...)
	}
	p.cfg.OnConn(r)
}

// track registers a connection for Close to close; false if the proxy
// is closed already (the caller closes c).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Close stops the proxy: the socket is closed and removed, every open
// connection is closed, and Close returns once their goroutines have
// ended and reported. Safe to call more than once and concurrently.
func (p *Proxy) Close() error {
	p.shutdown()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closeErr
}

// shutdown closes the listener and every connection without waiting.
func (p *Proxy) shutdown() {
	p.shutOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		conns := make([]net.Conn, 0, len(p.conns))
		for c := range p.conns {
			conns = append(conns, c)
		}
		p.mu.Unlock()
		close(p.done)
		p.cancel()
		err := closeUnix(p.ln, p.path, p.file)
		for _, c := range conns {
			c.Close()
		}
		p.mu.Lock()
		p.closeErr = err
		p.mu.Unlock()
	})
}
