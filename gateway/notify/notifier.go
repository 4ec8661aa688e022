package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
)

// Config configures a Notifier.
type Config struct {
	// Store is where the events are read and the cursors kept. Required.
	Store *store.Store
	// Targets is the loaded notify file; nil or empty sends nothing
	// (until Update gives some).
	Targets *Targets
	// Logger receives the notifier's log lines. Default: discard.
	Logger hclog.Logger
	// Clock times retries and each attempt's timeout. Default: the
	// system clock.
	Clock clock.Clock
	// Metrics, if set, records attempts, failures and lag.
	Metrics *Metrics
	// Decide is the command that opens the approval queue ("bcpgw
	// approvals --state DIR"), shown with approval items.
	Decide string
	// Client sends the requests. Default: NewClient().
	Client *http.Client
	// Timeout bounds one attempt. Default DefaultTimeout.
	Timeout time.Duration
}

// pageSize is how many events a target's loop reads at a time.
const pageSize = 256

// Notifier sends events to the targets of a notify file: one goroutine
// per target, each reading the event log from its cursor (kept in the
// store) and sending the events it wants in order, one at a time, each
// until it is answered 2xx or given up. Create it with New, start it with
// Run, change its targets with Update.
type Notifier struct {
	cfg    Config
	log    hclog.Logger
	sender *sender

	mu       sync.Mutex
	targets  *Targets
	loops    map[string]*loop
	ctx      context.Context // Run's, once it runs; nil before and after
	wg       sync.WaitGroup
	instance string
}

// loop is one target's goroutine.
type loop struct {
	t        *Target
	instance string // the state file's id, for idempotency keys
	cancel   context.CancelFunc
	done     chan struct{}
	state    *targetState
}

