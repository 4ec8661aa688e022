package bcpagent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bcpgw/bcpgw/internal/llm"
)

func TestHTMLText(t *testing.T) {
	page := `<!doctype html><html><head><title> The   Page </title><style>body{color:red}</style>
<script>alert("no")</script></head><body>
<nav>Home | About</nav>
<h1>Heading</h1><p>First   paragraph with <a href="/x">a link</a>.</p>
<ul><li>one</li><li>two</li></ul>
<noscript>enable js</noscript><svg><text>drawn</text></svg>
<div>Last<br>line</div></body></html>`
	title, text := htmlText(strings.NewReader(page))
	if title != "The Page" {
		t.Errorf("title %q", title)
	}
	want := "Home | About\nHeading\nFirst paragraph with a link .\n- one\n- two\nLast\nline"
	if text != want {
		t.Errorf("text:\n%s\nwant:\n%s", text, want)
	}
}

// Pages that a token-by-token reading lost whole: HTML5 lets a page omit
// </head>, and an unclosed <iframe> makes the parser read the rest of
// the page as the iframe's text.
func TestHTMLTextOfSloppyPages(t *testing.T) {
	tests := []struct {
		name, page, title, text string
	}{
		{"no </head>", `<!doctype html><html><head><meta charset="utf-8"><title>News</title>
<body><h1>Today</h1><p>The migration finished.</p></body></html>`, "News", "Today\nThe migration finished."},
		{"no <head> and no <body>", `<title>Bare</title><p>Just text.<p>More text.`, "Bare", "Just text.\nMore text."},
		{"unclosed iframe", `<html><head><title>Ads</title></head><body><p>Before.</p>
<iframe src="https://ads.example/slot"><p>After the ad.</p><script>evil()</script><div>Last line.</div></body></html>`,
			"Ads", "Before.\nAfter the ad.\nLast line."},
		{"closed iframe", `<body><p>A</p><iframe src="x"></iframe><p>B</p></body>`, "", "A\nB"},
		{"unclosed iframes nested deeper than reparsed", `<body><p>A</p>` + strings.Repeat(`<iframe>`, 10) + `<p>lost</p>`, "", "A"},
	}
	for _, tt := range tests {
		title, text := htmlText(strings.NewReader(tt.page))
		if title != tt.title || text != tt.text {
			t.Errorf("%s: title %q, text:\n%s\nwant title %q, text:\n%s", tt.name, title, text, tt.title, tt.text)
		}
	}
}

