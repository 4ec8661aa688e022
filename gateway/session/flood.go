package session

import (
	"fmt"
	"time"

	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/runtime"
)

// Flood control: what one runtime may write on stdout.
//
// The limit is a token bucket per session (FloodRate lines a second,
// bursts of FloodBurst; an agent's flood_limit overrides both). Lines the
// gateway asked for take no token: the result of the turn in flight, and
// the first bcp_response of a Reader to the query that is its turn in
// flight. The gateway sets the pace of those (a Controller with a backlog
// gets a delivery as soon as it answers the last), so counting them would
// punish a runtime for keeping the gateway's own pace. Nothing else is
// free: a result with no turn in flight, a second answer to a query, and
// an answer after its turn has ended all take a token, so a runtime
// cannot flood for free by writing results or answers nobody asked for.
//
// A runtime over the limit is slowed first: its stdout is not read for
// floodPause, during which its pipe fills and its writes block (the
// kernel's backpressure, costing the gateway nothing); then reading
// resumes with the tokens the pause refilled. A throttle episode is a run
// of pauses less than floodQuiet apart; each episode is one
// session_throttled event (counted in bcpgw_session_throttles_total) and
// one warning in the log, not one per line.
//
// A runtime is stopped for flooding only when an episode has lasted
// FloodStopAfter (default 30s) without a single line the gateway asked
// for. A runtime kept at the limit is read at the limit, which is the load
// the limit allows anyway; one that still answers the turns it is given
// is slowed for as long as it floods but never stopped, while one that
// floods and does nothing it was asked to (a Reader spamming with no
// turn, a Controller stuck in a turn writing lines) is ended.
const (
	// floodPause is how long a throttled runtime's stdout is left unread.
	floodPause = 250 * time.Millisecond
	// floodQuiet ends a throttle episode: a pause that starts more than
	// this long after the last one ended starts a new episode.
	floodQuiet = 2 * time.Second
)

// floodState is a session's flood control; the run goroutine owns it.
type floodState struct {
	bucket *bucket
	// pause fires when a throttled runtime's stdout is to be read again;
	// nil while it is being read.
	pause clock.Timer
	// episode is when the current throttle episode began (zero: none
	// yet); resumed when its last pause ended.
	episode, resumed time.Time
	// pauses counts the pauses of the current episode.
	pauses int
	// asked is when the runtime last wrote a line the gateway asked for.
	asked time.Time
	// answered is set once the query in flight has had its first answer.
	answered bool
	// exited is set once the runtime's process is known to have exited:
	// what it left in its pipe is read at once, not throttled, so that
	// its end is seen without delay.
	exited bool
}

// floodLimits are a session's flood limits: the agent's flood_limit, else
// the config's (which defaults to DefaultFloodRate and DefaultFloodBurst).
func (s *Session) floodLimits() (rate float64, burst int) {
	rate, burst = s.cfg.FloodRate, s.cfg.FloodBurst
	if n := s.cfg.Def.FloodLimit.LinesPerSecond; n > 0 {
		rate = float64(n)
	}
	if n := s.cfg.Def.FloodLimit.Burst; n > 0 {
		burst = n
	}
	return rate, burst
}

func (s *Session) newFloodState() floodState {
	rate, burst := s.floodLimits()
	return floodState{bucket: newBucket(s.cfg.Clock, rate, burst)}
}

// reading reports whether run reads the runtime's stdout now: not during a
// pause, except once the runtime is killed (what is left is drained, not
// handled, so that its exit is seen).
func (l *loop) reading() bool {
	return l.flood.pause == nil || l.phase == killed
}

