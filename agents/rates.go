package agents

import (
	"fmt"
	"strings"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
)

// Rate limits how many queries and pushes of one category a channel
// carries: at most Limit in any Window. A zero Limit denies the category.
// Rates come from TriOnyx definitions (--compat trionyx, the rates key of
// a channel); bcpgw's own definitions have none.
type Rate struct {
	Limit  int
	Window time.Duration
}

// Denied reports whether the rate allows nothing.
func (r Rate) Denied() bool { return r.Limit <= 0 }

// String writes the rate as TriOnyx does: "20/hour", "1/second", or
// "denied".
func (r Rate) String() string {
	if r.Denied() {
		return "denied"
	}
	switch r.Window {
	case time.Second:
		return fmt.Sprintf("%d/second", r.Limit)
	case time.Minute:
		return fmt.Sprintf("%d/minute", r.Limit)
	case time.Hour:
		return fmt.Sprintf("%d/hour", r.Limit)
	}
	return fmt.Sprintf("%d per %s", r.Limit, ShortDuration(r.Window))
}

// ShortDuration writes d as definitions do, without its zero minutes and
// seconds: "24h", "1h30m", "1m30s" rather than "24h0m0s".
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Rates are one side's limits on a channel, by category. The gateway
// counts a channel's queries and pushes of each category together and
// admits one only when both sides' rates allow it (see gateway's rate
// limiter).
type Rates struct {
	Cat1, Cat2, Cat3 Rate
}

// For returns the rate of category c; an invalid category is denied.
func (r *Rates) For(c bcp.Category) Rate {
	switch c {
	case bcp.Cat1:
		return r.Cat1
	case bcp.Cat2:
		return r.Cat2
	case bcp.Cat3:
		return r.Cat3
	}
	return Rate{}
}

// MaxCategory is the highest category the rates do not deny (0 when they
// deny all): what TriOnyx derives a channel's max_category from.
func (r *Rates) MaxCategory() bcp.Category {
	switch {
	case !r.Cat3.Denied():
		return bcp.Cat3
	case !r.Cat2.Denied():
		return bcp.Cat2
	case !r.Cat1.Denied():
		return bcp.Cat1
	}
	return 0
}

// MaxRateLimit bounds a rate's count: the gateway remembers the time of
// each message admitted within the window, so a limit is also memory.
const MaxRateLimit = 100_000

// Unlimited limits, for TriOnyx channels, which have no bit budgets and
// no query counters (their rates limit them instead). UnlimitedBudget is
// exact in a float64, so budget arithmetic stays exact.
const (
	UnlimitedBudget  int64 = 1 << 53
	UnlimitedQueries       = 1<<31 - 1
)
