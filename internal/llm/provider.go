package llm

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Default base URLs, used when the environment names none.
const (
	DefaultOpenAIBaseURL    = "https://api.openai.com/v1"
	DefaultAnthropicBaseURL = "https://api.anthropic.com"
)

// DefaultResponseHeaderTimeout bounds the wait for an answer's headers.
// Without streaming, the headers come only once the model has written its
// whole answer, so this is generous.
const DefaultResponseHeaderTimeout = 5 * time.Minute

// bodyTimeout bounds reading a body after its headers: a non-streamed
// answer is sent at once, so a body that trickles longer is a stuck
// connection.
const bodyTimeout = time.Minute

// Options are the settings common to both clients.
type Options struct {
	// HTTPClient makes the requests (default: a client whose transport
	// waits ResponseHeaderTimeout for each attempt's headers).
	HTTPClient *http.Client
	// Proxy chooses the proxy of each request (default: none, every
	// request direct). New sets it from HTTPS_PROXY and HTTP_PROXY (see
	// ProxyFromEnv) unless it is set. Ignored when HTTPClient is set.
	Proxy func(*http.Request) (*url.URL, error)
	// ResponseHeaderTimeout bounds each attempt's wait for the answer's
	// headers (default DefaultResponseHeaderTimeout). A hung server times
	// out, and the attempt is retried like a transient failure. Ignored
	// when HTTPClient is set: set it on that client's transport.
	ResponseHeaderTimeout time.Duration
	// Retry bounds the retries on rate limits and server errors.
	Retry Retry
	// MaxTokens caps the answer's tokens. Anthropic requires a cap
	// (default DefaultMaxTokens); OpenAI gets none unless set.
	MaxTokens int
}

func (o Options) httpClient() *http.Client {
	if o.HTTPClient != nil {
		return o.HTTPClient
	}
	headers := o.ResponseHeaderTimeout
	if headers <= 0 {
		headers = DefaultResponseHeaderTimeout
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Not the default's http.ProxyFromEnvironment: it reads the process
	// environment rather than the one New was given, and sends loopback
	// destinations direct, which a sandbox's local model server behind
	// the egress proxy cannot be.
	t.Proxy = o.Proxy
	t.OnProxyConnectResponse = ProxyConnectResponse
	t.ResponseHeaderTimeout = headers
	return &http.Client{Transport: t, Timeout: headers + bodyTimeout}
}

// ErrNoModel is returned by New for an empty model.
var ErrNoModel = errors.New("no model: set model: openai:MODEL or anthropic:MODEL in the agent definition")

// New returns the client for model, written PROVIDER:NAME ("openai:gpt-4o-mini",
// "openai:llama3.1:8b", "anthropic:claude-sonnet-4-5"), configured from
// lookup (the process environment):
//
//   - openai: OPENAI_BASE_URL (default DefaultOpenAIBaseURL) and
//     OPENAI_API_KEY, which may be empty only when a base URL is set (a
//     local server such as Ollama needs none).
//   - anthropic: ANTHROPIC_BASE_URL (default DefaultAnthropicBaseURL) and
//     ANTHROPIC_API_KEY (required).
//   - both: HTTPS_PROXY and HTTP_PROXY (either case), through which every
//     request goes, a loopback base URL's too (see Proxy.Func).
func New(model string, lookup func(string) (string, bool), opts Options) (Client, error) {
	if model == "" {
		return nil, ErrNoModel
	}
	if opts.Proxy == nil && opts.HTTPClient == nil {
		proxy, err := ProxyFromEnv(lookup)
		if err != nil {
			return nil, err
		}
		opts.Proxy = proxy.Func()
	}
	provider, name, ok := strings.Cut(model, ":")
	if !ok || name == "" {
		return nil, fmt.Errorf("model %q: want PROVIDER:MODEL with provider openai or anthropic, e.g. openai:gpt-4o-mini", model)
	}
	env := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	switch provider {
	case "openai":
		base, key := env("OPENAI_BASE_URL"), env("OPENAI_API_KEY")
		if base == "" {
			if key == "" {
				return nil, errors.New("OPENAI_API_KEY is not set: add it to the agent definition's env (OPENAI_API_KEY: ${OPENAI_API_KEY}), or set OPENAI_BASE_URL to a local server that needs no key")
			}
			base = DefaultOpenAIBaseURL
		}
		if err := checkURL("OPENAI_BASE_URL", base); err != nil {
			return nil, err
		}
		return NewOpenAI(base, key, name, opts), nil
	case "anthropic":
		base, key := env("ANTHROPIC_BASE_URL"), env("ANTHROPIC_API_KEY")
		if key == "" {
			return nil, errors.New("ANTHROPIC_API_KEY is not set: add it to the agent definition's env (ANTHROPIC_API_KEY: ${ANTHROPIC_API_KEY})")
		}
		if base == "" {
			base = DefaultAnthropicBaseURL
		}
		if err := checkURL("ANTHROPIC_BASE_URL", base); err != nil {
			return nil, err
		}
		return NewAnthropic(base, key, name, opts), nil
	}
	return nil, fmt.Errorf("model %q: unknown provider %q (known: openai, anthropic)", model, provider)
}

func checkURL(name, v string) error {
	if !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
		return fmt.Errorf("%s %q: want an http:// or https:// URL", name, v)
	}
	return nil
}