// fetchServer serves a few pages on loopback.
func fetchServer(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><head><title>T</title></head><body><p>Hello <b>world</b></p><script>x()</script></body></html>")
	})
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
		w.Write([]byte("<p>caf\xe9</p>"))
	})
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, strings.Repeat("abcdefghij", 100))
	})
	mux.HandleFunc("/image", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n"))
	})
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, strings.Repeat("x", 5000))
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/to-file", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestWebFetch(t *testing.T) {
	srv := fetchServer(t)
	f := newFetcher(FetchConfig{AllowPrivate: true, MaxChars: 300, MaxBytes: 1000})
	tests := []struct {
		path string
		want []string
		err  string
	}{
		{"/page", []string{"URL: " + srv.URL + "/page", "Status: 200 OK", "Title: T", "\n\nHello world"}, ""},
		{"/latin1", []string{"café"}, ""},
		{"/plain", []string{strings.Repeat("abcdefghij", 30), "[... cut: 300 of 1000 characters shown]"}, ""},
		{"/huge", []string{"the page is larger than 1000 bytes"}, ""},
		{"/image", nil, `content type "image/png" is not text`},
		{"/loop", nil, "more than 5 redirects"},
		{"/to-file", nil, "redirect to a file: URL refused"},
	}
	for _, tt := range tests {
		got, err := f.Fetch(context.Background(), srv.URL+tt.path)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %q, %v; want error %q", tt.path, got, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.path, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tt.path, got, w)
			}
		}
		if strings.Contains(got, "x()") {
			t.Errorf("%s: script text in %q", tt.path, got)
		}
	}
	for _, bad := range []string{"file:///etc/passwd", "ftp://example.com/", "not a url", "http://"} {
		if _, err := f.Fetch(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "is not an http or https URL") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// By default WebFetch reaches public addresses only: a page cannot steer
// a Reader into the operator's network.
func TestWebFetchRefusesPrivateAddresses(t *testing.T) {
	srv := fetchServer(t)
	f := newFetcher(FetchConfig{})
	for _, u := range []string{srv.URL + "/page", "http://localhost:1/", "http://10.0.0.1:1/", "http://169.254.169.254/latest/meta-data/", "http://[::1]:1/", "http://[64:ff9b::a9fe:a9fe]/"} {
		_, err := f.Fetch(context.Background(), u)
		if err == nil || !strings.Contains(err.Error(), "is not public") {
			t.Errorf("%s: %v, want a refusal", u, err)
		}
	}
}

func TestPublicAddr(t *testing.T) {
	tests := []struct {
		addr   string
		public bool
		why    string // in the refusal
	}{
		{"8.8.8.8", true, ""},
		{"1.1.1.1", true, ""},
		{"2606:4700::1111", true, ""},
		{"64:ff9b::808:808", true, ""},   // NAT64 of a public address
		{"2002:808:808::1", true, ""},    // 6to4 of a public address
		{"::ffff:8.8.8.8", true, ""},     // IPv4-mapped
		{"192.0.1.1", true, ""},          // next to 192.0.0.0/24
		{"198.20.0.1", true, ""},         // next to 198.18.0.0/15
		{"223.255.255.255", true, ""},    // below multicast
		{"127.0.0.1", false, "loopback"}, //
		{"127.8.9.10", false, "loopback"},
		{"10.1.2.3", false, "private"},
		{"172.16.0.1", false, "private"},
		{"192.168.1.1", false, "private"},
		{"100.64.0.1", false, "carrier-grade NAT"},
		{"169.254.169.254", false, "link-local"},
		{"0.0.0.0", false, "this network"},
		{"0.1.2.3", false, "this network"},
		{"192.0.0.170", false, "IETF protocol assignments"},
		{"192.0.2.1", false, "documentation"},
		{"198.18.0.1", false, "benchmarking"},
		{"198.19.255.255", false, "benchmarking"},
		{"224.0.0.1", false, "multicast"},
		{"240.0.0.1", false, "reserved"},
		{"255.255.255.255", false, "broadcast"},
		{"::", false, "unspecified"},
		{"::1", false, "loopback"},
		{"::ffff:127.0.0.1", false, "loopback"},
		{"::ffff:169.254.169.254", false, "link-local"},
		{"64:ff9b::a9fe:a9fe", false, "embeds 169.254.169.254"},
		{"64:ff9b::7f00:1", false, "embeds 127.0.0.1"},
		{"64:ff9b:1::1", false, "local-use NAT64"},
		{"2002:7f00:1::1", false, "embeds 127.0.0.1"},
		{"2002:a00:1::", false, "embeds 10.0.0.1"},
		{"::127.0.0.1", false, "embeds 127.0.0.1"},
		{"::10.0.0.1", false, "embeds 10.0.0.1"},
		{"2001::1", false, "Teredo"},
		{"2001:db8::1", false, "documentation"},
		{"fd00::1", false, "unique local"},
		{"fe80::1", false, "link-local"},
		{"fe80::1%eth0", false, "link-local"},
		{"fec0::1", false, "site-local"},
		{"ff02::1", false, "multicast"},
		{"100::1", false, "discard-only"},
		{"4000::1", false, "outside the IPv6 global unicast space"},
	}
	for _, tt := range tests {
		a, err := netip.ParseAddr(tt.addr)
		if err != nil {
			t.Fatalf("%s: %v", tt.addr, err)
		}
		err = publicAddr(a)
		if tt.public {
			if err != nil {
				t.Errorf("%s refused: %v", tt.addr, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "is not public") || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("%s: %v, want a refusal naming %q", tt.addr, err, tt.why)
		}
	}
}

// A public page that redirects to a private address is refused: the
// check is made on every address dialled, redirects included.
func TestWebFetchRefusesRedirectToPrivateAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	}))
	defer srv.Close()
	first, err := netip.ParseAddrPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	f := newFetcher(FetchConfig{})
	// Let the test server (on loopback) stand for a public one.
	f.allow = func(a netip.Addr) error {
		if a == first.Addr() {
			return nil
		}
		return publicAddr(a)
	}
	_, err = f.Fetch(context.Background(), srv.URL)
	if err == nil || !strings.Contains(err.Error(), "address 169.254.169.254 is not public") {
		t.Errorf("error %v, want the redirect refused", err)
	}
}

