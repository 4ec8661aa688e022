package bcpagent

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/internal/llm"
	"github.com/bcpgw/bcpgw/runtime"
)

// Names of the content tools an agent may hold besides the BCP tools.
const (
	ToolWebFetch = "WebFetch"
	ToolReadFile = "ReadFile"
)

// Defaults of Config.
const (
	DefaultMaxTurns     = 20
	DefaultVerdictWait  = 30 * time.Second
	DefaultHistoryChars = 200_000
)

// Config is what an Agent needs from its process. Zero fields take their
// defaults.
type Config struct {
	// LookupEnv reads the process environment (os.LookupEnv in main):
	// the provider's base URL and key, and the BCP_AGENT_* settings.
	LookupEnv func(string) (string, bool)
	// Log receives log lines with [LEVEL] prefixes, which the gateway
	// relays with their level (default os.Stderr).
	Log io.Writer
	// LLM configures the model clients (HTTP client, retries).
	LLM llm.Options
	// Fetch bounds WebFetch.
	Fetch FetchConfig
	// MaxTurns bounds the model calls of one turn when the start message
	// gives no max_turns (default DefaultMaxTurns).
	MaxTurns int
	// VerdictWait is how long BCPPublish and BCPRespond wait for the
	// gateway's verdict before telling the model it will come later
	// (default DefaultVerdictWait). A Cat-3 verdict waits for a person.
	VerdictWait time.Duration
	// HistoryChars bounds the conversation kept across turns, in
	// characters; the oldest turns are dropped first (default
	// DefaultHistoryChars).
	HistoryChars int
}

// Agent is one session of bcp-agent: the model, the tools it holds, and
// the conversation. Use Handler to run it with the runtime SDK; one
// Agent serves one session.
type Agent struct {
	cfg Config
	log *log.Logger

	// Set by start, read-only after.
	sessionCtx context.Context
	model      llm.Client
	self       runtime.StartAgent
	held       map[string]bool
	maxTurns   int
	prices     prices
	fetch      *fetcher
	proxy      llm.Proxy // from HTTPS_PROXY, HTTP_PROXY: the model's and WebFetch's
	root       string    // ReadFile's root: the working directory

	// Owned by the turn loop (the SDK runs turns and announcements one at
	// a time on one goroutine).
	subs    []runtime.ActiveSubscription
	history [][]llm.Message // one entry per finished turn
	open    *runtime.Query  // the query of the running turn until answered
	offered map[string]bool // tools offered so far in the session, by name

	// Shared with the SDK's reading goroutine and verdict waiters.
	mu        sync.Mutex
	notes     []string        // for the model's next turn
	pending   map[string]bool // verdicts awaited, by "s:"/"q:" + id
	abandoned map[string]bool // of those, the ones a tool call gave up on
	wg        sync.WaitGroup  // verdict waiters
}

// New returns an Agent.
func New(cfg Config) *Agent {
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = func(string) (string, bool) { return "", false }
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = DefaultMaxTurns
	}
	if cfg.VerdictWait <= 0 {
		cfg.VerdictWait = DefaultVerdictWait
	}
	if cfg.HistoryChars <= 0 {
		cfg.HistoryChars = DefaultHistoryChars
	}
	return &Agent{
		cfg:       cfg,
		log:       log.New(cfg.Log, "", 0),
		offered:   map[string]bool{},
		pending:   map[string]bool{},
		abandoned: map[string]bool{},
	}
}

// Wait waits for the goroutines that wait for verdicts; they end when the
// session does. A program that goes on after runtime.Run returned (a
// test, an embedding program) calls it so that none outlives the session.
// cmd/bcp-agent does not: runtime.Main exits the process, which ends
// them.
func (a *Agent) Wait() { a.wg.Wait() }

// Handler returns the SDK handler that runs this Agent.
func (a *Agent) Handler() runtime.Handler {
	return runtime.Handler{
		Start:         a.start,
		Subscriptions: a.subscriptions,
		Prompt: func(ctx context.Context, c *runtime.Client, p runtime.Prompt) error {
			return a.turn(ctx, c, p.Content)
		},
		Query:       a.query,
		Delivery:    a.delivery,
		QueryFailed: a.queryFailed,
	}
}

