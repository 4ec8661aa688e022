package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/netpolicy"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// A CONNECT to a listed destination is a tunnel both ways, bytes sent
// before the proxy's answer included, and its Record counts the bytes
// each way.
func TestConnectTunnel(t *testing.T) {
	port := echoServer(t)
	dest := "127.0.0.1:" + strconv.Itoa(port)
	f := start(t, Config{}, dest)

	// Early data: the first payload rides with the CONNECT, as a client
	// that sends its TLS hello at once does.
	c := f.dial()
	payload := strings.Repeat("ping ", 1000)
	if _, err := io.WriteString(c, connectReq(dest)+payload); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	more := strings.Repeat("x", 100_000)
	go io.WriteString(c, more)
	want := payload + more
	got := make([]byte, len(want))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
		t.Fatalf("echo: %d bytes, %v", len(got), err)
	}
	c.(*net.UnixConn).CloseWrite()
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after half-close: %q, %v (want EOF)", rest, err)
	}

	r := f.record()
	if r.Agent != "reader" || r.Method != "CONNECT" || r.Destination != dest || !r.Allowed || r.Outcome != OutcomeOK ||
		r.Status != 200 || r.Reason != "" || r.Addr != netip.MustParseAddrPort(dest) {
		t.Errorf("record %+v", r)
	}
	if n := int64(len(want)); r.BytesUp != n || r.BytesDown != n {
		t.Errorf("bytes up %d, down %d; want %d each", r.BytesUp, r.BytesDown, n)
	}
	if r.Started.IsZero() || r.Duration <= 0 {
		t.Errorf("started %v, duration %v", r.Started, r.Duration)
	}
}

// What is not listed is refused before anything is looked up or dialled,
// with 403 and the reason in a Proxy-Status header and the body.
func TestRefusedDestinations(t *testing.T) {
	port := echoServer(t)
	res := &fakeResolver{answers: map[string][]string{"api.openai.com": {"192.0.2.1"}}}
	dialer := &fakeDialer{}
	f := start(t, Config{Resolver: res, Dial: dialer.Dial}, fmt.Sprintf("127.0.0.1:%d", port), "*.example.org:443")
	tests := []struct{ name, target string }{
		{"unlisted name", "api.openai.com:443"},
		{"port mismatch", fmt.Sprintf("127.0.0.1:%d", port+1)},
		{"wildcard on another port", "www.example.org:80"},
		{"wildcard apex", "example.org:443"},
		{"address not listed", "10.0.0.1:443"},
		{"name of a listed address", fmt.Sprintf("localhost:%d", port)},
	}
	for _, tt := range tests {
		_, _, resp := f.ask(connectReq(tt.target))
		body, _ := io.ReadAll(resp.Body)
		ps := resp.Header.Get("Proxy-Status")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(ps, "error=http_request_denied") ||
			!strings.Contains(ps, "is not in the network list of agent reader") || !strings.Contains(string(body), "is not in the network list") {
			t.Errorf("%s: %s, Proxy-Status %q, body %q", tt.name, resp.Status, ps, body)
		}
		r := f.record()
		if r.Outcome != OutcomeRefused || r.Allowed || r.Status != 403 || r.Destination != tt.target || r.BytesUp != 0 || r.Addr.IsValid() {
			t.Errorf("%s: record %+v", tt.name, r)
		}
	}
	if len(res.asked) != 0 || len(dialer.calls()) != 0 {
		t.Errorf("looked up %v, dialled %v: a refused destination must not be", res.asked, dialer.calls())
	}
}