// wasAsked reports whether ev is a line the gateway asked for, and so takes
// no token: the result of the turn in flight, or the first answer to the
// query in flight with its query_id. Only the run goroutine calls it.
func (l *loop) wasAsked(ev lineEvent) bool {
	if ev.err != nil || !l.ready || l.inFlight == nil {
		return false
	}
	switch ev.env.Type {
	case runtime.TypeResult:
		return true
	case runtime.TypeResponse:
		q, ok := l.inFlight.msg.(runtime.Query)
		if !ok || l.flood.answered {
			return false
		}
		var r struct {
			QueryID string `json:"query_id"`
		}
		if ev.env.Decode(&r) != nil || r.QueryID != q.QueryID {
			return false
		}
		l.flood.answered = true
		return true
	}
	return false
}

// countLine applies the flood limit to one line from stdout, before it is
// handled. It reports false if the runtime was stopped for flooding (the
// line is then dropped).
func (s *Session) countLine(l *loop, ev lineEvent) bool {
	f := &l.flood
	if l.wasAsked(ev) {
		f.asked = s.cfg.Clock.Now()
		return true
	}
	if f.bucket.take() || l.phase == killed || f.exited {
		return true
	}
	return s.throttle(l)
}

// goneWhileThrottled is the runtime's exit, watched only during a pause:
// a runtime that exits while throttled would otherwise have what it left
// in its pipe and in the reader's buffer (up to 128 KiB, thousands of
// lines) read at its limit, which delays its end by seconds.
func (s *Session) goneWhileThrottled(l *loop) <-chan struct{} {
	if l.flood.pause == nil {
		return nil
	}
	return s.gone
}

// throttle pauses reading the runtime's stdout for floodPause, or stops
// the runtime if its episode has lasted FloodStopAfter without a line the
// gateway asked for. It reports false if it stopped it.
func (s *Session) throttle(l *loop) bool {
	f := &l.flood
	now := s.cfg.Clock.Now()
	rate, burst := s.floodLimits()
	if f.episode.IsZero() || now.Sub(f.resumed) >= floodQuiet {
		f.episode, f.pauses = now, 0
		s.log.Warn("runtime writes more lines than its limit; slowing it", "lines_per_second", rate, "burst", burst)
		s.audit("session_throttled", "", fmt.Sprintf("more than %.0f lines a second on stdout (bursts of %d): reading it only at that rate; stopped if this lasts %s without a line the gateway asked for",
			rate, burst, s.cfg.FloodStopAfter), nil)
	}
	since := f.episode
	if f.asked.After(since) {
		since = f.asked
	}
	if now.Sub(since) >= s.cfg.FloodStopAfter {
		s.stopNow(l, fmt.Sprintf("flooding: more than %.0f lines a second on stdout for %s (%d pauses), none of them a result or answer the gateway asked for",
			rate, now.Sub(since).Round(time.Second), f.pauses))
		return false
	}
	f.pauses++
	// The line that found the bucket empty is handled all the same (it has
	// been read); the tokens the pause refills pay for it first, so that
	// the runtime is read at the limit and not one line a pause over.
	f.bucket.owe()
	f.pause = s.cfg.Clock.NewTimer(floodPause)
	return true
}

// owe spends a token the bucket does not have, right after take found it
// empty (take brought the tokens up to date).
func (b *bucket) owe() { b.tokens-- }

// resume ends a pause: stdout is read again.
func (s *Session) resume(l *loop) {
	f := &l.flood
	if f.pause == nil {
		return
	}
	f.pause.Stop()
	f.pause = nil
	f.resumed = s.cfg.Clock.Now()
}

// pauseC is the channel of the pause timer, nil when there is none.
func (f *floodState) pauseC() <-chan time.Time {
	if f.pause == nil {
		return nil
	}
	return f.pause.C()
}

// bucket is a token bucket: rate tokens a second, at most burst.
type bucket struct {
	clock  clock.Clock
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(c clock.Clock, rate float64, burst int) *bucket {
	return &bucket{clock: c, rate: rate, burst: float64(burst), tokens: float64(burst), last: c.Now()}
}

// take spends one token, reporting false when none is left.
func (b *bucket) take() bool {
	now := b.clock.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
