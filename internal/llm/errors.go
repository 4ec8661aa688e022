package llm

import (
	"fmt"
	"strings"
	"time"
)

// Kind says what went wrong with a call, in terms of what to do about it.
type Kind string

// The kinds of API errors.
const (
	// KindAuth: the key was refused (401, 403). Retrying cannot help.
	KindAuth Kind = "auth"
	// KindModelNotFound: the model (or the endpoint) does not exist (404,
	// or a provider error that says so).
	KindModelNotFound Kind = "model_not_found"
	// KindRateLimited: 429, still refused after the retries.
	KindRateLimited Kind = "rate_limited"
	// KindServer: 5xx, still failing after the retries.
	KindServer Kind = "server"
	// KindTimeout: 408, or no answer in time, still failing after the
	// retries.
	KindTimeout Kind = "timeout"
	// KindNetwork: no HTTP answer: the name does not resolve, the TLS
	// certificate is refused, the URL is malformed, or the connection is
	// refused or reset (retried; the rest is not, as it would fail again).
	KindNetwork Kind = "network"
	// KindProxy: the HTTP proxy (HTTPS_PROXY, HTTP_PROXY; in a bcpgw
	// sandbox, the gateway's egress proxy) refused the destination (403:
	// not in the agent's sandbox.network) or could not reach it (502,
	// 504: retried like a refused connection).
	KindProxy Kind = "proxy"
	// KindBadRequest: any other 4xx: the request was refused as malformed
	// (a schema the provider does not accept, a context too long, ...).
	KindBadRequest Kind = "bad_request"
	// KindBadResponse: a 2xx whose body is not what the API promises.
	KindBadResponse Kind = "bad_response"
)

// APIError is a failed call. Its message names the provider, the HTTP
// status, the provider's own words and, where one helps, what to check.
type APIError struct {
	Provider string // "openai" or "anthropic"
	Kind     Kind
	Status   int    // HTTP status; 0 when there was no HTTP answer
	Type     string // the provider's error type or code, if it gave one
	Message  string // the provider's message, or what failed
	Hint     string // what to check, e.g. "check OPENAI_API_KEY"
	// RetryAfter is what the provider asked for on a 429/5xx, if anything.
	RetryAfter time.Duration
	// Attempts is how many requests were made in all.
	Attempts int
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	b.WriteString(": ")
	switch e.Kind {
	case KindAuth:
		b.WriteString("authentication failed")
	case KindModelNotFound:
		b.WriteString("model not found")
	case KindRateLimited:
		b.WriteString("rate limited")
	case KindServer:
		b.WriteString("server error")
	case KindTimeout:
		b.WriteString("timed out")
	case KindNetwork:
		b.WriteString("connection failed")
	case KindProxy:
		b.WriteString("stopped at the proxy")
	case KindBadRequest:
		b.WriteString("request refused")
	case KindBadResponse:
		b.WriteString("malformed response")
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d", e.Status)
		if e.Type != "" {
			b.WriteString(", " + e.Type)
		}
		b.WriteString(")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	if e.Hint != "" {
		b.WriteString("; " + e.Hint)
	}
	return b.String()
}

// kindOf classifies an HTTP error status and the provider's error type
// and message. A model is taken as missing only on a 404, on the code
// model_not_found, or on a message that names the configured model and
// says it is not found: other messages mention "model" and "not found"
// for other reasons (a tool or a file not found).
func kindOf(status int, typ, msg, model string) Kind {
	switch {
	case status == 401 || status == 403:
		return KindAuth
	case status == 404, typ == "model_not_found", namesMissingModel(msg, model):
		return KindModelNotFound
	case status == 408:
		return KindTimeout
	case status == 429:
		return KindRateLimited
	case status >= 500:
		return KindServer
	}
	return KindBadRequest
}

// namesMissingModel reports whether msg says that model is not found, as
// Ollama does with a 400: model "llama9" not found, try pulling it first.
func namesMissingModel(msg, model string) bool {
	lower := strings.ToLower(msg)
	return model != "" && strings.Contains(lower, strings.ToLower(model)) &&
		(strings.Contains(lower, "not found") || strings.Contains(lower, "does not exist"))
}

// retryable reports whether a status is worth another try: rate limits,
// request timeouts, server errors and Anthropic's 529 overloaded.
func retryable(status int) bool {
	return status == 429 || status == 408 || status >= 500
}