// A wildcard entry admits the names below it; the name is looked up by
// the proxy and the address it checked is what it dials.
func TestWildcardDialsTheCheckedAddress(t *testing.T) {
	port := echoServer(t)
	res := &fakeResolver{answers: map[string][]string{
		"api.example.org":      {"2001:db8::1", "192.0.2.10"},
		"internal.example.org": {"10.1.2.3"}, // private: allowed by name
	}}
	real := fmt.Sprintf("127.0.0.1:%d", port)
	dialer := &fakeDialer{to: map[string]string{"192.0.2.10:443": real, "10.1.2.3:443": real}}
	f := start(t, Config{Resolver: res, Dial: dialer.Dial}, "*.example.org:443")
	for _, name := range []string{"API.example.org.", "internal.example.org"} {
		c, br := f.connect(name + ":443")
		io.WriteString(c, "hello")
		got := make([]byte, 5)
		if _, err := io.ReadFull(br, got); err != nil || string(got) != "hello" {
			t.Fatalf("%s: %q %v", name, got, err)
		}
		c.Close()
		r := f.record()
		if r.Outcome != OutcomeOK || r.Destination != strings.ToLower(strings.TrimSuffix(name, "."))+":443" || r.BytesUp != 5 || r.BytesDown != 5 {
			t.Errorf("%s: record %+v", name, r)
		}
	}
	// IPv4 first; the name is never dialled.
	if got, want := dialer.calls(), []string{"192.0.2.10:443", "10.1.2.3:443"}; !slices.Equal(got, want) {
		t.Errorf("dialled %v, want %v", got, want)
	}
}

// A name may not lead to the gateway's host, link-local addresses (the
// metadata service) or multicast, even when the list allows the name.
func TestNameResolvingToForbiddenAddressIsRefused(t *testing.T) {
	res := &fakeResolver{answers: map[string][]string{
		"loop.example.org":   {"127.0.0.1"},
		"loop6.example.org":  {"::1"},
		"mapped.example.org": {"::ffff:127.0.0.2"},
		"meta.example.org":   {"169.254.169.254"},
		"ll6.example.org":    {"fe80::1"},
		"zero.example.org":   {"0.0.0.0"},
		"mcast.example.org":  {"239.1.2.3"},
		"bcast.example.org":  {"255.255.255.255"},
		"nat64.example.org":  {"64:ff9b::a9fe:a9fe"},
		"mixed.example.org":  {"192.0.2.1", "127.0.0.1"},
		"nat64l.example.org": {"64:ff9b:1::a00:1"},
	}}
	// An address of this host's own (non-loopback) interfaces, if any:
	// services listening on 0.0.0.0 answer there.
	own := ""
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, ia := range addrs {
			if n, ok := ia.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				own = n.IP.String()
				res.answers["own.example.org"] = []string{own}
				break
			}
		}
	}
	dialer := &fakeDialer{}
	f := start(t, Config{Resolver: res, Dial: dialer.Dial}, "*.example.org")
	tests := []struct{ name, why string }{
		{"loop", "127.0.0.1 (loopback)"},
		{"loop6", "::1 (loopback)"},
		{"mapped", "127.0.0.2 (loopback)"},
		{"meta", "169.254.169.254 (link-local, cloud metadata)"},
		{"ll6", "fe80::1 (link-local)"},
		{"zero", "unspecified"},
		{"mcast", "multicast"},
		{"bcast", "broadcast"},
		{"nat64", "NAT64 of link-local"},
		{"mixed", "127.0.0.1 (loopback)"},
		{"nat64l", "local-use NAT64"},
	}
	if own != "" {
		tests = append(tests, struct{ name, why string }{"own", own + " (an address of the gateway's own host)"})
	} else {
		t.Log("no non-loopback interface address on this host: the own-address case is not tried")
	}
	for _, tt := range tests {
		target := tt.name + ".example.org:443"
		_, _, resp := f.ask(connectReq(target))
		ps := resp.Header.Get("Proxy-Status")
		if resp.StatusCode != 403 || !strings.Contains(ps, "error=destination_ip_prohibited") || !strings.Contains(ps, tt.why) {
			t.Errorf("%s: %s, Proxy-Status %q", tt.name, resp.Status, ps)
		}
		r := f.record()
		if r.Outcome != OutcomeRefused || !r.Allowed || !strings.Contains(r.Reason, "a name may not lead there") {
			t.Errorf("%s: record %+v", tt.name, r)
		}
	}
	if calls := dialer.calls(); len(calls) != 0 {
		t.Errorf("dialled %v", calls)
	}
}

