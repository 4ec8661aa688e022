package gateway

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
)

// rateLink is a channel main (controller) - researcher (reader) with the
// given rates on each side (nil: none).
func rateLink(c, r *agents.Rates) *agents.Link {
	main := &agents.Definition{Name: "main"}
	researcher := &agents.Definition{Name: "researcher"}
	return &agents.Link{
		Controller: main, Reader: researcher,
		ControllerSide: &agents.Channel{Peer: "researcher", Role: agents.RoleController, MaxCategory: 3, Rates: c},
		ReaderSide:     &agents.Channel{Peer: "main", Role: agents.RoleReader, MaxCategory: 3, Rates: r},
	}
}

func TestRateLimiterSlidingWindow(t *testing.T) {
	var rl rateLimiter
	link := rateLink(&agents.Rates{Cat2: agents.Rate{Limit: 2, Window: time.Hour}}, nil)
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for i, at := range []time.Duration{0, 10 * time.Minute} {
		if _, e := rl.reserve(link, bcp.Cat2, t0.Add(at)); e != nil {
			t.Fatalf("message %d refused: %v", i, e)
		}
	}
	// Full until the first leaves the window (59m59s later still full).
	_, e := rl.reserve(link, bcp.Cat2, t0.Add(59*time.Minute+59*time.Second))
	if e == nil || e.Code != bcp.RateLimited {
		t.Fatalf("third message within the hour: %v, want rate_limited", e)
	}
	for _, want := range []string{"Cat-2 rate limit reached on the channel between 'main' and 'researcher'", "2/hour in main's rates", "allowed in 1s"} {
		if !strings.Contains(e.Detail, want) {
			t.Errorf("detail %q lacks %q", e.Detail, want)
		}
	}
	if _, e := rl.reserve(link, bcp.Cat2, t0.Add(time.Hour)); e != nil {
		t.Fatalf("once the first left the window: %v", e)
	}
	// The second (at 10m) is still in the window at 1h5m: full again.
	if _, e := rl.reserve(link, bcp.Cat2, t0.Add(65*time.Minute)); e == nil {
		t.Fatal("a sliding window admitted 3 in one hour")
	}
	// Other categories have their own count; no rates, no limit.
	if _, e := rl.reserve(rateLink(nil, nil), bcp.Cat2, t0); e != nil {
		t.Fatalf("a channel without rates: %v", e)
	}
}

func TestRateLimiterDeniedAndBothSides(t *testing.T) {
	var rl rateLimiter
	t0 := time.Now()
	link := rateLink(
		&agents.Rates{Cat1: agents.Rate{Limit: 5, Window: time.Minute}, Cat2: agents.Rate{Limit: 5, Window: time.Minute}},
		&agents.Rates{Cat1: agents.Rate{Limit: 1, Window: time.Minute}})
	_, e := rl.reserve(link, bcp.Cat2, t0)
	if e == nil || e.Code != bcp.CategoryNotAllowed || !strings.Contains(e.Detail, "rates.cat2 is 0 in researcher's definition") {
		t.Fatalf("a category the reader denies: %v", e)
	}
	if _, e := rl.reserve(link, bcp.Cat1, t0); e != nil {
		t.Fatal(e)
	}
	// The reader's 1/minute is the tighter one.
	if _, e := rl.reserve(link, bcp.Cat1, t0); e == nil || !strings.Contains(e.Detail, "1/minute in researcher's rates") {
		t.Fatalf("second Cat-1 within a minute: %v", e)
	}
	// A refused message was not counted on the controller's side either:
	// with the reader's limit lifted, the controller has 4 left.
	link.ReaderSide.Rates = nil
	for i := range 4 {
		if _, e := rl.reserve(link, bcp.Cat1, t0); e != nil {
			t.Fatalf("controller message %d: %v", i+2, e)
		}
	}
	if _, e := rl.reserve(link, bcp.Cat1, t0); e == nil {
		t.Fatal("sixth Cat-1 within a minute admitted")
	}
}

func TestRateLimiterRelease(t *testing.T) {
	var rl rateLimiter
	link := rateLink(&agents.Rates{Cat3: agents.Rate{Limit: 1, Window: time.Hour}}, &agents.Rates{Cat3: agents.Rate{Limit: 1, Window: time.Hour}})
	t0 := time.Now()
	slot, e := rl.reserve(link, bcp.Cat3, t0)
	if e != nil {
		t.Fatal(e)
	}
	if _, e := rl.reserve(link, bcp.Cat3, t0.Add(time.Second)); e == nil {
		t.Fatal("window of 1 admitted two")
	}
	slot.release() // refused by a later check: not counted
	if _, e := rl.reserve(link, bcp.Cat3, t0.Add(2*time.Second)); e != nil {
		t.Fatalf("after release: %v", e)
	}
	rateSlot{}.release() // the zero slot does nothing
}

// Concurrent reservations never admit more than the limit.
func TestRateLimiterConcurrent(t *testing.T) {
	var rl rateLimiter
	link := rateLink(&agents.Rates{Cat1: agents.Rate{Limit: 50, Window: time.Hour}}, nil)
	var (
		wg                 sync.WaitGroup
		mu                 sync.Mutex
		admitted, released int
	)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot, e := rl.reserve(link, bcp.Cat1, time.Now())
			if e != nil {
				return
			}
			mu.Lock()
			release := released < 10 // give the first ten back
			if release {
				released++
			} else {
				admitted++
			}
			mu.Unlock()
			if release {
				slot.release()
			}
		}()
	}
	wg.Wait()
	if admitted != 50 {
		t.Errorf("admitted %d, want exactly the limit 50", admitted)
	}
}
