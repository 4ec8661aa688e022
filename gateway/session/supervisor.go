package session

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/runtime"
)

// Restart policy (PROTOCOL.md section 5).
const (
	BackoffInitial = time.Second
	BackoffMax     = 60 * time.Second
	// An agent that crashes more than CrashLimit times within CrashWindow
	// is marked failed (a turn timeout counts as a crash: it is the
	// runtime's failure too).
	CrashLimit  = 5
	CrashWindow = 60 * time.Second
	// A failed agent is tried again on its own after a cool-down, so that
	// a runtime that failed for a passing reason (a model API down, a
	// full disk) does not wait for an operator while its backlog grows:
	// FailedRetryInitial, doubling with each failure in a row, at most
	// FailedRetryMax. An agent that has gone HealthyAfter since its last
	// retry without failing starts over at FailedRetryInitial. An
	// operator's start (Reset) tries it at once.
	FailedRetryInitial = 5 * time.Minute
	FailedRetryMax     = time.Hour
	HealthyAfter       = time.Hour
)

// AgentState is where an agent is in its lifecycle.
type AgentState string

// The agent states.
const (
	StateStopped  AgentState = "stopped"  // no session; one is started on demand
	StateStarting AgentState = "starting" // spawned, waiting for ready
	StateRunning  AgentState = "running"
	StateBackoff  AgentState = "backoff" // crashed; restarting after a delay
	StateFailed   AgentState = "failed"  // crashed too often; retried after a cool-down
)

// ErrNoAgent is returned for an agent name the definitions do not have.
var ErrNoAgent = errors.New("no such agent")

// ErrAgentFailed is returned for work sent to an agent in the failed state:
// it crashed too often, or cannot start at all (its sandbox cannot be
// built); bcpgw agents shows why.
var ErrAgentFailed = errors.New("agent failed: it is retried after a cool-down, or at once by an operator's start (bcpgw agents shows why)")

// SupervisorConfig configures a Supervisor.
type SupervisorConfig struct {
	Set    *agents.Set
	Logger hclog.Logger
	// Owner receives the events and BCP messages of every session, and is
	// told of each start, crash and restart. Default: one that logs the
	// events and refuses the messages as not routed.
	Owner SupervisorOwner
	Clock clock.Clock
	// Session is the template for every session; Def, Subscriptions and
	// the shared fields above are filled in per agent.
	Session Config
}

// Supervisor keeps one session per agent: it starts sessions on demand
// and at boot (autostart), restarts crashed ones with exponential backoff
// (1s doubling to 60s), marks an agent failed after more than five
// crashes in a minute, and retries a failed agent after a cool-down (5
// minutes doubling to an hour). One goroutine (Run) owns all agent
// state; the methods send it requests.
type Supervisor struct {
	cfg    SupervisorConfig
	log    hclog.Logger
	events chan svMsg
	wg     sync.WaitGroup // session watchers and starters
	// set is the definitions in force; Run owns it (Reload replaces it).
	set *agents.Set
}

// agent is the supervisor's record of one agent; owned by Run.
type agent struct {
	def      *agents.Definition
	state    AgentState
	sess     *Session
	crashes  []time.Time
	attempt  int           // consecutive failed starts or crashes
	waiters  []chan result // Ensure calls waiting for a session
	timerGen int           // invalidates stale backoff timers
	held     bool          // stopped by an operator: not restarted until asked for
	stopping *Session      // the session an operator's stop is ending; not handed out
	// stopOnStart, when set, is the reason of an operator's stop that came
	// while the session was starting: it is stopped as soon as it is up.
	stopOnStart string
	lastErr     error // why the last session ended or failed to start
	// restart, when set, is why the agent's session is being replaced
	// after a reload: once the current session (or the one starting) has
	// ended, a new one is started with the new definition.
	restart string
	// removed: the agent is gone from the definitions. Its record lives
	// until its last session has ended.
	removed bool
	// announced is what the running session was last told of its
	// subscriptions.
	announced []runtime.ActiveSubscription
	// failures counts the times in a row the agent was marked failed: its
	// cool-down doubles with each. retryAt is when a failed agent is
	// tried again (zero when not failed); retriedAt when it last was.
	failures  int
	retryAt   time.Time
	retriedAt time.Time
}

