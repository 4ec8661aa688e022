package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/bcpgw/bcpgw/internal/clock"
)

// Delivery rules (the seeds' webhook delivery): MaxAttempts attempts per
// notification, InitialBackoff after the first failure, doubling up to
// MaxBackoff; each attempt ends after DefaultTimeout. After MaxAttempts
// the endpoint is taken to be down rather than the notification wrong:
// the target keeps trying it every MaxBackoff, so that nothing of the
// outage is lost (see Notifier.deliver).
const (
	MaxAttempts    = 10
	InitialBackoff = time.Second
	MaxBackoff     = 300 * time.Second
	DefaultTimeout = 10 * time.Second
)

// Backoff is the wait after the attempt-th failed attempt (1-based): 1s,
// 2s, 4s, ... at most MaxBackoff.
func Backoff(attempt int) time.Duration {
	d := InitialBackoff
	for i := 1; i < attempt && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

// Bounds of what is read of a response: the start is kept (for bcpgw
// notify test and the log), a little more is drained so that the
// connection can be reused, and the rest is never read.
const (
	maxKeptBody    = 4 << 10
	maxDrainedBody = 64 << 10
)

// Outcome is how an attempt ended.
type Outcome string

// The outcomes, also the metrics' outcome label.
const (
	OutcomeOK      Outcome = "ok"      // 2xx
	OutcomeRetry   Outcome = "error"   // a network error, a timeout, 408, 429 or 5xx: try again
	OutcomeRefused Outcome = "refused" // another 4xx, or a redirect (not followed): trying again would not help
	OutcomeGone    Outcome = "gone"    // 410 Gone: the endpoint asks for nothing more
)

// Result is what one attempt got.
type Result struct {
	Outcome  Outcome
	Status   int    // the HTTP status; 0 if there was no response
	Body     []byte // the start of the response body, at most 4 KiB
	Duration time.Duration
	Err      error // why there was no response (a timeout is ErrTimeout)
}

// ErrTimeout is the error of an attempt that had no answer within the
// timeout.
var ErrTimeout = errors.New("no answer within the timeout")

func (r Result) String() string {
	if r.Err != nil {
		return r.Err.Error()
	}
	s := fmt.Sprintf("%d %s", r.Status, http.StatusText(r.Status))
	if r.Status >= 300 && r.Status < 400 {
		s += " (redirects are not followed: put the final URL in the notify file)"
	}
	return s
}

func classify(status int) Outcome {
	switch {
	case status >= 200 && status < 300:
		return OutcomeOK
	case status == http.StatusGone:
		return OutcomeGone
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
		return OutcomeRetry
	}
	return OutcomeRefused
}

// NewClient is the HTTP client notifications are sent with: proxies from
// the environment (HTTPS_PROXY, NO_PROXY), no redirects followed (a
// redirect could take the notification, and its signature, to another
// host), no timeout of its own (the sender's clock times each attempt).
func NewClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// sender makes attempts.
type sender struct {
	client  *http.Client
	clock   clock.Clock
	timeout time.Duration
}

// Sign returns the Standard Webhooks signature of body sent as message id
// at timestamp ts (unix seconds) with key: "v1," then the base64 of the
// HMAC-SHA256 of "id.ts.body".
func Sign(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts)
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// attempt sends r to t once.
func (s *sender) attempt(ctx context.Context, t *Target, r *request) Result {
	start := s.clock.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The timeout runs on the sender's clock, so that tests can advance
	// it; a goroutine owned by this call waits for it.
	timer := s.clock.NewTimer(s.timeout)
	stop := make(chan struct{})
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		select {
		case <-timer.C():
			cancel(ErrTimeout)
		case <-stop:
		}
	}()
	defer func() {
		timer.Stop()
		close(stop)
		<-waited
	}()
	// A request that cannot be made or carry its headers fails before it
	// reaches the network, because of what it holds: that is no outage,
	// and trying it again can never succeed. It is refused (given up),
	// not tried again, so that it cannot hold its target down.
	for k, v := range r.header {
		if !httpguts.ValidHeaderFieldValue(v) {
			return Result{Outcome: OutcomeRefused, Err: fmt.Errorf("the notification's %s header cannot be sent (a character no HTTP header may hold)", k)}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(r.body))
	if err != nil {
		return Result{Outcome: OutcomeRefused, Err: fmt.Errorf("make the request: %w", err)}
	}
	req.Header.Set("Content-Type", r.contentType)
	req.Header.Set("User-Agent", "bcpgw-notify")
	req.Header.Set("Idempotency-Key", r.id)
	req.Header.Set("webhook-id", r.id)
	ts := start.Unix()
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	if t.Signed() {
		req.Header.Set("webhook-signature", Sign(t.secret, r.id, ts, r.body))
	}
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrTimeout) {
			err = fmt.Errorf("%w (%s)", ErrTimeout, s.timeout)
		} else {
			err = errors.Unwrap(err) // drop the *url.Error's method and URL: the URL may be a secret
			if err == nil {
				err = errors.New("request failed")
			}
		}
		return Result{Outcome: OutcomeRetry, Err: err, Duration: s.clock.Now().Sub(start)}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxKeptBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainedBody))
	return Result{Outcome: classify(resp.StatusCode), Status: resp.StatusCode, Body: body, Duration: s.clock.Now().Sub(start)}
}