// New returns a notifier for cfg.
func New(cfg Config) (*Notifier, error) {
	if cfg.Store == nil {
		return nil, errors.New("notify: Config.Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Client == nil {
		cfg.Client = NewClient()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Targets == nil {
		cfg.Targets = &Targets{}
	}
	return &Notifier{
		cfg: cfg, log: cfg.Logger, targets: cfg.Targets, loops: map[string]*loop{},
		sender: &sender{client: cfg.Client, clock: cfg.Clock, timeout: cfg.Timeout},
	}, nil
}

// Run starts a loop per target and returns when ctx ends and every loop
// has stopped.
func (n *Notifier) Run(ctx context.Context) error {
	id, err := n.cfg.Store.NotifyInstance(ctx)
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n.mu.Lock()
	n.instance, n.ctx = id, ctx
	for _, t := range n.targets.List {
		n.start(t)
	}
	names, file := n.targets.Names(), n.targets.File
	n.mu.Unlock()
	if len(names) > 0 {
		n.log.Info("sending notifications", "targets", strings.Join(names, ", "), "file", file)
	}
	<-ctx.Done()
	n.mu.Lock()
	n.ctx = nil
	n.mu.Unlock()
	n.wg.Wait()
	return nil
}

// start runs t's loop; n.mu is held and n.ctx set.
func (n *Notifier) start(t *Target) {
	ctx, cancel := context.WithCancel(n.ctx)
	l := &loop{t: t, instance: n.instance, cancel: cancel, done: make(chan struct{}), state: n.cfg.Metrics.state(t.Name, n.cfg.Clock.Now)}
	n.loops[t.Name] = l
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer close(l.done)
		n.run(ctx, l)
	}()
}

// Update puts ts in force: loops of removed targets stop, those of
// changed ones start again (from their cursor), new ones start (from the
// newest event). It returns a summary of the changes ("" if none).
func (n *Notifier) Update(ts *Targets) string {
	if ts == nil {
		ts = &Targets{}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var added, removed, changed []string
	for _, old := range n.targets.List {
		if nt := ts.Target(old.Name); nt == nil {
			removed = append(removed, old.Name)
		} else if !nt.same(old) {
			changed = append(changed, old.Name)
		}
	}
	for _, t := range ts.List {
		if n.targets.Target(t.Name) == nil {
			added = append(added, t.Name)
		}
	}
	n.targets = ts
	if n.ctx != nil {
		for _, name := range slices.Concat(removed, changed) {
			if l := n.loops[name]; l != nil {
				l.cancel()
				<-l.done // loops never take n.mu
				delete(n.loops, name)
				if ts.Target(name) == nil {
					n.cfg.Metrics.forget(name, l.state)
				}
			}
		}
		for _, name := range slices.Concat(changed, added) {
			n.start(ts.Target(name))
		}
	}
	var parts []string
	for _, c := range []struct {
		what  string
		names []string
	}{{"added", added}, {"removed", removed}, {"changed", changed}} {
		if len(c.names) > 0 {
			parts = append(parts, c.what+" "+strings.Join(c.names, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// Targets returns the targets in force.
func (n *Notifier) Targets() *Targets {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.targets
}

// idFor is the idempotency key of the notification of event seq.
func idFor(instance string, seq int64) string {
	return fmt.Sprintf("bcpgw-%s-%d", instance, seq)
}

// run is a target's loop: it sends what the target wants, in seq order,
// from the target's cursor, until ctx ends.
func (n *Notifier) run(ctx context.Context, l *loop) {
	t, st := l.t, n.cfg.Store
	log := n.log.With("target", t.Name, "host", t.Host())
	retry := 0
	pause := func(err error) bool {
		retry++
		d := Backoff(retry)
		log.Error("reading the state file failed; trying again", "error", err, "in", d)
		return n.sleep(ctx, d)
	}
	var cur store.NotifyCursor
	for {
		var err error
		if cur, err = st.OpenNotifyCursor(ctx, t.Name, n.cfg.Clock.Now()); err == nil {
			break
		}
		if ctx.Err() != nil || !pause(err) {
			return
		}
	}
	if cur.Disabled() {
		if cur.URLSHA256 == t.URLHash() {
			l.state.disabled.Store(true)
			log.Warn("target disabled: its endpoint answered 410 Gone; change its url in the notify file to send to it again",
				"since", cur.DisabledAt.Format(time.RFC3339))
			<-ctx.Done()
			return
		}
		ev := store.Event{Time: n.cfg.Clock.Now(), Kind: KindEnabled, Ref: t.Name,
			Detail: fmt.Sprintf("target %s enabled again: its url changed since it answered 410 Gone; resuming after event %d", t.Name, cur.Seq)}
		if err := st.EnableNotifyTarget(ctx, t.Name, ev.Time, ev); err != nil {
			log.Error("could not enable the target again", "error", err)
			return
		}
		log.Info("target enabled again: its url changed", "after", cur.Seq)
	}
	seq := cur.Seq
	for {
		changed := st.EventsChanged()
		// Retention may have deleted events this target was not sent.
		pruned, err := st.EventsPrunedBefore(ctx)
		if err != nil {
			if ctx.Err() != nil || !pause(err) {
				return
			}
			continue
		}
		if pruned > seq+1 {
			ev := store.Event{Time: n.cfg.Clock.Now(), Kind: KindGap, Ref: t.Name,
				Detail: fmt.Sprintf("events %d to %d were deleted by retention before target %s was sent them; resuming at %d", seq+1, pruned-1, t.Name, pruned)}
			log.Warn("events were pruned before they were sent", "from", seq+1, "to", pruned-1)
			seq = pruned - 1
			st.AdvanceNotifyCursor(t.Name, seq, ev.Time, ev)
		}
		page, err := st.Events(ctx, seq, pageSize)
		if err != nil {
			if ctx.Err() != nil || !pause(err) {
				return
			}
			continue
		}
		retry = 0
		saved := seq
		for _, e := range page {
			if !t.Matches(e.Kind, e.Code, e.Ref) {
				seq = e.Seq
				continue
			}
			l.state.since.Store(e.Time.UnixNano())
			switch n.deliver(ctx, l, log, e) {
			case stopped:
				if seq > saved {
					st.AdvanceNotifyCursor(t.Name, seq, n.cfg.Clock.Now())
				}
				return
			case disabled:
				<-ctx.Done()
				return
			}
			seq, saved = e.Seq, e.Seq // deliver advanced the cursor
		}
		if seq > saved {
			st.AdvanceNotifyCursor(t.Name, seq, n.cfg.Clock.Now())
		}
		if len(page) == pageSize {
			continue
		}
		l.state.since.Store(0)
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// sleep waits d on the notifier's clock; false if ctx ended first.
func (n *Notifier) sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, n.cfg.Clock, d)
}

// verdict is how the delivery of one event ended.
type verdict int

const (
	done     verdict = iota // answered 2xx, or given up: the cursor moved past it
	disabled                // 410 Gone: the target is disabled
	stopped                 // ctx ended: the event is sent again next time
)

// message builds the notification of e: approval events carry their item
// while it waits.
func (n *Notifier) message(ctx context.Context, id string, e store.Event) *Message {
	var item *store.Approval
	if strings.HasPrefix(e.Kind, "approval_") && e.Ref != "" {
		if a, err := n.cfg.Store.Approval(ctx, e.Ref); err == nil {
			item = a
		}
	}
	return newMessage(id, e, item, n.cfg.Decide)
}

// deliver sends e to l's target until it is answered 2xx, refused (a 4xx
// that is not worth trying again), or the target is gone; it moves the
// cursor past e with the event that says how it went. After MaxAttempts
// failures the target is down (KindDown): e is tried every MaxBackoff,
// and nothing after it is sent until it goes through (KindUp).
func (n *Notifier) deliver(ctx context.Context, l *loop, log hclog.Logger, e store.Event) verdict {
	t, st := l.t, n.cfg.Store
	id := idFor(l.instance, e.Seq)
	about := fmt.Sprintf("event %d (%s)", e.Seq, e.Kind)
	req, err := render(t, n.message(ctx, id, e))
	if err != nil { // a message holds plain values only
		now := n.cfg.Clock.Now()
		n.cfg.Metrics.failed(t.Name)
		log.Error("cannot render a notification; giving it up", "seq", e.Seq, "error", err)
		st.AdvanceNotifyCursor(t.Name, e.Seq, now, store.Event{Time: now, Kind: KindFailed, Ref: t.Name,
			Detail: fmt.Sprintf("%s given up for %s: it cannot be rendered: %v", about, t.Name, err)})
		return done
	}
	for attempt := 1; ; attempt++ {
		r := n.sender.attempt(ctx, t, req)
		if ctx.Err() != nil {
			return stopped
		}
		n.cfg.Metrics.attempt(t.Name, r.Outcome)
		now := n.cfg.Clock.Now()
		switch r.Outcome {
		case OutcomeOK:
			n.cfg.Metrics.delivered(t.Name)
			events := n.up(l, log, e, attempt, about, now)
			log.Debug("notification sent", "seq", e.Seq, "kind", e.Kind, "status", r.Status, "attempts", attempt)
			st.AdvanceNotifyCursor(t.Name, e.Seq, now, append(events, store.Event{Time: now, Kind: KindSent, Ref: t.Name,
				Detail: fmt.Sprintf("%s sent to %s: %s after %d attempt(s), %s", about, t.Name, r, attempt, r.Duration.Round(time.Millisecond))})...)
			return done
		case OutcomeGone:
			l.state.down.Store(false) // answered: not down, gone
			l.state.disabled.Store(true)
			reason := fmt.Sprintf("%s answered %s to %s", t.Host(), r, about)
			log.Warn("target disabled: its endpoint answered 410 Gone; change its url in the notify file to send to it again", "seq", e.Seq)
			ev := store.Event{Time: now, Kind: KindDisabled, Ref: t.Name,
				Detail: fmt.Sprintf("target %s disabled: %s; nothing more is sent to it until its url changes", t.Name, reason)}
			if err := st.DisableNotifyTarget(ctx, t.Name, t.URLHash(), reason, now, ev); err != nil && ctx.Err() == nil {
				log.Error("could not record that the target is disabled", "error", err)
			}
			return disabled
		case OutcomeRefused:
			n.cfg.Metrics.failed(t.Name)
			log.Error("notification refused (by the endpoint, or unsendable); giving it up", "seq", e.Seq, "kind", e.Kind, "response", r.String(), "body", string(r.Body))
			st.AdvanceNotifyCursor(t.Name, e.Seq, now, append(n.up(l, log, e, attempt, about, now), store.Event{Time: now, Kind: KindFailed, Ref: t.Name,
				Detail: fmt.Sprintf("%s given up for %s: %s (not tried again)", about, t.Name, r)})...)
			return done
		}
		d := Backoff(attempt)
		if attempt == MaxAttempts {
			// MaxAttempts failures in a row (about 8.5 minutes) of an
			// error worth trying again: the endpoint is down, not the
			// notification wrong. Giving the event up would lose every
			// event of the outage; instead the target waits on this one,
			// tried every MaxBackoff, and catches up from its cursor once
			// its endpoint answers (within the retention window).
			l.state.down.Store(true)
			log.Error("target down: its endpoint failed every attempt; trying it again every "+MaxBackoff.String(),
				"seq", e.Seq, "kind", e.Kind, "attempts", attempt, "last", r.String())
			st.Append(store.Event{Time: now, Kind: KindDown, Ref: t.Name,
				Detail: fmt.Sprintf("target %s down: %s failed %d attempts, last: %s; it is tried every %s and catches up from its cursor once it answers",
					t.Name, about, attempt, r, MaxBackoff)})
		}
		log.Warn("notification failed; trying again", "seq", e.Seq, "attempt", attempt, "error", r.String(), "in", d)
		if !n.sleep(ctx, d) {
			return stopped
		}
	}
}

// up returns the KindUp event of l's target if it was down: its endpoint
// has answered (the attempt-th try of e), and it catches up from its
// cursor. It returns nothing if the target was not down.
func (n *Notifier) up(l *loop, log hclog.Logger, e store.Event, attempt int, about string, now time.Time) []store.Event {
	if !l.state.down.Swap(false) {
		return nil
	}
	log.Info("target up again: catching up from its cursor", "seq", e.Seq, "attempts", attempt)
	return []store.Event{{Time: now, Kind: KindUp, Ref: l.t.Name,
		Detail: fmt.Sprintf("target %s up again after %d attempts of %s; catching up from its cursor", l.t.Name, attempt, about)}}
}

// Test sends a sample notification to the target named name, once (no
// retries, and nothing recorded: a 410 does not disable it), and returns
// what the endpoint answered.
func (n *Notifier) Test(ctx context.Context, name string) (*Target, Result, error) {
	t := n.Targets().Target(name)
	if t == nil {
		return nil, Result{}, fmt.Errorf("no notify target %q (targets: %s)", name, strings.Join(n.Targets().Names(), ", "))
	}
	instance, err := n.cfg.Store.NotifyInstance(ctx)
	if err != nil {
		return t, Result{}, err
	}
	return t, SendTest(ctx, t, TestOptions{Client: n.cfg.Client, Clock: n.cfg.Clock, Timeout: n.cfg.Timeout, Instance: instance, Decide: n.cfg.Decide}), nil
}

// TestOptions configure SendTest; zero values are the defaults.
type TestOptions struct {
	Client   *http.Client
	Clock    clock.Clock
	Timeout  time.Duration
	Instance string // the state file's id, for the key; default "local"
	Decide   string
}

// SendTest sends t a sample event (kind notify_test, marked test), once.
func SendTest(ctx context.Context, t *Target, o TestOptions) Result {
	if o.Client == nil {
		o.Client = NewClient()
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Instance == "" {
		o.Instance = "local"
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	id := fmt.Sprintf("bcpgw-%s-test-%s", o.Instance, hex.EncodeToString(nonce[:]))
	m := newMessage(id, store.Event{Time: o.Clock.Now(), Kind: KindTest,
		Detail: "A test notification: the target " + t.Name + " is reachable and its format renders like this."}, nil, "")
	m.Test = true
	req, err := render(t, m)
	if err != nil {
		return Result{Outcome: OutcomeRefused, Err: err}
	}
	s := &sender{client: o.Client, clock: o.Clock, timeout: o.Timeout}
	return s.attempt(ctx, t, req)
}