// AgentStatus is what the supervisor knows of one agent.
type AgentStatus struct {
	Name    string
	State   AgentState
	Session string    // the running session's ID; empty if none
	PID     int       // the running session's process; 0 if none
	Since   time.Time // when the running session started
	Crashes int       // crashes within the last CrashWindow
	Held    bool      // stopped by an operator
	LastErr string    // why the last session ended, if it crashed
	// RetryAt is when a failed agent is tried again on its own; zero
	// unless failed.
	RetryAt time.Time
}

type result struct {
	sess *Session
	err  error
}

// svMsg is what Run handles: a request from another goroutine (with a
// reply channel) or an event from one of the supervisor's own. The
// method seals the set: only the types below are messages.
type svMsg interface{ svMsg() }

// Supervisor requests and events, handled by Run.
type (
	ensureReq struct {
		name  string
		reply chan result
	}
	stateReq struct{ reply chan []AgentStatus }
	resetReq struct {
		name  string
		reply chan error
	}
	stopReq struct {
		name   string
		reason string
		reply  chan error
	}
	reloadReq struct {
		set   *agents.Set
		reply chan Changes
	}
	startedEv struct {
		name string
		res  result
	}
	endedEv struct {
		name string
		sess *Session
	}
	retryEv struct {
		name string
		gen  int
	}
	// failedRetryEv is a failed agent's cool-down ending.
	failedRetryEv struct {
		name string
		gen  int
	}
)

func (ensureReq) svMsg()     {}
func (stateReq) svMsg()      {}
func (resetReq) svMsg()      {}
func (stopReq) svMsg()       {}
func (reloadReq) svMsg()     {}
func (startedEv) svMsg()     {}
func (endedEv) svMsg()       {}
func (retryEv) svMsg()       {}
func (failedRetryEv) svMsg() {}

