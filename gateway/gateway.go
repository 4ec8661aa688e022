package gateway

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/notify"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// Gateway defaults. See Config.
const (
	DefaultQueryTimeout = 10 * time.Minute
	DefaultApprovalTTL  = 24 * time.Hour
	DefaultExpiryCheck  = 15 * time.Second
)

// Config configures a Gateway.
type Config struct {
	// Set is the checked set of agent definitions. Required.
	Set *agents.Set
	// Store keeps deliveries, approval items and events. Required; the
	// Gateway does not close it.
	Store *store.Store
	// StateDir is the gateway's state directory: agents whose definition
	// sets no workdir get STATE/work/NAME (unless Session.WorkRoot says
	// otherwise), and the egress proxies' sockets live in STATE/egress.
	StateDir string
	// AllowUnsandboxed lets a reload bring in agents with sandbox: none
	// (bcpgw run --allow-unsandboxed); without it such a set is refused.
	AllowUnsandboxed bool
	// Logger receives the gateway's log lines. Default: discard.
	Logger hclog.Logger
	// Clock times query timeouts, approval expiry and restarts. Default:
	// the system clock.
	Clock Clock
	// QueryTimeout is how long a Reader has to answer a query before the
	// Controller is told query_timeout. Default DefaultQueryTimeout.
	QueryTimeout time.Duration
	// ApprovalTTL is how long an approval item waits for a decision before
	// it is rejected as approval_expired. Default DefaultApprovalTTL.
	ApprovalTTL time.Duration
	// ExpiryCheck is how often expired approval items are looked for.
	// Default DefaultExpiryCheck.
	ExpiryCheck time.Duration
	// Session is the template of every session (timeouts, limits); its
	// Owner is the gateway and is ignored here.
	Session session.Config
	// Watch reloads the definitions when files in their directory change
	// (see WatchDefinitions), after WatchDebounce of quiet.
	Watch         bool
	WatchDebounce time.Duration
	// Metrics, if set, records the gateway's Prometheus metrics (see
	// NewMetrics).
	Metrics *Metrics
	// MaxBacklog is how many deliveries from one Reader may wait for one
	// Controller before further pushes on that channel are refused with
	// backlog_full (see backlog). Default DefaultMaxBacklog.
	MaxBacklog int
	// Notify, if set, is the loaded notify file (bcpgw run --notify): its
	// targets are sent the events they ask for, and the file is read
	// again on every reload (notify_wiring.go).
	Notify *notify.Targets
}

// Gateway routes BCP traffic between the sessions of one set of agents:
// it judges publishes and answers, charges budgets, keeps what it accepts
// in the store before it says so, delivers it to Controllers as prompts
// until they acknowledge it, and holds Cat-3 and flagged items for an
// operator. Create it with New and run it with Run.
type Gateway struct {
	cfg     Config
	log     hclog.Logger
	audit   Auditor
	sv      *session.Supervisor
	set     atomic.Pointer[agents.Set] // the definitions in force, with the approved subscriptions
	sched   *scheduler
	metrics *Metrics    // may be nil
	rates   rateLimiter // channel rate limits (ratelimit.go)
	backlog *backlog    // pending deliveries by pair (backlog.go)
	policy  *pushPolicy // debounce and batching (debounce_batch.go)

	// defs is the definitions as loaded, without the approved
	// subscriptions (subscribe.go); written under reloadMu.
	defs atomic.Pointer[agents.Set]

	reloadMu sync.Mutex // one reload at a time

	mu      sync.Mutex // guards the fields below
	budgets *budgets
	queries map[string]*pendingQuery
	held    map[string]heldItem // by approval id
	// subReqs holds the request ids of each Controller's subscription
	// requests waiting for an operator; live is each agent's latest
	// session, which hears the decisions on its requests (subscribe.go).
	subReqs map[string]map[string]bool
	live    map[string]*session.Session

	outbox   *outbox
	egress   *egressProxies
	notifier *notify.Notifier // nil without Config.Notify
	running  chan struct{}    // closed once Run has loaded what the store holds
	// ctx is Run's context: goroutines started on behalf of a message
	// (query dispatch) live at most as long as Run. Set before any session
	// can exist.
	ctx context.Context

	goMu     sync.Mutex     // guards stopping and wg.Add
	stopping bool           // Run is waiting for its goroutines: start no more
	wg       sync.WaitGroup // goroutines started for messages and couriers
}

