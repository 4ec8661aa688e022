package gateway

import (
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/gateway/store"
)

// Auditor receives audit events. Implementations must be safe for
// concurrent use and must not block for long.
type Auditor interface {
	Audit(store.Event)
}

// LogAuditor writes events to a logger: the log half of StoreAuditor.
type LogAuditor struct {
	Logger hclog.Logger
	// Quiet, if set, keeps a flood of refusals out of the log (see
	// logQuiet); every event is logged otherwise.
	Quiet *logQuiet
}

// chatty reports the events logged at debug level: there are several
// per turn.
func chatty(kind string) bool {
	switch kind {
	case "turn_done", "delivery_sent", "runtime_text", "runtime_tool_use", "runtime_tool_result":
		return true
	}
	return false
}

// Audit logs e at info level, warn for refusals, debug for the events
// that come several per turn.
func (a LogAuditor) Audit(e store.Event) {
	args := []any{"agent", e.Agent, "kind", e.Kind}
	if e.Peer != "" {
		args = append(args, "peer", e.Peer)
	}
	if e.Code != "" {
		args = append(args, "code", e.Code)
	}
	if e.Ref != "" {
		args = append(args, "ref", e.Ref)
	}
	if len(e.Payload) > 0 {
		args = append(args, "payload", logPayload(e.Payload))
	}
	level := hclog.Info
	switch {
	case e.Code != "":
		level = hclog.Warn
		if a.Quiet != nil {
			log, note := a.Quiet.admit(e)
			if note != "" {
				a.Logger.Warn(note)
			}
			if !log {
				return
			}
		}
	case chatty(e.Kind):
		level = hclog.Debug
	}
	// The detail goes in as a value, which the logger quotes when needed:
	// it can hold text a runtime chose, and must not forge log lines.
	a.Logger.Log(level, "event", append(args, "detail", e.Detail)...)
}

// Refusals are logged as warnings, and a flooding runtime can cause
// thousands a second (a Reader pushing past its Controller's backlog, say),
// and a stuck one the same warning every few seconds for hours (a budget
// exhausted): that many log lines cost the gateway more than the refusals
// themselves and bury everything else. So the log shows at most quietBurst refusals
// of one kind and code from one agent in quietWindow, says when it starts
// leaving them out, and sums up what it left out when the next one comes
// after the window. The store keeps every one (bcpgw events).
const (
	quietBurst  = 5
	quietWindow = 10 * time.Minute
)

// logQuiet counts refusals per agent, kind and code (all bounded sets:
// agent names come from the definitions, codes from bcp.Codes). It is
// safe for concurrent use.
type logQuiet struct {
	clock Clock
	mu    sync.Mutex
	seen  map[quietKey]*quietCount
}

type quietKey struct{ agent, kind, code string }

type quietCount struct {
	since          time.Time // the start of the window
	logged, missed int
}

func newLogQuiet(c Clock) *logQuiet {
	return &logQuiet{clock: c, seen: map[quietKey]*quietCount{}}
}

// admit says whether e is logged, and gives a line to log before it, if
// any: the start of leaving lines out, or what was left out.
func (q *logQuiet) admit(e store.Event) (log bool, note string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	k := quietKey{e.Agent, e.Kind, e.Code}
	c := q.seen[k]
	if c == nil || now.Sub(c.since) >= quietWindow {
		if c != nil && c.missed > 0 {
			note = fmt.Sprintf("%d more %s events (%s) of %s were not logged in the %s from %s; bcpgw events has them all",
				c.missed, e.Kind, e.Code, e.Agent, quietWindow, c.since.Format(time.TimeOnly))
		}
		q.seen[k] = &quietCount{since: now, logged: 1}
		return true, note
	}
	switch {
	case c.logged < quietBurst:
		c.logged++
		return true, ""
	case c.missed == 0:
		note = fmt.Sprintf("more %s events (%s) of %s than %d in %s: not logging them until %s (bcpgw events has them all)",
			e.Kind, e.Code, e.Agent, quietBurst, quietWindow, c.since.Add(quietWindow).Format(time.TimeOnly))
	}
	c.missed++
	return false, note
}

// maxLogPayload is how much of a refused payload the log shows: enough to
// recognize it; the event in the store keeps more (store.MaxPayload).
const maxLogPayload = 200

// logPayload is a payload as the log shows it, cut at maxLogPayload bytes
// (at a rune boundary) with its full size.
func logPayload(p []byte) string {
	if len(p) <= maxLogPayload {
		return string(p)
	}
	cut := maxLogPayload
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes; bcpgw events --json has it)", p[:cut], len(p))
}

// StoreAuditor records events durably in the store and logs them.
type StoreAuditor struct {
	Store *store.Store
	Log   LogAuditor
}

// Audit queues e for the store's next group commit, and logs it.
func (a StoreAuditor) Audit(e store.Event) {
	a.Store.Append(e)
	a.Log.Audit(e)
}