// localhost means loopback and is not looked up; an IP entry reaches
// loopback too.
func TestLocalhostIsNotLookedUp(t *testing.T) {
	port := echoServer(t)
	res := &fakeResolver{answers: map[string][]string{"localhost": {"192.0.2.66"}}}
	f := start(t, Config{Resolver: res}, fmt.Sprintf("localhost:%d", port))
	c, _ := f.connect(fmt.Sprintf("localhost:%d", port))
	c.Close()
	r := f.record()
	if r.Outcome != OutcomeOK || r.Addr != netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)) {
		t.Errorf("record %+v", r)
	}
	if len(res.asked) != 0 {
		t.Errorf("looked up %v", res.asked)
	}
}

// Failures after the list allowed the destination: 502 (504 for a
// timeout), with the error type.
func TestUnreachableDestination(t *testing.T) {
	// A port nobody listens on: bind one, then close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	res := &fakeResolver{answers: map[string][]string{}}
	f := start(t, Config{Resolver: res}, closed, "nowhere.example.org")
	tests := []struct {
		target  string
		status  int
		errType string
	}{
		{closed, 502, "connection_refused"},
		{"nowhere.example.org:443", 502, "dns_error"},
	}
	for _, tt := range tests {
		_, _, resp := f.ask(connectReq(tt.target))
		ps := resp.Header.Get("Proxy-Status")
		if resp.StatusCode != tt.status || !strings.Contains(ps, "error="+tt.errType) {
			t.Errorf("%s: %s, Proxy-Status %q", tt.target, resp.Status, ps)
		}
		if r := f.record(); r.Outcome != OutcomeFailed || !r.Allowed || r.Status != tt.status {
			t.Errorf("%s: record %+v", tt.target, r)
		}
	}
}

// DialTimeout bounds the lookup and the connection: 504.
func TestDialTimeouts(t *testing.T) {
	res := &fakeResolver{answers: map[string][]string{"slow-dns.example.org": {"hang"}, "blackhole.example.org": {"192.0.2.1"}}}
	hang := func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f := start(t, Config{Resolver: res, Dial: hang, DialTimeout: 50 * time.Millisecond}, "*.example.org")
	for target, errType := range map[string]string{"slow-dns.example.org:443": "dns_timeout", "blackhole.example.org:443": "connection_timeout"} {
		_, _, resp := f.ask(connectReq(target))
		if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(resp.Header.Get("Proxy-Status"), "error="+errType) {
			t.Errorf("%s: %s, Proxy-Status %q", target, resp.Status, resp.Header.Get("Proxy-Status"))
		}
		if r := f.record(); r.Outcome != OutcomeFailed || r.Status != 504 {
			t.Errorf("%s: record %+v", target, r)
		}
	}
}