// The fetch ends with the turn.
func TestWebFetchHonorsContext(t *testing.T) {
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // answer nothing until the client gives up
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel() // the turn is interrupted while the request is in flight
	}()
	_, err := newFetcher(FetchConfig{AllowPrivate: true}).Fetch(ctx, srv.URL)
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("error %v", err)
	}
}

// webProxy is an HTTP proxy on loopback that plays the network: it
// answers plain requests from pages, by path, whatever their host, and
// refuses CONNECT and the hosts in refuse as bcpgw's egress proxy does,
// with a Proxy-Status header.
type webProxy struct {
	srv    *httptest.Server
	pages  map[string]http.HandlerFunc
	refuse map[string]bool // host:port

	mu    sync.Mutex
	asked []string // "METHOD request-target"
}

func newWebProxy(t *testing.T, pages map[string]http.HandlerFunc, refuse ...string) *webProxy {
	p := &webProxy{pages: pages, refuse: map[string]bool{}}
	for _, r := range refuse {
		p.refuse[r] = true
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.asked = append(p.asked, r.Method+" "+r.RequestURI)
		p.mu.Unlock()
		host := r.Host
		if r.Method != http.MethodConnect && r.URL.Port() == "" {
			host += ":80"
		}
		page, ok := p.pages[r.URL.Path]
		if r.Method == http.MethodConnect || p.refuse[host] || !ok {
			w.Header().Set("Proxy-Status", fmt.Sprintf(`bcpgw; error=http_request_denied; details="%s is not in the network list of agent \"researcher\""`, host))
			http.Error(w, "bcpgw egress: refused", http.StatusForbidden)
			return
		}
		page(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *webProxy) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...)
}

// proxyFor returns the proxy of both schemes at u.
func proxyFor(t *testing.T, u string) llm.Proxy {
	t.Helper()
	p, err := llm.ProxyFromEnv(func(k string) (string, bool) {
		if k == "HTTPS_PROXY" || k == "HTTP_PROXY" {
			return u, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Through a proxy, WebFetch dials the proxy (on loopback, which it
// refuses otherwise) and asks it for the page; the proxy's refusals reach
// the model in the proxy's words.
func TestWebFetchThroughProxy(t *testing.T) {
	proxy := newWebProxy(t, map[string]http.HandlerFunc{
		"/page": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<title>T</title><p>Hello through the proxy</p>")
		},
		"/moved": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://news.example.com/page", http.StatusFound)
		},
	}, "blocked.example.com:80")
	f := newFetcher(FetchConfig{Proxy: proxyFor(t, proxy.srv.URL)})
	tests := []struct {
		url, want, err string
	}{
		{"http://news.example.com/page", "Hello through the proxy", ""},
		{"http://news.example.com/moved", "URL: http://news.example.com/page", ""},
		{"http://blocked.example.com/page", "", `the proxy answered 403 Forbidden: blocked.example.com:80 is not in the network list of agent "researcher"`},
		{"https://news.example.com/page", "", `refused CONNECT news.example.com:443: 403 news.example.com:443 is not in the network list`},
	}
	for _, tt := range tests {
		got, err := f.Fetch(context.Background(), tt.url)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %q, %v; want error %q", tt.url, got, err, tt.err)
			}
			continue
		}
		if err != nil || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, %v; want %q", tt.url, got, err, tt.want)
		}
	}
	want := []string{"GET http://news.example.com/page", "GET http://news.example.com/moved", "GET http://news.example.com/page",
		"GET http://blocked.example.com/page", "CONNECT news.example.com:443"}
	if got := proxy.requests(); !slices.Equal(got, want) {
		t.Errorf("the proxy was asked %q, want %q", got, want)
	}
}