// start makes the model client from the start message's model and the
// environment. A mistake here (no model, unknown provider, no key) is
// told to the gateway as an error and ends the session before ready: no
// turn could succeed.
func (a *Agent) start(ctx context.Context, c *runtime.Client) error {
	a.sessionCtx = ctx
	a.self = c.Agent()
	err := a.configure()
	if err != nil {
		_ = c.Error("bcp-agent: " + err.Error())
		a.log.Printf("[ERROR] %v", err)
		return err
	}
	a.log.Printf("[INFO] bcp-agent %s: model %s:%s, tools %s", a.self.Name, a.model.Provider(), a.model.Model(), strings.Join(a.self.Tools, ", "))
	if a.held[ToolReadFile] && a.held[ToolWebFetch] {
		a.log.Printf("[WARN] this agent holds both ReadFile and WebFetch: a page it reads can steer it into putting the contents of its files into a URL it fetches; give it a workdir that holds only what it may disclose")
	}
	if !a.proxy.IsZero() {
		a.log.Printf("[INFO] network: every request through the proxy (%s), loopback destinations included", a.proxy)
		for _, k := range []string{"NO_PROXY", "no_proxy"} {
			if v, _ := a.cfg.LookupEnv(k); strings.TrimSpace(v) != "" {
				a.log.Printf("[WARN] %s is ignored: bcp-agent sends every request through the proxy (in a sandbox it is the only way out)", k)
				break
			}
		}
	}
	if a.prices == (prices{}) {
		a.log.Printf("[INFO] no prices configured (BCP_AGENT_USD_PER_MTOK_IN, BCP_AGENT_USD_PER_MTOK_OUT): results report the tokens used, and cost_usd stays 0")
	}
	return nil
}

func (a *Agent) configure() error {
	opts := a.cfg.LLM
	if v := a.env("BCP_AGENT_MAX_TOKENS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("BCP_AGENT_MAX_TOKENS %q: want a positive integer", v)
		}
		opts.MaxTokens = n
	}
	model, err := llm.New(a.self.Model, a.cfg.LookupEnv, opts)
	if err != nil {
		return err
	}
	a.model = model
	if a.prices, err = readPrices(a.env); err != nil {
		return err
	}
	a.held = map[string]bool{}
	for _, t := range a.self.Tools {
		a.held[t] = true
	}
	if a.held[ToolWebFetch] && a.held[agents.ToolQuery] {
		// A Controller must never read untrusted content: that is the
		// whole point of the protocol.
		delete(a.held, ToolWebFetch)
		a.log.Printf("[WARN] WebFetch is not offered: this agent holds BCPQuery, so it is a Controller, which must not read untrusted content")
	}
	// llm.New read the same variables for the model's client.
	if a.proxy, err = llm.ProxyFromEnv(a.cfg.LookupEnv); err != nil {
		return err
	}
	fetchCfg := a.cfg.Fetch
	if a.env("BCP_AGENT_WEBFETCH_PRIVATE") == "1" {
		fetchCfg.AllowPrivate = true
	}
	if fetchCfg.Proxy.IsZero() {
		fetchCfg.Proxy = a.proxy
	}
	a.fetch = newFetcher(fetchCfg)
	// ReadFile's root is the working directory the gateway gave, made
	// absolute so that absolute paths can be checked against it.
	if a.root, err = filepath.Abs(a.self.Cwd); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	a.maxTurns = a.self.MaxTurns
	if a.maxTurns <= 0 {
		a.maxTurns = a.cfg.MaxTurns
	}
	return nil
}

func (a *Agent) env(k string) string {
	v, _ := a.cfg.LookupEnv(k)
	return strings.TrimSpace(v)
}

// subscriptions records what a Reader may publish to. It is not a turn:
// the model hears of them through BCPPublish, offered from its next turn.
func (a *Agent) subscriptions(_ context.Context, _ *runtime.Client, subs []runtime.ActiveSubscription) {
	a.subs = subs
	a.log.Printf("[INFO] %d subscription(s) announced", len(subs))
}

// query is a Controller's query to this Reader: a turn in which
// BCPRespond is offered until the gateway accepts an answer.
func (a *Agent) query(ctx context.Context, c *runtime.Client, q runtime.Query) error {
	if !a.held[agents.ToolRespond] {
		return fmt.Errorf("query %s: this agent does not hold BCPRespond", q.QueryID)
	}
	a.open = &q
	defer func() { a.open = nil }()
	return a.turn(ctx, c, queryText(q))
}

// delivery is validated data for a Controller: a turn whose text is the
// gateway's ready-made rendering, which frames the data as data.
func (a *Agent) delivery(ctx context.Context, c *runtime.Client, d runtime.ResponseDelivery) error {
	text := d.Prompt
	if text == "" {
		text = deliveryText(d)
	}
	return a.turn(ctx, c, text)
}

// queryFailed notes a query that failed after it was sent (a timeout, a
// rejected answer) for the model's next turn. It runs on the SDK's
// reading goroutine and must not block.
func (a *Agent) queryFailed(_ *runtime.Client, e runtime.QueryError) {
	a.note(fmt.Sprintf("Your query (request %s) to %s failed: %s", e.RequestID, e.ToAgent, e.Reason))
}

func (a *Agent) note(s string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notes = append(a.notes, s)
}

// takeNotes returns the pending notes as the head of the next turn's
// text, and clears them.
func (a *Agent) takeNotes() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.notes) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Since your last turn, the gateway reported:\n")
	for _, n := range a.notes {
		b.WriteString("- " + n + "\n")
	}
	b.WriteString("\n")
	a.notes = nil
	return b.String()
}