// NewSupervisor returns a supervisor; call Run to start it.
func NewSupervisor(cfg SupervisorConfig) *Supervisor {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Owner == nil {
		cfg.Owner = logOwner{log: cfg.Logger}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	return &Supervisor{cfg: cfg, log: cfg.Logger, events: make(chan svMsg), set: cfg.Set}
}

// Run starts the autostart agents and supervises until ctx ends, then
// stops every session gracefully (each within its grace periods) and
// returns.
func (sv *Supervisor) Run(ctx context.Context) error {
	agentsByName := map[string]*agent{}
	for _, d := range sv.set.Agents {
		agentsByName[d.Name] = &agent{def: d, state: StateStopped}
	}
	for _, d := range sv.set.Agents {
		if d.Autostart {
			sv.start(ctx, agentsByName[d.Name])
		}
	}
	for {
		select {
		case <-ctx.Done():
			sv.shutdown(agentsByName)
			return nil
		case ev := <-sv.events:
			sv.handle(ctx, agentsByName, ev)
		}
	}
}

// handle dispatches one request or event to its handler. Only Run's
// goroutine calls it: the handlers own the agents' state.
func (sv *Supervisor) handle(ctx context.Context, all map[string]*agent, ev svMsg) {
	switch ev := ev.(type) {
	case ensureReq:
		sv.onEnsure(ctx, all, ev)
	case stateReq:
		sv.onState(ctx, all, ev)
	case reloadReq:
		sv.onReload(ctx, all, ev)
	case stopReq:
		sv.onStop(ctx, all, ev)
	case resetReq:
		sv.onReset(ctx, all, ev)
	case startedEv:
		sv.onStarted(ctx, all, ev)
	case endedEv:
		sv.onEnded(ctx, all, ev)
	case retryEv:
		sv.onRetry(ctx, all, ev)
	case failedRetryEv:
		sv.onFailedRetry(ctx, all, ev)
	}
}

// onEnsure answers with the agent's running session, or starts one and
// answers once it is up.
func (sv *Supervisor) onEnsure(ctx context.Context, all map[string]*agent, ev ensureReq) {
	a := all[ev.name]
	switch {
	case a == nil || a.removed:
		ev.reply <- result{err: fmt.Errorf("no agent named %q: %w", ev.name, ErrNoAgent)}
	case a.state == StateFailed:
		ev.reply <- result{err: failedError(a)}
	case a.state == StateRunning && !a.sess.Ended() && a.sess != a.stopping:
		ev.reply <- result{sess: a.sess}
	default:
		a.waiters = append(a.waiters, ev.reply)
		if a.state == StateStopped {
			sv.start(ctx, a)
		}
	}
}

// onState answers with every agent's status.
func (sv *Supervisor) onState(ctx context.Context, all map[string]*agent, ev stateReq) {
	ev.reply <- sv.statuses(all)
}

// onReload brings in a new set of definitions (supervisor_reload.go).
func (sv *Supervisor) onReload(ctx context.Context, all map[string]*agent, ev reloadReq) {
	ev.reply <- sv.reload(ctx, all, ev.set)
}

// onStop stops an agent's session on an operator's request and holds the
// agent.
func (sv *Supervisor) onStop(ctx context.Context, all map[string]*agent, ev stopReq) {
	a := all[ev.name]
	if a == nil || a.removed {
		ev.reply <- fmt.Errorf("no agent named %q: %w", ev.name, ErrNoAgent)
		return
	}
	a.held = true
	switch {
	case a.state == StateBackoff && len(a.waiters) == 0:
		a.timerGen++ // the pending restart is off
		a.state = StateStopped
		sv.audit(a, "agent_stopped", ev.reason)
	case a.state == StateStarting:
		a.stopOnStart = ev.reason // stopped once its start completes
	}
	if a.sess != nil && a.sess != a.stopping {
		sv.stopSession(ctx, a, ev.reason)
	}
	ev.reply <- nil
}

// onReset releases a held agent and clears a failed state.
func (sv *Supervisor) onReset(ctx context.Context, all map[string]*agent, ev resetReq) {
	a := all[ev.name]
	if a == nil || a.removed {
		ev.reply <- fmt.Errorf("no agent named %q: %w", ev.name, ErrNoAgent)
		return
	}
	a.held, a.stopOnStart = false, ""
	if a.state == StateFailed {
		clearFailed(a)
		sv.audit(a, "agent_reset", "operator restart")
		if a.def.Autostart {
			sv.start(ctx, a)
		}
	}
	ev.reply <- nil
}

// onStarted takes in the outcome of a start: the session, or the
// failure.
func (sv *Supervisor) onStarted(ctx context.Context, all map[string]*agent, ev startedEv) {
	a := all[ev.name]
	if ev.res.err != nil {
		if a.removed {
			delete(all, ev.name)
			return
		}
		// A restart asked for during this start is done: the next
		// start uses the definition in force.
		a.lastErr, a.stopOnStart, a.restart = ev.res.err, "", ""
		sv.log.Error("agent start failed", "agent", a.def.Name, "error", ev.res.err)
		sv.crashed(ctx, a, ev.res.err)
		return
	}
	a.sess, a.state = ev.res.sess, StateRunning
	a.announced = ev.res.sess.cfg.Subscriptions
	sv.cfg.Owner.Started(a.sess)
	// Started under definitions since replaced: bring its
	// subscriptions up to date now, and replace it once idle.
	sv.announce(a)
	handOut := true
	switch why := a.stopOnStart; {
	case a.restart != "" || a.removed:
		// Waiters get the next session, started once this one ends.
		sv.retire(a)
		handOut = false
	case why != "" && len(a.waiters) == 0:
		sv.stopSession(ctx, a, why)
	}
	a.stopOnStart = ""
	if handOut {
		for _, w := range a.waiters {
			w <- result{sess: a.sess}
		}
		a.waiters = nil
	}
	sv.wg.Add(1)
	go func(name string, s *Session) {
		defer sv.wg.Done()
		<-s.Done()
		select {
		case sv.events <- endedEv{name: name, sess: s}:
		case <-ctx.Done():
		}
	}(a.def.Name, a.sess)
}

// onEnded handles the end of a session: stopped, retired or crashed.
func (sv *Supervisor) onEnded(ctx context.Context, all map[string]*agent, ev endedEv) {
	a := all[ev.name]
	if a.sess != ev.sess {
		return
	}
	a.sess, a.stopping, a.announced = nil, nil, nil
	if a.removed {
		delete(all, ev.name)
		return
	}
	restart := a.restart != "" && !a.held
	a.restart = ""
	if err := ev.sess.Err(); err != nil {
		a.lastErr = err
		sv.crashed(ctx, a, err)
		return
	}
	a.state, a.attempt = StateStopped, 0
	if (a.def.Autostart && !a.held) || len(a.waiters) > 0 || restart {
		if restart {
			sv.cfg.Owner.Restarted(a.def.Name, "reload")
		}
		sv.start(ctx, a)
	}
}

// onRetry starts an agent whose backoff has passed.
func (sv *Supervisor) onRetry(ctx context.Context, all map[string]*agent, ev retryEv) {
	a := all[ev.name]
	if a == nil || a.removed {
		return
	}
	if a.state == StateBackoff && ev.gen == a.timerGen && (!a.held || len(a.waiters) > 0) {
		sv.cfg.Owner.Restarted(a.def.Name, "crash")
		sv.start(ctx, a)
	}
}

// onFailedRetry ends a failed agent's cool-down.
func (sv *Supervisor) onFailedRetry(ctx context.Context, all map[string]*agent, ev failedRetryEv) {
	a := all[ev.name]
	if a == nil || a.removed || a.state != StateFailed || ev.gen != a.timerGen {
		return // started by an operator or a reload meanwhile
	}
	// As an operator's start would, but the failures in a row are
	// kept: failing again means a longer cool-down.
	a.state, a.crashes, a.attempt, a.retryAt = StateStopped, nil, 0, time.Time{}
	a.retriedAt = sv.cfg.Clock.Now()
	sv.audit(a, "agent_retry", fmt.Sprintf("trying again after a cool-down of %s (failed %d time(s) in a row)", failedCoolDown(a.failures-1), a.failures))
	// Started now if kept running; else by the first work sent to it
	// (a waiting delivery is retried within a minute).
	if a.def.Autostart && !a.held {
		sv.cfg.Owner.Restarted(a.def.Name, "retry")
		sv.start(ctx, a)
	}
}

// clearFailed takes a failed agent back to stopped for a fresh start (an
// operator's, or a new definition's): its crashes and failures are
// forgotten, and its pending retry is off.
func clearFailed(a *agent) {
	a.state, a.crashes, a.attempt = StateStopped, nil, 0
	a.failures, a.retryAt, a.retriedAt = 0, time.Time{}, time.Time{}
	a.timerGen++
}

// stopSession stops a's session for an operator, in the background. The
// session is marked stopping so that it is not handed out meanwhile.
func (sv *Supervisor) stopSession(ctx context.Context, a *agent, why string) {
	s := a.sess
	a.stopping = s
	sv.audit(a, "agent_stopped", why)
	sv.wg.Add(1)
	go func() {
		defer sv.wg.Done()
		_ = s.Stop(ctx, why)
	}()
}

// start spawns a session in the background; the result comes back as a
// startedEv.
func (sv *Supervisor) start(ctx context.Context, a *agent) {
	a.state = StateStarting
	cfg := sv.cfg.Session
	cfg.Def = a.def
	cfg.Logger, cfg.Owner, cfg.Clock = sv.cfg.Logger, sv.cfg.Owner, sv.cfg.Clock
	cfg.Subscriptions = announcements(sv.set, a.def.Name)
	if a.def.Autostart {
		// Kept running: an idle stop would only be followed by a restart.
		d := *a.def
		d.IdleTimeout = 0
		cfg.Def = &d
	}
	// The goroutine reads only what is copied here: a (its def above
	// all) belongs to Run, and a reload may replace a.def meanwhile.
	name := a.def.Name
	sv.wg.Add(1)
	go func() {
		defer sv.wg.Done()
		s, err := Start(ctx, cfg)
		select {
		case sv.events <- startedEv{name: name, res: result{sess: s, err: err}}:
		case <-ctx.Done():
			if s != nil {
				s.Kill()
			}
		}
	}()
}

// crashed records a crash or failed start and decides: back off and
// retry (if the agent is kept running or has work waiting), or fail.
func (sv *Supervisor) crashed(ctx context.Context, a *agent, err error) {
	sv.cfg.Owner.Crashed(a.def.Name)
	now := sv.cfg.Clock.Now()
	a.crashes = append(a.crashes, now)
	for len(a.crashes) > 0 && now.Sub(a.crashes[0]) > CrashWindow {
		a.crashes = a.crashes[1:]
	}
	// A start that retrying cannot fix (an unset ${VAR}, a runtime
	// program missing or not executable, a sandbox the kernel cannot
	// give, a runtime not visible inside it) fails the agent at once.
	var perm interface{ Permanent() bool }
	permanent := errors.As(err, &perm) && perm.Permanent()
	if len(a.crashes) > CrashLimit || permanent {
		a.state = StateFailed
		// Even a start that "retrying cannot fix" is retried after the
		// cool-down: its cause (a kernel setting, a missing file) may be
		// fixed meanwhile, and a try an hour costs nothing.
		if !a.retriedAt.IsZero() && now.Sub(a.retriedAt) >= HealthyAfter {
			a.failures = 0
		}
		cool := failedCoolDown(a.failures)
		a.failures++
		a.retryAt = now.Add(cool)
		a.timerGen++
		retry := fmt.Sprintf("; retrying at %s (in %s)", a.retryAt.Format("15:04:05"), cool)
		if permanent {
			sv.audit(a, "agent_failed", fmt.Sprintf("cannot start: %v%s", err, retry))
		} else {
			sv.audit(a, "agent_failed", fmt.Sprintf("%d crashes within %s; last: %v%s", len(a.crashes), CrashWindow, err, retry))
		}
		for _, w := range a.waiters {
			w <- result{err: failedError(a)}
		}
		a.waiters = nil
		sv.after(ctx, cool, failedRetryEv{name: a.def.Name, gen: a.timerGen})
		return
	}
	if (!a.def.Autostart || a.held) && len(a.waiters) == 0 {
		a.state = StateStopped // started again on demand
		return
	}
	delay := Backoff(a.attempt)
	a.attempt++
	a.state = StateBackoff
	a.timerGen++
	gen := a.timerGen
	sv.log.Warn("restarting agent after backoff", "agent", a.def.Name, "delay", delay, "error", err)
	sv.after(ctx, delay, retryEv{name: a.def.Name, gen: gen})
}

// failedError is what work sent to a failed agent gets: ErrAgentFailed,
// and why the agent failed, so that whoever sent it (an operator's start
// or prompt) reads the cause without looking it up.
func failedError(a *agent) error {
	if a.lastErr == nil {
		return fmt.Errorf("%s: %w", a.def.Name, ErrAgentFailed)
	}
	return fmt.Errorf("%s: %w; last error: %v", a.def.Name, ErrAgentFailed, a.lastErr)
}

// after sends ev to Run once d has passed on the supervisor's clock,
// unless ctx ends first. The goroutine is the supervisor's (sv.wg). A
// timer overtaken by events is not stopped: its event carries the
// agent's timer generation and is ignored when stale.
func (sv *Supervisor) after(ctx context.Context, d time.Duration, ev svMsg) {
	t := sv.cfg.Clock.NewTimer(d)
	sv.wg.Add(1)
	go func() {
		defer sv.wg.Done()
		select {
		case <-t.C():
			select {
			case sv.events <- ev:
			case <-ctx.Done():
			}
		case <-ctx.Done():
			t.Stop()
		}
	}()
}

// failedCoolDown is how long a failed agent waits before it is tried
// again, after its failure n in a row (0-based): 5 minutes doubling,
// capped at an hour.
func failedCoolDown(n int) time.Duration {
	d := FailedRetryInitial
	for i := 0; i < n && d < FailedRetryMax; i++ {
		d *= 2
	}
	return min(d, FailedRetryMax)
}

// Backoff is the delay before restart attempt n (0-based): 1s doubling,
// capped at 60s.
func Backoff(n int) time.Duration {
	d := BackoffInitial
	for i := 0; i < n && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

func (sv *Supervisor) audit(a *agent, kind, detail string) {
	sv.cfg.Owner.Audit(store.Event{Time: sv.cfg.Clock.Now(), Agent: a.def.Name, Kind: kind, Detail: detail})
}

// shutdown stops every running session concurrently and waits for them
// and for every goroutine the supervisor started.
func (sv *Supervisor) shutdown(all map[string]*agent) {
	var wg sync.WaitGroup
	for _, a := range all {
		for _, w := range a.waiters {
			w <- result{err: ErrSessionClosed}
		}
		if a.sess == nil {
			continue
		}
		wg.Add(1)
		go func(s *Session) {
			defer wg.Done()
			_ = s.Stop(context.Background(), "gateway shutting down")
		}(a.sess)
	}
	wg.Wait()
	sv.wg.Wait()
}

// request sends a request to Run, or fails when ctx ends first.
func (sv *Supervisor) request(ctx context.Context, req svMsg) error {
	select {
	case sv.events <- req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ask sends Run the request newReq builds around a fresh reply channel,
// and returns the reply, or ctx's error if it ends first.
func ask[T any](ctx context.Context, sv *Supervisor, newReq func(reply chan T) svMsg) (T, error) {
	var zero T
	reply := make(chan T, 1)
	if err := sv.request(ctx, newReq(reply)); err != nil {
		return zero, err
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// Ensure returns the agent's running session, starting one if needed.
func (sv *Supervisor) Ensure(ctx context.Context, name string) (*Session, error) {
	r, err := ask(ctx, sv, func(reply chan result) svMsg { return ensureReq{name: name, reply: reply} })
	if err != nil {
		return nil, err
	}
	return r.sess, r.err
}

// Prompt sends a prompt to an agent, starting its session if needed.
func (sv *Supervisor) Prompt(ctx context.Context, name, content string, metadata map[string]any) error {
	s, err := sv.Ensure(ctx, name)
	if err != nil {
		return err
	}
	return s.Prompt(ctx, content, metadata)
}

// States returns every agent's state.
func (sv *Supervisor) States(ctx context.Context) (map[string]AgentState, error) {
	all, err := sv.Agents(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]AgentState, len(all))
	for _, a := range all {
		m[a.Name] = a.State
	}
	return m, nil
}

// Agents returns every agent's status, in the order of the definitions.
func (sv *Supervisor) Agents(ctx context.Context) ([]AgentStatus, error) {
	return ask(ctx, sv, func(reply chan []AgentStatus) svMsg { return stateReq{reply: reply} })
}

func (sv *Supervisor) statuses(all map[string]*agent) []AgentStatus {
	out := make([]AgentStatus, 0, len(all))
	now := sv.cfg.Clock.Now()
	for _, d := range sv.set.Agents {
		a := all[d.Name]
		st := AgentStatus{Name: d.Name, State: a.state, Held: a.held}
		for _, t := range a.crashes {
			if now.Sub(t) <= CrashWindow {
				st.Crashes++
			}
		}
		if a.sess != nil {
			st.Session, st.PID, st.Since = a.sess.ID(), a.sess.Pid(), a.sess.StartedAt()
		}
		if a.lastErr != nil {
			st.LastErr = a.lastErr.Error()
		}
		if a.state == StateFailed {
			st.RetryAt = a.retryAt
		}
		out = append(out, st)
	}
	return out
}

// Stop stops an agent's session gracefully, if it has one, and holds the
// agent: it is not restarted by autostart until Start. Work sent to it
// (a delivery, a query) still starts it on demand.
func (sv *Supervisor) Stop(ctx context.Context, name, reason string) error {
	err, askErr := ask(ctx, sv, func(reply chan error) svMsg { return stopReq{name: name, reason: reason, reply: reply} })
	if askErr != nil {
		return askErr
	}
	return err
}

// Start starts an agent's session if it has none: an operator's start,
// which also releases a Stop and clears a failed state.
func (sv *Supervisor) Start(ctx context.Context, name string) (*Session, error) {
	if err := sv.Reset(ctx, name); err != nil {
		return nil, err
	}
	return sv.Ensure(ctx, name)
}

// Reset clears a failed agent so it can start again (an operator's
// restart), at once rather than after its cool-down; its cool-downs start
// over.
func (sv *Supervisor) Reset(ctx context.Context, name string) error {
	err, askErr := ask(ctx, sv, func(reply chan error) svMsg { return resetReq{name: name, reply: reply} })
	if askErr != nil {
		return askErr
	}
	return err
}

// announcements returns the subscriptions to announce to reader, in the
// wire shape, with each one's bits and rate limit: what the Reader needs
// to decide when to push. The Controller's filter, debounce and batch are
// not announced: they decide what reaches the Controller, not whether a
// push is accepted, and a Reader that knew the filter could tailor its
// pushes to it. The set is the effective one, so subscriptions approved
// at run time are announced the same way (they have no rate limit).
func announcements(set *agents.Set, reader string) []runtime.ActiveSubscription {
	subs := set.SubscriptionsFor(reader)
	out := make([]runtime.ActiveSubscription, 0, len(subs))
	for _, s := range subs {
		a := runtime.ActiveSubscription{
			SubscriptionID: s.ID, Controller: s.Controller, Category: s.Spec.Category,
			Fields: s.Spec.Fields, Questions: s.Spec.Questions, Directive: s.Spec.Directive,
			MaxWords: s.Spec.MaxWords, BandwidthBits: s.Bits,
		}
		if r := s.RateLimit; r != nil {
			a.RateLimit = runtime.NewRateLimit(r.Limit, r.Window)
		}
		out = append(out, a)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Controller < out[j].Controller })
	return out
}
