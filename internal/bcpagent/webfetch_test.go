package bcpagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
	for _, u := range []string{srv.URL + "/page", "http://localhost:1/", "http://10.0.0.1:1/", "http://169.254.169.254/latest/meta-data/", "http://[::1]:1/"} {
		_, err := f.Fetch(context.Background(), u)
		if err == nil || !strings.Contains(err.Error(), "is not public") {
			t.Errorf("%s: %v, want a refusal", u, err)
		}
	}
	for _, ip := range []string{"8.8.8.8", "1.1.1.1", "2606:4700::1111"} {
		if !publicIP(parseIP(t, ip)) {
			t.Errorf("%s is public", ip)
		}
	}
	for _, ip := range []string{"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.1.1", "0.0.0.0", "::1", "fd00::1", "fe80::1", "224.0.0.1"} {
		if publicIP(parseIP(t, ip)) {
			t.Errorf("%s is not public", ip)
		}
	}
}

// The fetch ends with the turn.
func TestWebFetchHonorsContext(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newFetcher(FetchConfig{AllowPrivate: true}).Fetch(ctx, srv.URL)
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("error %v", err)
	}
}

func parseIP(t *testing.T, s string) net.IP {
	t.Helper()
	ip := net.ParseIP(s)
	if ip == nil {
		t.Fatalf("bad IP %s", s)
	}
	return ip
}