// Through a proxy, what the dial check cannot see (the proxy resolves) is
// checked on the URL: localhost and literal special-purpose addresses
// are refused before any request, redirects included. Names are the
// proxy's to judge.
func TestWebFetchThroughProxyRefusesLocalHosts(t *testing.T) {
	proxy := newWebProxy(t, map[string]http.HandlerFunc{
		"/to-metadata": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		},
	})
	f := newFetcher(FetchConfig{Proxy: proxyFor(t, proxy.srv.URL)})
	for _, tt := range []struct{ url, err string }{
		{"http://localhost:11434/", "host localhost is this machine"},
		{"http://LOCALHOST./", "is this machine"},
		{"http://app.localhost/", "host app.localhost is this machine"},
		{"http://127.0.0.1:3128/", "address 127.0.0.1 is not public (loopback)"},
		{"http://[::1]/", "address ::1 is not public (loopback)"},
		{"https://[::ffff:10.0.0.1]/", "address 10.0.0.1 is not public (private)"},
		{"http://169.254.169.254/latest/meta-data/", "(link-local (cloud metadata))"},
		{"http://[fe80::1%25eth0]/", "(link-local)"},
		{"http://10.1.2.3/", "(private)"},
		{"http://2130706433/", "is a number some resolvers read as an IPv4 address"},
		{"http://0x7f.1/", "is a number some resolvers read as an IPv4 address"},
		{"http://127.1/", "is a number some resolvers read as an IPv4 address"},
		{"http://news.example.com/to-metadata", "address 169.254.169.254 is not public"},
	} {
		if got, err := f.Fetch(context.Background(), tt.url); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: %q, %v; want error %q", tt.url, got, err, tt.err)
		}
	}
	// Only the page that redirected was asked for.
	if got := proxy.requests(); !slices.Equal(got, []string{"GET http://news.example.com/to-metadata"}) {
		t.Errorf("the proxy was asked %q", got)
	}

	// BCP_AGENT_WEBFETCH_PRIVATE leaves it all to the proxy.
	open := newFetcher(FetchConfig{AllowPrivate: true, Proxy: proxyFor(t, proxy.srv.URL)})
	if _, err := open.Fetch(context.Background(), "http://127.0.0.1:11434/"); err == nil || !strings.Contains(err.Error(), "the proxy answered 403") {
		t.Errorf("with AllowPrivate: %v, want the proxy's refusal", err)
	}
}

// With a proxy for one scheme only, the other would go direct: refused,
// as WebFetch dials the proxy and nothing else.
func TestWebFetchDialsOnlyTheProxy(t *testing.T) {
	proxy := newWebProxy(t, nil)
	only, err := llm.ProxyFromEnv(func(k string) (string, bool) {
		if k == "HTTP_PROXY" {
			return proxy.srv.URL, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	f := newFetcher(FetchConfig{AllowPrivate: true, Proxy: only})
	if _, err := f.Fetch(context.Background(), "https://news.example.com/"); err == nil || !strings.Contains(err.Error(), "WebFetch connects to the proxy only") {
		t.Errorf("error %v", err)
	}
	if got := proxy.requests(); len(got) != 0 {
		t.Errorf("the proxy was asked %q", got)
	}
}

func TestLiteralHost(t *testing.T) {
	for host, refused := range map[string]bool{
		"example.com": false, "news.example.com.": false, "1e100.net": false, "123.com": false, "xn--bcher-kva.de": false,
		"8.8.8.8": false, "2606:4700::1111": false,
		"localhost": true, "Localhost.": true, "a.b.localhost": true, "127.0.0.1": true, "::1": true, "10.0.0.1": true,
		"0": true, "2130706433": true, "0x7f000001": true, "0X7F.1": true, "017700000001": true, "127.1": true,
	} {
		if err := literalHost(host); (err != nil) != refused {
			t.Errorf("literalHost(%q) = %v, want refused %v", host, err, refused)
		}
	}
}
