package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/netpolicy"
)

// testWait bounds every wait of these tests.
const testWait = 5 * time.Second

// fixture is a proxy serving on a socket in a temporary directory, its
// Records collected.
type fixture struct {
	tb      testing.TB
	p       *Proxy
	path    string
	records chan Record
	served  chan error
	cancel  context.CancelFunc
}

// start serves a proxy with cfg (Agent "reader" unless set), allowing
// allow. Cleanup closes it, checks that Serve returned nil, and that no
// Record was left unread: each connection yields exactly one.
func start(tb testing.TB, cfg Config, allow ...string) *fixture {
	tb.Helper()
	list, err := netpolicy.ParseList(allow)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Allow = list
	if cfg.Agent == "" {
		cfg.Agent = "reader"
	}
	f := &fixture{tb: tb, records: make(chan Record, 100), served: make(chan error, 1)}
	cfg.OnConn = func(r Record) { f.records <- r }
	f.path = filepath.Join(tb.TempDir(), "egress.sock")
	if f.p, err = Listen(f.path, cfg); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() { f.served <- f.p.Serve(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := f.p.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
		select {
		case err := <-f.served:
			if err != nil {
				tb.Errorf("Serve: %v", err)
			}
		case <-time.After(testWait):
			tb.Errorf("Serve did not return after Close")
		}
		select {
		case r := <-f.records:
			tb.Errorf("a Record no test read: %+v", r)
		default:
		}
	})
	return f
}

// dial opens a connection to the proxy's socket.
func (f *fixture) dial() net.Conn {
	f.tb.Helper()
	c, err := net.DialTimeout("unix", f.path, testWait)
	if err != nil {
		f.tb.Fatal(err)
	}
	f.tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(testWait))
	return c
}

// ask sends raw on a new connection and reads the proxy's answer.
func (f *fixture) ask(raw string) (net.Conn, *bufio.Reader, *http.Response) {
	f.tb.Helper()
	c := f.dial()
	if _, err := io.WriteString(c, raw); err != nil {
		f.tb.Fatal(err)
	}
	br := bufio.NewReader(c)
	method, _, _ := strings.Cut(raw, " ")
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		f.tb.Fatalf("answer to %q: %v", raw, err)
	}
	if resp.StatusCode != http.StatusOK {
		// A refusal: read it and leave, as a client does, rather than
		// keep the proxy waiting for the end of its lingering close.
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		c.Close()
	}
	return c, br, resp
}

// connect opens a tunnel to target and checks the proxy answered 200.
func (f *fixture) connect(target string) (net.Conn, *bufio.Reader) {
	f.tb.Helper()
	c, br, resp := f.ask(connectReq(target))
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		f.tb.Fatalf("CONNECT %s: %s %s (Proxy-Status %q)", target, resp.Status, body, resp.Header.Get("Proxy-Status"))
	}
	return c, br
}

func connectReq(target string) string {
	return fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
}

// record returns the next Record.
func (f *fixture) record() Record {
	f.tb.Helper()
	select {
	case r := <-f.records:
		return r
	case <-time.After(testWait):
		f.tb.Fatal("no Record")
	}
	return Record{}
}

// echoServer echoes on a loopback TCP port, half-closing when its client
// does, and returns the port.
func echoServer(tb testing.TB) int {
	tb.Helper()
	return tcpServer(tb, func(c *net.TCPConn) {
		io.Copy(c, c)
		c.CloseWrite()
	})
}

// tcpServer serves each connection on a loopback TCP port with serve,
// which runs on a goroutine the cleanup waits for.
func tcpServer(tb testing.TB, serve func(*net.TCPConn)) int {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// fakeResolver answers from a map; a name it lacks does not exist, and
// one whose answer is "hang" is not answered before the context ends.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]string
	asked   []string
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	answer, ok := r.answers[host]
	if slices.Equal(answer, []string{"hang"}) {
		r.mu.Unlock()
		<-ctx.Done()
		r.mu.Lock()
		return nil, ctx.Err()
	}
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range answer {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// fakeDialer records what the proxy dials and connects some addresses
// to local servers instead, so that a test can stand a loopback server
// in for a public or private address.
type fakeDialer struct {
	mu     sync.Mutex
	to     map[string]string // dialled address -> real address
	dialed []string
}

func (d *fakeDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	real, ok := d.to[addr]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dial %s: %w", addr, errors.New("connection refused by the test"))
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, real)
}

func (d *fakeDialer) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}
