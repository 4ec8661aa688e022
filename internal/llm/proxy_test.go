package llm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/bcpgw/bcpgw/internal/llm"
	"github.com/bcpgw/bcpgw/internal/llm/llmtest"
)

func TestProxyFromEnv(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		https, http string // the URLs read, "" for none
		err         string
	}{
		{"none", nil, "", "", ""},
		{"blank", map[string]string{"HTTPS_PROXY": "  "}, "", "", ""},
		{"both, as the sandbox sets them", map[string]string{"HTTPS_PROXY": "http://127.0.0.1:3128", "HTTP_PROXY": "http://127.0.0.1:3128"},
			"http://127.0.0.1:3128", "http://127.0.0.1:3128", ""},
		{"lower case", map[string]string{"https_proxy": "http://127.0.0.1:3128"}, "http://127.0.0.1:3128", "", ""},
		{"upper case first", map[string]string{"HTTP_PROXY": "http://a:1", "http_proxy": "http://b:2"}, "", "http://a:1", ""},
		{"no scheme", map[string]string{"HTTP_PROXY": "127.0.0.1:3128"}, "", "http://127.0.0.1:3128", ""},
		{"socks", map[string]string{"HTTPS_PROXY": "socks5://127.0.0.1:1080"}, "socks5://127.0.0.1:1080", "", ""},
		{"bad scheme", map[string]string{"HTTPS_PROXY": "ftp://127.0.0.1:21"}, "", "", `HTTPS_PROXY "ftp://127.0.0.1:21": scheme "ftp"`},
		{"no host", map[string]string{"HTTP_PROXY": "http://"}, "", "", "HTTP_PROXY \"http://\": no host"},
		{"path", map[string]string{"https_proxy": "http://127.0.0.1:3128/x"}, "", "", "https_proxy \"http://127.0.0.1:3128/x\": a proxy URL has no path"},
		{"password hidden", map[string]string{"HTTPS_PROXY": "gopher://u:secret@h:1"}, "", "", `"gopher://u:xxxxx@h:1"`},
	}
	for _, tt := range tests {
		p, err := llm.ProxyFromEnv(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		str := func(u *url.URL) string {
			if u == nil {
				return ""
			}
			return u.String()
		}
		if str(p.HTTPS) != tt.https || str(p.HTTP) != tt.http || p.IsZero() != (tt.https == "" && tt.http == "") {
			t.Errorf("%s: https %q, http %q; want %q, %q", tt.name, str(p.HTTPS), str(p.HTTP), tt.https, tt.http)
		}
	}
}

// Every destination goes through the proxy of its scheme, loopback
// included (http.ProxyFromEnvironment would send these direct).
func TestProxyFuncProxiesLoopback(t *testing.T) {
	p, err := llm.ProxyFromEnv(func(k string) (string, bool) {
		return map[string]string{"HTTPS_PROXY": "http://127.0.0.1:3128", "HTTP_PROXY": "http://127.0.0.1:3129"}[k], true
	})
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]string{
		"http://127.0.0.1:11434/v1":  "http://127.0.0.1:3129",
		"http://localhost:8000/v1":   "http://127.0.0.1:3129",
		"http://[::1]:8080/":         "http://127.0.0.1:3129",
		"https://localhost/":         "http://127.0.0.1:3128",
		"https://api.openai.com/v1/": "http://127.0.0.1:3128",
	} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		got, err := p.Func()(req)
		if err != nil || got == nil || got.String() != want {
			t.Errorf("%s: proxy %v, %v; want %s", u, got, err, want)
		}
	}
	if got := p.Addrs(); len(got) != 2 || got[0] != "127.0.0.1:3128" || got[1] != "127.0.0.1:3129" {
		t.Errorf("Addrs %v", got)
	}
	if (llm.Proxy{}).Func() != nil {
		t.Error("no proxy, yet a proxy function")
	}
}

// fakeProxy is an HTTP proxy on loopback that records what it is asked.
// It refuses with refuse (a status, with a Proxy-Status header as bcpgw's
// egress proxy sends) or, when refuse is 0, answers plain requests by
// forwarding them to upstream, whatever their host: it plays the network.
type fakeProxy struct {
	srv      *httptest.Server
	upstream string
	refuse   int

	mu    sync.Mutex
	asked []string // "METHOD request-target"
}

