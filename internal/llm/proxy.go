package llm

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Proxy is the HTTP proxy that carries requests, read from the
// environment by ProxyFromEnv. Inside a bcpgw sandbox with a network
// list it is the gateway's egress proxy, the only way out.
type Proxy struct {
	// HTTPS carries https:// requests (through CONNECT), HTTP plain
	// http:// ones; nil goes direct.
	HTTPS, HTTP *url.URL
}

// IsZero reports whether no proxy is set.
func (p Proxy) IsZero() bool { return p.HTTPS == nil && p.HTTP == nil }

// String names the proxies for a log line, passwords hidden.
func (p Proxy) String() string {
	var parts []string
	if p.HTTPS != nil {
		parts = append(parts, "https via "+p.HTTPS.Redacted())
	}
	if p.HTTP != nil {
		parts = append(parts, "http via "+p.HTTP.Redacted())
	}
	if len(parts) == 0 {
		return "direct"
	}
	return strings.Join(parts, ", ")
}

// Func returns the proxy function of an http.Transport: each request
// goes through the proxy of its scheme, whatever its host. Unlike
// http.ProxyFromEnvironment, loopback destinations are proxied too, and
// NO_PROXY is not read: in a sandbox the proxy is the only way out, so a
// local model server (http://127.0.0.1:11434) is reached through it, and
// a destination exempted from it would be unreachable anyway. Nil when
// no proxy is set.
func (p Proxy) Func() func(*http.Request) (*url.URL, error) {
	if p.IsZero() {
		return nil
	}
	return func(req *http.Request) (*url.URL, error) {
		switch req.URL.Scheme {
		case "https":
			return p.HTTPS, nil
		case "http":
			return p.HTTP, nil
		}
		return nil, nil
	}
}

// Addrs returns the host:port each proxy is dialled at, as
// http.Transport dials it (the scheme's port when none is written).
func (p Proxy) Addrs() []string {
	var out []string
	for _, u := range []*url.URL{p.HTTPS, p.HTTP} {
		if u == nil {
			continue
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[u.Scheme]
		}
		out = append(out, net.JoinHostPort(u.Hostname(), port))
	}
	return out
}

// ProxyFromEnv reads HTTPS_PROXY and HTTP_PROXY, each in upper or lower
// case (upper first), as URLs (http:// assumed when no scheme is
// written). A value that is not a proxy URL is an error, so that a typo
// is found at start and not as a connection that goes nowhere.
func ProxyFromEnv(lookup func(string) (string, bool)) (Proxy, error) {
	var p Proxy
	for _, v := range []struct {
		names [2]string
		dst   **url.URL
	}{{[2]string{"HTTPS_PROXY", "https_proxy"}, &p.HTTPS}, {[2]string{"HTTP_PROXY", "http_proxy"}, &p.HTTP}} {
		for _, name := range v.names {
			s, _ := lookup(name)
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			u, err := parseProxy(s)
			if err != nil {
				return Proxy{}, fmt.Errorf("%s %q: %v", name, redactProxy(s), err)
			}
			*v.dst = u
			break
		}
	}
	return p, nil
}

func parseProxy(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("not a URL: want one such as http://127.0.0.1:3128")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5" && u.Scheme != "socks5h":
		return nil, fmt.Errorf("scheme %q: want http, https or socks5", u.Scheme)
	case u.Hostname() == "":
		return nil, fmt.Errorf("no host: want a URL such as http://127.0.0.1:3128")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return nil, fmt.Errorf("a proxy URL has no path: want one such as http://127.0.0.1:3128")
	}
	return u, nil
}

// redactProxy hides a password in a proxy value for a message.
func redactProxy(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// ProxyError is a proxy's refusal of a CONNECT: the destination is not
// allowed (403), or the proxy could not reach it (502, 504).
type ProxyError struct {
	Proxy  string // the proxy's address
	Target string // host:port asked for
	Status int    // the proxy's HTTP status
	// Text is the proxy's reason: the details of its Proxy-Status header
	// (RFC 9209), which bcpgw's egress proxy sends, else its status text.
	Text string
}

func (e *ProxyError) Error() string {
	return fmt.Sprintf("proxy %s refused CONNECT %s: %d %s", e.Proxy, e.Target, e.Status, e.Text)
}

// Refused reports whether the proxy refused the destination itself, as
// opposed to failing to reach it: retrying cannot help.
func (e *ProxyError) Refused() bool { return e.Status < 500 }

// ProxyConnectResponse is for http.Transport.OnProxyConnectResponse: it
// makes a CONNECT the proxy did not answer 200 into a *ProxyError that
// says why, where the transport's own error would say only "Forbidden".
func ProxyConnectResponse(_ context.Context, proxyURL *url.URL, req *http.Request, resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	text := ProxyStatusDetails(resp.Header.Get("Proxy-Status"))
	if text == "" {
		text = http.StatusText(resp.StatusCode)
	}
	target := req.Host
	if target == "" && req.URL != nil {
		target = req.URL.Opaque
	}
	return &ProxyError{Proxy: proxyURL.Host, Target: target, Status: resp.StatusCode, Text: text}
}

// ProxyStatusDetails returns the details parameter of a Proxy-Status
// header (RFC 9209: proxy; error=...; details="..."), or "": the reason
// a proxy gives for an answer of its own.
func ProxyStatusDetails(h string) string {
	_, rest, ok := strings.Cut(h, `details="`)
	if !ok {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; c {
		case '\\':
			if i+1 < len(rest) {
				i++
				b.WriteByte(rest[i])
			}
		case '"':
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