// Requests the proxy does not serve are answered 400 (431 for an
// oversized head) and recorded as malformed.
func TestMalformedRequests(t *testing.T) {
	f := start(t, Config{MaxHeaderBytes: 1024}, "127.0.0.1")
	tests := []struct {
		name, raw string
		status    int
		reason    string // in the Record
	}{
		{"no port", "CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n", 400, "not host:port"},
		{"port 0", "CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n", 400, "not a number from 1 to 65535"},
		{"port too large", "CONNECT 127.0.0.1:99999 HTTP/1.1\r\n\r\n", 400, "not a number from 1 to 65535"},
		{"path", "CONNECT /x HTTP/1.1\r\n\r\n", 400, "CONNECT needs host:port"},
		{"origin form", "GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, "is not a proxy request"},
		{"https in absolute form", "GET https://127.0.0.1/ HTTP/1.1\r\n\r\n", 400, "https:// URLs are not forwarded"},
		{"ftp", "GET ftp://127.0.0.1/ HTTP/1.1\r\n\r\n", 400, "ftp:// URLs are not forwarded"},
		{"numeric name", "CONNECT 127.1:80 HTTP/1.1\r\n\r\n", 400, "the last label is a number"},
		{"zone", "CONNECT [fe80::1%25eth0]:80 HTTP/1.1\r\n\r\n", 400, "zone"},
		{"bad name", "CONNECT bad_host!.org:443 HTTP/1.1\r\n\r\n", 400, "not a host name"},
		{"not HTTP", "hello\r\n\r\n", 400, "malformed request"},
		{"huge head", "CONNECT 127.0.0.1:80 HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 2000) + "\r\n\r\n", 431, "larger than 1024 bytes"},
	}
	for _, tt := range tests {
		_, _, resp := f.ask(tt.raw)
		if resp.StatusCode != tt.status || !strings.Contains(resp.Header.Get("Proxy-Status"), "error=http_request_error") {
			t.Errorf("%s: %s, Proxy-Status %q", tt.name, resp.Status, resp.Header.Get("Proxy-Status"))
		}
		if r := f.record(); r.Outcome != OutcomeMalformed || r.Allowed || r.Status != tt.status || !strings.Contains(r.Reason, tt.reason) {
			t.Errorf("%s: record %+v, want reason %q", tt.name, r, tt.reason)
		}
	}
	// A client that leaves without a word is recorded too.
	f.dial().Close()
	if r := f.record(); r.Outcome != OutcomeMalformed || r.Status != 0 || r.Reason != "closed before sending a request" {
		t.Errorf("silent client: record %+v", r)
	}
}

// A client that does not finish its head in time is answered 408.
func TestHandshakeTimeout(t *testing.T) {
	f := start(t, Config{HandshakeTimeout: 100 * time.Millisecond}, "127.0.0.1")
	c := f.dial()
	io.WriteString(c, "CONNECT 127.0.0.1:80 HTTP/1.1\r\n") // and no more
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("%v %v", resp, err)
	}
	c.Close()
	if r := f.record(); r.Outcome != OutcomeMalformed || r.Status != 408 {
		t.Errorf("record %+v", r)
	}
}

// A plain-HTTP request in absolute form is forwarded in origin form,
// without hop-by-hop and Proxy-* headers, and its answer passed back
// with Connection: close.
func TestPlainHTTPForwarding(t *testing.T) {
	type seen struct {
		uri, host string
		header    http.Header
		body      string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.RequestURI, r.Host, r.Header.Clone(), string(body)}
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Answer", "42")
		fmt.Fprint(w, "the answer")
	}))
	defer srv.Close()
	host := srv.Listener.Addr().String()
	f := start(t, Config{}, host)

	c, br, resp := f.ask("POST http://" + host + "/v1/chat?x=1 HTTP/1.1\r\n" +
		"Host: ignored.example\r\n" +
		"Proxy-Authorization: Basic c2VjcmV0\r\n" +
		"Proxy-Anything: x\r\n" +
		"Proxy-Connection: keep-alive\r\n" +
		"Connection: keep-alive, X-Hop\r\n" +
		"X-Hop: 1\r\n" +
		"X-Keep: 2\r\n" +
		"Content-Length: 5\r\n" +
		"\r\nhello")
	defer c.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "the answer" || resp.Header.Get("X-Answer") != "42" ||
		!resp.Close || resp.Header.Get("Keep-Alive") != "" {
		t.Errorf("answer %s %q, header %v, close %v", resp.Status, body, resp.Header, resp.Close)
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("bytes after the answer: %q", rest)
	}
	s := <-got
	if s.uri != "/v1/chat?x=1" || s.host != host || s.body != "hello" || s.header.Get("X-Keep") != "2" {
		t.Errorf("destination saw %+v", s)
	}
	for _, h := range []string{"Proxy-Authorization", "Proxy-Anything", "Proxy-Connection", "X-Hop", "User-Agent"} {
		if v, ok := s.header[h]; ok {
			t.Errorf("destination saw %s: %q", h, v)
		}
	}
	r := f.record()
	if r.Method != "POST" || r.Destination != host || r.Outcome != OutcomeOK || r.Status != 200 || r.BytesUp == 0 || r.BytesDown == 0 {
		t.Errorf("record %+v", r)
	}
}