// New returns a gateway for cfg.Set; call Run to start it.
func New(cfg Config) (*Gateway, error) {
	if cfg.Set == nil || cfg.Store == nil {
		return nil, errors.New("gateway: Config.Set and Config.Store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = DefaultQueryTimeout
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = DefaultApprovalTTL
	}
	if cfg.ExpiryCheck <= 0 {
		cfg.ExpiryCheck = DefaultExpiryCheck
	}
	g := &Gateway{
		cfg:     cfg,
		log:     cfg.Logger,
		audit:   countingAuditor{next: StoreAuditor{Store: cfg.Store, Log: LogAuditor{Logger: cfg.Logger.Named("audit"), Quiet: newLogQuiet(cfg.Clock)}}, m: cfg.Metrics},
		metrics: cfg.Metrics,
		budgets: newBudgets(),
		queries: map[string]*pendingQuery{},
		held:    map[string]heldItem{},
		subReqs: map[string]map[string]bool{},
		live:    map[string]*session.Session{},
		running: make(chan struct{}),
		backlog: newBacklog(cfg.MaxBacklog),
	}
	g.set.Store(cfg.Set)
	g.defs.Store(cfg.Set)
	if cfg.Metrics != nil {
		cfg.Metrics.g = g
	}
	g.outbox = &outbox{g: g, couriers: map[string]*courier{}}
	g.policy = newPushPolicy(g)
	g.sched = &scheduler{clock: cfg.Clock, log: g.log.Named("cron"), event: g.event, prompt: g.cronPrompt}
	sc := cfg.Session
	if sc.WorkRoot == "" && cfg.StateDir != "" {
		sc.WorkRoot = filepath.Join(cfg.StateDir, "work")
	}
	g.egress = &egressProxies{g: g, proxies: map[string]*agentProxy{}}
	if cfg.StateDir != "" {
		g.egress.dir = filepath.Join(cfg.StateDir, "egress")
	}
	if sc.Egress == nil {
		sc.Egress = g.egress.socket
	}
	g.sv = session.NewSupervisor(session.SupervisorConfig{
		Set: cfg.Set, Logger: cfg.Logger, Owner: sessionOwner{g}, Clock: cfg.Clock, Session: sc,
	})
	if err := g.newNotifier(); err != nil {
		return nil, err
	}
	return g, nil
}

// Supervisor returns the supervisor of the gateway's sessions, for
// operator actions (prompts, states, restarts).
func (g *Gateway) Supervisor() *session.Supervisor { return g.sv }

// Run delivers what the store still holds from before, then routes until
// ctx ends, when it stops every session and returns. A ctx that ends
// while Run is still starting is a stop too (a SIGTERM right after the
// start), not a failure.
func (g *Gateway) Run(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	g.ctx = ctx
	// stop waits for every goroutine Run started, and returns err unless
	// it only says that ctx ended.
	stop := func(err error) error {
		cancel()
		g.goMu.Lock()
		g.stopping = true
		g.goMu.Unlock()
		g.wg.Wait()
		if err != nil && parent.Err() != nil && errors.Is(err, parent.Err()) {
			return nil
		}
		return err
	}
	// Only the counts are read: each Controller's courier reads its
	// deliveries a page at a time.
	pending, err := g.cfg.Store.PendingByPair(ctx)
	if err != nil {
		return stop(fmt.Errorf("load pending deliveries: %w", err))
	}
	g.backlog.load(pending)
	total, controllers := 0, map[string]bool{}
	for p, n := range pending {
		total += n
		controllers[p.Controller] = true
	}
	if total > 0 {
		g.log.Info("resuming deliveries from the state directory", "pending", total, "controllers", len(controllers))
	}
	for c := range controllers {
		g.outbox.resume(c)
	}
	if err := g.resumeBatches(ctx); err != nil {
		return stop(err)
	}
	// Items held before a restart still wait for a person: say so, and
	// how to decide them, where an operator looks first.
	if b, err := g.cfg.Store.BacklogCounts(ctx); err == nil {
		if b.Approvals > 0 {
			g.log.Info("approval items from before the restart wait for an operator", "pending", b.Approvals, "decide", g.command("approvals"))
		}
		if b.Parked > 0 {
			g.log.Warn("parked deliveries wait for an operator to retry or discard them", "parked", b.Parked,
				"list", g.command("deliveries list"))
		}
	}
	if err := g.startApproved(ctx); err != nil {
		return stop(fmt.Errorf("load approved subscriptions: %w", err))
	}
	g.sched.start(ctx, g.set.Load())
	close(g.running)
	g.spawn(func() { g.expireLoop(ctx) })
	g.runNotifier(ctx)
	g.spawn(func() {
		<-ctx.Done()
		g.sched.wait()
	})
	if g.cfg.Watch {
		g.spawn(func() {
			if err := g.WatchDefinitions(ctx, g.cfg.WatchDebounce); err != nil {
				g.log.Error("definitions are not watched: reload with SIGHUP or bcpgw reload", "error", err)
			}
		})
	}
	return stop(g.sv.Run(ctx))
}

// spawn runs fn in a goroutine that Run waits for, unless Run is already
// stopping (whatever fn would have done is then left to the store and the
// next run). It reports whether fn was started.
func (g *Gateway) spawn(fn func()) bool {
	g.goMu.Lock()
	defer g.goMu.Unlock()
	if g.stopping {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn()
	}()
	return true
}

// sessionOwner is the gateway as its sessions and supervisor see it
// (session.SupervisorOwner): the methods are kept off Gateway's own API.
type sessionOwner struct{ g *Gateway }

func (o sessionOwner) Audit(e store.Event) { o.g.audit.Audit(e) }

func (o sessionOwner) Holds(agent, tool string) bool {
	d := o.g.set.Load().Agent(agent)
	return d != nil && d.HasTool(tool)
}

func (o sessionOwner) Message(s *session.Session, m session.Message) { o.g.onMessage(s, m) }

func (o sessionOwner) Started(s *session.Session) {
	o.g.mu.Lock()
	o.g.budgets.started(s)
	o.g.live[s.Name()] = s
	o.g.mu.Unlock()
}

func (o sessionOwner) Crashed(agent string)          { o.g.metrics.crashed(agent) }
func (o sessionOwner) Restarted(agent, cause string) { o.g.metrics.restarted(agent, cause) }

func (g *Gateway) now() time.Time { return g.cfg.Clock.Now() }

// event fills in the time and records e.
func (g *Gateway) event(e store.Event) {
	if e.Time.IsZero() {
		e.Time = g.now()
	}
	g.audit.Audit(e)
}
