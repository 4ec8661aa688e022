package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Retry bounds how a call is retried on 429, 408, 5xx and network
// failures. The zero value of a field means its default.
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
	return r
}

// backoff is the wait before retry n (0 for the first retry).
func (r Retry) backoff(n int) time.Duration {
	d := r.Base
	for i := 0; i < n && d < r.Max; i++ {
		d *= 2
	}
	return min(d, r.Max)
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

// transport posts JSON to one API with retries.
type transport struct {
	provider string
	client   *http.Client
	retry    Retry
	// parseError reads the provider's error type and message from an
	// error body.
	parseError func(body []byte) (typ, msg string)
	// hint says what to check for an error kind.
	hint func(Kind) string
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
		switch {
		case err != nil:
			apiErr = &APIError{Provider: t.provider, Kind: KindServer, Message: err.Error()}
		case status >= 200 && status < 300:
			return respBody, nil
		default:
			typ, msg := t.parseError(respBody)
			if msg == "" {
				msg = strings.TrimSpace(string(respBody[:min(len(respBody), 300)]))
			}
			apiErr = &APIError{Provider: t.provider, Kind: kindOf(status, typ, msg), Status: status, Type: typ, Message: msg}
			apiErr.RetryAfter = parseRetryAfter(respHeader.Get("Retry-After"), retry.Now())
		}
		apiErr.Attempts = attempt
		apiErr.Hint = t.hint(apiErr.Kind)
		if (err == nil && !retryable(status)) || attempt > retry.MaxRetries {
			return nil, apiErr
		}
		wait := retry.backoff(attempt - 1)
		if apiErr.RetryAfter > 0 {
			if apiErr.RetryAfter > retry.MaxRetryAfter {
				apiErr.Message += fmt.Sprintf(" (the server asks to retry after %s, longer than the %s bcp-agent waits)", apiErr.RetryAfter, retry.MaxRetryAfter)
				return nil, apiErr
			}
			wait = apiErr.RetryAfter
		}
		if err := retry.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// once makes one request. err is a network failure or an unreadable body.
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
		return 0, nil, nil, errors.New("response body over 16 MiB")
	}
	return resp.StatusCode, resp.Header, data, nil
}
