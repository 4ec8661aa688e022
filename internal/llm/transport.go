package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Retry bounds how a call is retried on 429, 408, 5xx and transient
// network failures. The zero value of a field means its default.
type Retry struct {
	// MaxRetries is how many times a call is retried after the first
	// attempt (default 4; negative: never).
	MaxRetries int
	// Base is the first backoff (default 1s); each retry doubles it, up to
	// Max (default 30s). A Retry-After from the server replaces it.
	Base, Max time.Duration
	// MaxRetryAfter is the longest Retry-After that is waited for (default
	// 2m). A server asking for longer (a spent daily quota) gets no retry:
	// the turn fails at once with the server's answer instead of hanging.
	MaxRetryAfter time.Duration
	// Sleep waits d or until ctx ends (default: a timer). Tests replace it
	// to run without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock for Retry-After dates (default time.Now).
	Now func() time.Time
	// Jitter returns the wait actually used for a backoff of d, a duration
	// in [0, d] (default: uniformly random, "full jitter"). Without it,
	// agents that were rate-limited together would retry together and be
	// rate-limited again. Tests replace it to get exact waits. A
	// Retry-After is waited for as the server says, without jitter.
	Jitter func(d time.Duration) time.Duration
}

func (r Retry) withDefaults() Retry {
	if r.MaxRetries == 0 {
		r.MaxRetries = 4
	}
	if r.MaxRetries < 0 {
		r.MaxRetries = 0
	}
	if r.Base <= 0 {
		r.Base = time.Second
	}
	if r.Max <= 0 {
		r.Max = 30 * time.Second
	}
	if r.MaxRetryAfter <= 0 {
		r.MaxRetryAfter = 2 * time.Minute
	}
	if r.Sleep == nil {
		r.Sleep = sleep
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Jitter == nil {
		r.Jitter = fullJitter
	}
	return r
}

// backoff is the exponential backoff before retry n (0 for the first
// retry), before jitter.
func (r Retry) backoff(n int) time.Duration {
	d := r.Base
	for i := 0; i < n && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
}

func fullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP
// date. It returns 0 when there is none or it cannot be read.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, 1<<31)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// maxBody bounds a response body: a model's answer is far smaller.
const maxBody = 16 << 20

// errBodyTooLarge is a response body over maxBody.
var errBodyTooLarge = errors.New("response body over 16 MiB")

// minSecretLen is the shortest key that is redacted from messages. A
// shorter "key" (local servers take any) protects nothing, and replacing
// a short word everywhere would garble the messages.
const minSecretLen = 4

// transport posts JSON to one API with retries, and makes its failures
// into *APIError.
type transport struct {
	provider string
	client   *http.Client
	retry    Retry
	// model, key, keyVar, baseURL and urlVar are for messages: hints name
	// the variables to check, and the key is redacted.
	model, key, keyVar, baseURL, urlVar string
	// parseError reads the provider's error type and message from an
	// error body.
	parseError func(body []byte) (typ, msg string)
}

// post sends body to url and returns the body of a 2xx answer. Failures
// are *APIError, or ctx's error when ctx ended.
func (t *transport) post(ctx context.Context, url string, header http.Header, body []byte) ([]byte, error) {
	retry := t.retry.withDefaults()
	for attempt := 1; ; attempt++ {
		status, respHeader, respBody, err := t.once(ctx, url, header, body)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var apiErr *APIError
		again := false
		switch {
		case errors.Is(err, errBodyTooLarge):
			apiErr = &APIError{Kind: KindBadResponse, Status: status, Message: err.Error()}
		case err != nil:
			apiErr = &APIError{Kind: KindNetwork, Message: err.Error()}
			again = transient(err)
			if isTimeout(err) {
				apiErr.Kind = KindTimeout
			}
			var pe *ProxyError
			if errors.As(err, &pe) {
				// A CONNECT (https) the proxy did not open.
				apiErr.Kind, apiErr.Status = KindProxy, pe.Status
				again = !pe.Refused()
			}
		case status >= 200 && status < 300:
			return respBody, nil
		case status >= 400 && strings.Contains(respHeader.Get("Proxy-Status"), "error="):
			// A plain http:// request the proxy answered itself: its
			// status is not the API's (a 403 is not a refused key).
			msg := ProxyStatusDetails(respHeader.Get("Proxy-Status"))
			if msg == "" {
				msg = strings.TrimSpace(string(respBody[:min(len(respBody), 300)]))
			}
			apiErr = &APIError{Kind: KindProxy, Status: status, Message: msg}
			again = status >= 500
		default:
			typ, msg := t.parseError(respBody)
			if msg == "" {
				msg = strings.TrimSpace(string(respBody[:min(len(respBody), 300)]))
			}
			apiErr = &APIError{Kind: kindOf(status, typ, msg, t.model), Status: status, Type: typ, Message: msg}
			apiErr.RetryAfter = parseRetryAfter(respHeader.Get("Retry-After"), retry.Now())
			again = retryable(status)
		}
		apiErr.Attempts = attempt
		if !again || attempt > retry.MaxRetries {
			return nil, t.finish(apiErr)
		}
		wait := retry.Jitter(retry.backoff(attempt - 1))
		if apiErr.RetryAfter > 0 {
			if apiErr.RetryAfter > retry.MaxRetryAfter {
				apiErr.Message += fmt.Sprintf(" (the server asks to retry after %s, longer than the %s bcp-agent waits)", apiErr.RetryAfter, retry.MaxRetryAfter)
				return nil, t.finish(apiErr)
			}
			wait = apiErr.RetryAfter
		}
		if err := retry.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// finish completes an error for the caller: it names the provider, adds
// what to check, and redacts the key from the provider's words. A proxy
// or a compatible server may echo the request's headers in an error, and
// these messages go to the gateway's audit log.
func (t *transport) finish(e *APIError) *APIError {
	e.Provider = t.provider
	e.Message = t.redact(e.Message)
	e.Type = t.redact(e.Type)
	if e.Attempts == 0 {
		e.Attempts = 1
	}
	e.Hint = t.hint(e)
	return e
}

// redact replaces the key in s, and so also "Bearer <key>".
func (t *transport) redact(s string) string {
	if len(t.key) < minSecretLen {
		return s
	}
	return strings.ReplaceAll(s, t.key, "[redacted]")
}

// hint says what an operator should check for e, or "".
func (t *transport) hint(e *APIError) string {
	switch {
	case e.Kind == KindAuth:
		return "check " + t.keyVar
	case e.Kind == KindModelNotFound:
		return fmt.Sprintf("check the model name %q and %s %s", t.model, t.urlVar, redactURL(t.baseURL))
	case e.Kind == KindProxy && e.Status < 500:
		return fmt.Sprintf("the proxy refused the destination of %s %s: in a bcpgw sandbox, allow its host:port in the agent definition's sandbox.network", t.urlVar, redactURL(t.baseURL))
	case e.Kind == KindProxy:
		return fmt.Sprintf("the proxy could not reach it: check %s %s", t.urlVar, redactURL(t.baseURL))
	case e.Status == 0 && (e.Kind == KindNetwork || e.Kind == KindTimeout):
		// No HTTP answer at all: most often a wrong base URL, or a local
		// server that is not running.
		return fmt.Sprintf("check %s %s", t.urlVar, redactURL(t.baseURL))
	}
	return ""
}

// redactURL hides a password in a base URL written with user info.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	return u.Redacted()
}

// transient reports whether a failure without an HTTP answer may pass on
// its own: a refused or reset connection (a server restarting, a proxy
// dropping an idle connection) or a timeout. DNS, TLS and certificate
// errors, a malformed URL and everything else are not retried: four more
// attempts would fail the same way, only later.
func transient(err error) bool {
	return isTimeout(err) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// once makes one request. err is a failure without an HTTP answer, or
// errBodyTooLarge with the status of the answer.
func (t *transport) once(ctx context.Context, url string, header http.Header, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("build request: %w", err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read response: %w", err)
	}
	if len(data) > maxBody {
		return resp.StatusCode, nil, nil, errBodyTooLarge
	}
	return resp.StatusCode, resp.Header, data, nil
}