// Go's HTTP client works through the proxy both ways (a plain request
// and a tunnel), and sees a refusal as the proxy's.
func TestHTTPClientThroughProxy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hi %s", r.Method)
	}))
	defer srv.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "secure")
	}))
	defer tls.Close()
	f := start(t, Config{}, srv.Listener.Addr().String(), tls.Listener.Addr().String())
	transport := tls.Client().Transport.(*http.Transport).Clone()
	transport.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid"})
	transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", f.path)
	}
	// ProxyURL's proxy applies to loopback too.
	client := &http.Client{Transport: transport, Timeout: testWait}
	defer transport.CloseIdleConnections()

	for _, u := range []string{srv.URL + "/a", tls.URL + "/b"} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || (string(body) != "hi GET" && string(body) != "secure") {
			t.Errorf("%s: %s %q", u, resp.Status, body)
		}
	}
	transport.CloseIdleConnections()
	for range 2 {
		if r := f.record(); r.Outcome != OutcomeOK {
			t.Errorf("record %+v", r)
		}
	}

	resp, err := client.Get("http://127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.HasPrefix(resp.Header.Get("Proxy-Status"), "bcpgw; error=http_request_denied") {
		t.Errorf("refused plain request: %s, Proxy-Status %q", resp.Status, resp.Header.Get("Proxy-Status"))
	}
	f.record()
	if _, err := client.Get("https://127.0.0.1:1/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("refused tunnel: %v", err)
	}
	f.record()
}

// At most MaxConns connections are served; the next is answered 503
// until one ends; beyond a few such answers, connections are closed
// unanswered.
func TestConcurrencyCap(t *testing.T) {
	port := echoServer(t)
	dest := fmt.Sprintf("127.0.0.1:%d", port)
	f := start(t, Config{MaxConns: 2, HandshakeTimeout: testWait}, dest)
	first, _ := f.connect(dest)
	f.connect(dest)

	_, _, resp := f.ask(connectReq(dest))
	if resp.StatusCode != 503 || !strings.Contains(resp.Header.Get("Proxy-Status"), "error=connection_limit_reached") {
		t.Errorf("third: %s, Proxy-Status %q", resp.Status, resp.Header.Get("Proxy-Status"))
	}
	if r := f.record(); r.Outcome != OutcomeBusy || r.Status != 503 || r.Destination != dest || !strings.Contains(r.Reason, "2 connections open") {
		t.Errorf("third: record %+v", r)
	}

	first.Close()
	if r := f.record(); r.Outcome != OutcomeOK {
		t.Errorf("first: record %+v", r)
	}
	f.connect(dest) // a slot is free again

	// The busy answerers, all waiting for heads that do not come; one
	// more is closed at once.
	for range busyAnswerers {
		f.dial()
	}
	if !testproc.CheckFor(testWait, 5*time.Millisecond, func() bool {
		f.p.mu.Lock()
		defer f.p.mu.Unlock()
		return f.p.busy == busyAnswerers
	}) {
		t.Fatal("the busy answerers did not start")
	}
	c := f.dial()
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("over every bound: read %d, %v; want EOF", n, err)
	}
	if r := f.record(); r.Outcome != OutcomeBusy || r.Status != 0 || !strings.Contains(r.Reason, "closed unanswered") {
		t.Errorf("over every bound: record %+v", r)
	}
	f.p.Close()
	for range 2 + busyAnswerers {
		f.record()
	}
}