func newFakeProxy(t *testing.T, upstream string, refuse int) *fakeProxy {
	p := &fakeProxy{upstream: upstream, refuse: refuse}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.asked = append(p.asked, r.Method+" "+r.RequestURI)
	p.mu.Unlock()
	if p.refuse != 0 || r.Method == http.MethodConnect {
		w.Header().Set("Proxy-Status", fmt.Sprintf(`bcpgw; error=http_request_denied; details="%s is not in the network list of agent \"reader\""`, r.Host))
		w.WriteHeader(p.refuse)
		fmt.Fprintln(w, "bcpgw egress: refused")
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.Path, r.Body)
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

func (p *fakeProxy) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...)
}

// The model's API is reached through HTTP_PROXY even at a loopback base
// URL, as a sandboxed agent reaches a local Ollama: nothing listens at the
// base URL itself.
func TestModelThroughProxy(t *testing.T) {
	srv := llmtest.New(t, llmtest.OpenAI, func(llmtest.Request) llmtest.Reply { return llmtest.Text(llmtest.OpenAI, "via the proxy") })
	upstream := strings.TrimSuffix(srv.BaseURL(), "/v1")
	for _, base := range []string{"http://127.0.0.1:1/v1", "http://localhost:1/v1"} {
		proxy := newFakeProxy(t, upstream, 0)
		env := map[string]string{"OPENAI_BASE_URL": base, "http_proxy": proxy.srv.URL}
		c, err := llm.New("openai:m", func(k string) (string, bool) { v, ok := env[k]; return v, ok }, llm.Options{})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
		if err != nil || resp.Message.Content != "via the proxy" {
			t.Fatalf("%s: %+v, %v", base, resp, err)
		}
		if got, want := proxy.requests(), []string{"POST " + base + "/chat/completions"}; len(got) != 1 || got[0] != want[0] {
			t.Errorf("%s: the proxy was asked %q, want %q", base, got, want)
		}
	}
}

// A refusal by the proxy is the proxy's, not the API's: a 403 is not a
// refused key. Refusals are not retried; a proxy that cannot reach the
// destination (502) is, like a refused connection.
func TestProxyRefusals(t *testing.T) {
	tests := []struct {
		name, base string
		refuse     int
		attempts   int
		want       []string
	}{
		{"plain http refused", "http://127.0.0.1:11434/v1", 403, 1,
			[]string{"openai: stopped at the proxy (HTTP 403): 127.0.0.1:11434 is not in the network list", "allow its host:port in the agent definition's sandbox.network"}},
		{"https CONNECT refused", "https://api.openai.com/v1", 403, 1,
			[]string{"refused CONNECT api.openai.com:443: 403 api.openai.com:443 is not in the network list of agent \"reader\"", "sandbox.network"}},
		{"https CONNECT unreachable", "https://api.openai.com/v1", 502, 3,
			[]string{"refused CONNECT api.openai.com:443: 502", "the proxy could not reach it: check OPENAI_BASE_URL https://api.openai.com/v1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proxy := newFakeProxy(t, "", tt.refuse)
			env := map[string]string{"OPENAI_BASE_URL": tt.base, "OPENAI_API_KEY": "sk-test", "HTTPS_PROXY": proxy.srv.URL, "HTTP_PROXY": proxy.srv.URL}
			s := &sleeps{}
			c, err := llm.New("openai:m", func(k string) (string, bool) { v, ok := env[k]; return v, ok },
				llm.Options{Retry: llm.Retry{MaxRetries: 2, Sleep: s.sleep}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Complete(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}})
			var apiErr *llm.APIError
			if !errors.As(err, &apiErr) || apiErr.Kind != llm.KindProxy || apiErr.Status != tt.refuse || apiErr.Attempts != tt.attempts {
				t.Fatalf("error %v, want kind proxy, status %d, %d attempts", err, tt.refuse, tt.attempts)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}