// A tunnel that carries nothing either way for IdleTimeout is closed; one
// direction alone keeps it open (a client waiting for a slow answer).
func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	drip := tcpServer(t, func(c *net.TCPConn) {
		for range 8 { // a byte every 100ms, 800ms in all
			if _, err := c.Write([]byte{'.'}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		io.Copy(io.Discard, c) // then silence until the proxy gives up
	})
	dest := fmt.Sprintf("127.0.0.1:%d", drip)
	f := start(t, Config{IdleTimeout: idle}, dest)
	c, br := f.connect(dest)
	began := time.Now()
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "........" {
		t.Fatalf("read %q, %v", got, err)
	}
	if d := time.Since(began); d < 700*time.Millisecond+idle {
		t.Errorf("closed after %s: the dripping server should have kept it open", d)
	}
	c.Close()
	if r := f.record(); r.Outcome != OutcomeOK || !strings.Contains(r.Reason, "idle") || r.BytesDown != 8 {
		t.Errorf("record %+v", r)
	}
}

// Close during open tunnels closes them and returns once every
// connection has been reported; no goroutine is left.
func TestCloseWithOpenTunnels(t *testing.T) {
	port := echoServer(t)
	dest := fmt.Sprintf("127.0.0.1:%d", port)
	before := runtime.NumGoroutine()
	path := filepath.Join(t.TempDir(), "e.sock")
	records := make(chan Record, 10)
	list, _ := netpolicy.ParseList([]string{dest})
	p, err := Listen(path, Config{Agent: "a", Allow: list, OnConn: func(r Record) { records <- r }})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(context.Background()) }()
	f := &fixture{tb: t, p: p, path: path, records: records}
	var clients []net.Conn
	for range 3 {
		c, _ := f.connect(dest)
		clients = append(clients, c)
	}
	f.dial() // and one that never speaks
	// A connection still in the listen backlog at Close is never
	// accepted, and so never reported: wait until this one is.
	if !testproc.CheckFor(testWait, 5*time.Millisecond, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.conns) == 3*2+1 // clients and destinations, and the silent one
	}) {
		t.Fatal("the connections were not all accepted")
	}

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(testWait):
		t.Fatal("Close did not return")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if len(records) != 4 {
		t.Fatalf("%d records when Close returned, want 4", len(records))
	}
	outcomes := map[Outcome]int{}
	for range 4 {
		r := <-records
		outcomes[r.Outcome]++
		if r.Reason != "the proxy closed" {
			t.Errorf("record %+v", r)
		}
	}
	// The tunnels, and the silent client.
	if outcomes[OutcomeOK] != 3 || outcomes[OutcomeBusy] != 1 {
		t.Errorf("outcomes %v", outcomes)
	}
	for _, c := range clients {
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("client after Close: %v", err)
		}
		c.Close()
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if !testproc.CheckFor(testWait, 10*time.Millisecond, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}

// The end of Serve's context stops it like Close.
func TestServeEndsWithContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.sock")
	p, err := Listen(path, Config{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx) }()
	testproc.CheckFor(testWait, time.Millisecond, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.serving
	})
	if err := p.Serve(ctx); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("second Serve: %v", err)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(testWait):
		t.Fatal("Serve did not return")
	}
	if _, err := net.Dial("unix", path); err == nil {
		t.Error("the socket still answers")
	}
	p.Close()
}

// The socket is 0600 from the start; a stale one is replaced, a live one
// or a file that is not a socket is refused.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "e.sock")
	if _, err := Listen(path, Config{}); err == nil || !strings.Contains(err.Error(), "Agent is empty") {
		t.Errorf("no agent: %v", err)
	}
	p, err := Listen(path, Config{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v, %v; want a 0600 socket", fi.Mode(), err)
	}
	if p.Path() != path {
		t.Errorf("Path %q", p.Path())
	}
	if _, err := Listen(path, Config{Agent: "b"}); err == nil || !strings.Contains(err.Error(), ErrInUse.Error()) {
		t.Errorf("second proxy on a live socket: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left in the directory: %v", entries)
	}
	p.Close()

	// A stale socket: bound by a listener that is gone.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	p, err = Listen(path, Config{Agent: "a"})
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	p.Close()

	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("keep"), 0o600)
	if _, err := Listen(file, Config{Agent: "a"}); err == nil || !strings.Contains(err.Error(), "is not a socket (it is a regular file)") {
		t.Errorf("over a file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Error("the file was touched")
	}
}

func TestForbidden(t *testing.T) {
	tests := []struct {
		addr string
		why  string // "" for allowed by name
	}{
		{"8.8.8.8", ""},
		{"10.0.0.1", ""},
		{"172.16.0.1", ""},
		{"192.168.1.1", ""},
		{"100.64.0.1", ""},
		{"fd00::1", ""},
		{"2606:4700::1111", ""},
		{"64:ff9b::808:808", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"169.254.169.254", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"64:ff9b::7f00:1", "NAT64 of loopback"},
	}
	for _, tt := range tests {
		if got := forbidden(netip.MustParseAddr(tt.addr)); (got == "") != (tt.why == "") || !strings.Contains(got, tt.why) {
			t.Errorf("forbidden(%s) = %q, want %q", tt.addr, got, tt.why)
		}
	}
}
