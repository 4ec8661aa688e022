package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

// The end-to-end tests run a whole Gateway on a real SQLite file with
// real runtime subprocesses: internal/testrt, scripted through the
// TESTRT_* variables of each agent (see its doc).

// testWait bounds every wait of the end-to-end tests; pollStep is how
// often they look.
const (
	testWait = testproc.Wait
	pollStep = testproc.Poll
)

// rec is one line of a testrt log.
type rec struct {
	Event          string          `json:"event"`
	Pid            int             `json:"pid"`
	Index          int             `json:"index"`
	SubscriptionID string          `json:"subscription_id"`
	QueryID        string          `json:"query_id"`
	RequestID      string          `json:"request_id"`
	DeliveryID     string          `json:"delivery_id"`
	Redelivered    bool            `json:"redelivered"`
	Success        bool            `json:"success"`
	Detail         string          `json:"detail"`
	Category       int             `json:"category"`
	Bits           float64         `json:"bits"`
	Response       json.RawMessage `json:"response"`
	Prompt         string          `json:"prompt"`
	Anomalies      int             `json:"anomalies"`
	// What a Reader's verdict says of a subscription's policy.
	Filtered   bool   `json:"filtered"`
	Superseded string `json:"superseded"`
	// What an announcement ("subscriptions") said of each subscription.
	Subs []struct {
		Controller     string             `json:"controller"`
		SubscriptionID string             `json:"subscription_id"`
		RateLimit      *runtime.RateLimit `json:"rate_limit"`
	} `json:"subs"`
}

// agentSpec is one agent of a test: its frontmatter after name and
// runtime, and its TESTRT_* settings.
type agentSpec struct {
	name  string
	front string            // YAML lines after name/runtime/env
	env   map[string]string // TESTRT_* settings (without the prefix)
}

type e2e struct {
	t     *testing.T
	dir   string
	gw    *Gateway
	store *store.Store
	logs  *testproc.Buffer
	run   func() // starts the gateway (newE2E); runE2E and startE2E have called it
	stop  func()
}

// testrtVars are the TESTRT_* variables every agent's env names.
var testrtVars = []string{"LOG", "PUBLISH", "ANSWERS", "ANSWER_ALL", "SILENT", "QUERIES", "CRASH_AT", "DELAY", "SUBSCRIBE", "PUBLISH_NEW"}

// startE2E writes the agents' definitions, loads them as a set, and runs a
// Gateway on them with a store in a temp dir. The gateway stops at the
// end of the test. tune, if set, adjusts the config.
func startE2E(t *testing.T, specs []agentSpec, tune func(*Config)) *e2e {
	t.Helper()
	dir := t.TempDir()
	set, vars := writeAgents(t, dir, specs)
	return runE2E(t, dir, set, vars, tune)
}

// writeAgents writes the agents' definitions into dir and loads them as a
// set. It returns the set and the gateway environment their ${VAR}s are
// expanded from; each agent's testrt log is testrtLog(dir, name).
func writeAgents(t *testing.T, dir string, specs []agentSpec) (*agents.Set, map[string]string) {
	t.Helper()
	vars := map[string]string{"PATH": os.Getenv("PATH"), "HOME": dir}
	for _, a := range specs {
		var b strings.Builder
		fmt.Fprintf(&b, "---\nname: %s\nruntime: [%q]\nenv:\n", a.name, testrtPath)
		for _, v := range testrtVars {
			key := a.name + "_" + v
			fmt.Fprintf(&b, "  TESTRT_%s: ${%s}\n", v, key)
			vars[key] = a.env[v]
		}
		// In the agent's own workdir: the only place of the test's
		// directory its sandbox can see.
		vars[a.name+"_LOG"] = testrtLog(dir, a.name)
		b.WriteString(a.front)
		b.WriteString("\n---\nYou are " + a.name + ".\n")
		if err := os.WriteFile(filepath.Join(dir, a.name+".md"), []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatalf("definitions: %v", err)
	}
	return set, vars
}

// runE2E opens the store dir/bcpgw.db (creating it, or reopening what an
// earlier run left) and runs a Gateway on set with it until e.stop, which
// also closes the store, or the end of the test. tune, if set, adjusts
// the config.
func runE2E(t *testing.T, dir string, set *agents.Set, vars map[string]string, tune func(*Config)) *e2e {
	t.Helper()
	e := newE2E(t, dir, set, vars, tune)
	e.run()
	return e
}

// newE2E is runE2E without starting the gateway: e.run starts it.
func newE2E(t *testing.T, dir string, set *agents.Set, vars map[string]string, tune func(*Config)) *e2e {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "bcpgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testproc.Buffer{}
	cfg := Config{
		Set: set, Store: st,
		Logger:      hclog.New(&hclog.LoggerOptions{Name: "gw", Output: logs, Level: hclog.Debug}),
		ExpiryCheck: 20 * time.Millisecond,
		StateDir:    dir,
		Session: session.Config{
			Grace:     2 * time.Second,
			LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
		},
	}
	if tune != nil {
		tune(&cfg)
	}
	gw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	e := &e2e{t: t, dir: dir, gw: gw, store: st, logs: logs}
	started, stopped := false, false
	e.run = func() {
		if !started {
			started = true
			go func() { done <- gw.Run(ctx) }()
		}
	}
	e.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if started {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("gateway Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("gateway did not stop")
			}
		}
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	}
	t.Cleanup(func() {
		e.stop()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs)
		}
	})
	return e
}

// procKey is what testrt logs as its pid when pid is its session's
// process: the inode of the sandbox's pid namespace (see
// internal/testrt). pid must be alive.
func procKey(pid int) int {
	fi, err := os.Stat(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	start, err := strconv.Atoi(f[19])
	if err != nil {
		return -1
	}
	return start<<32 | int(fi.Sys().(*syscall.Stat_t).Ino&0xffffffff)
}

// testrtLog is where agent's testrt writes its log when the test's state
// directory is dir: in its default workdir.
func testrtLog(dir, agent string) string {
	return filepath.Join(agents.DefaultWorkdir(dir, agent), "testrt.log")
}

// log returns the records agent's runtime has written so far: its
// complete lines. A record is one write, but a reader may see the first
// part of one that crosses a page of the file before the rest is there.
func (e *e2e) log(agent string) []rec {
	b, err := os.ReadFile(testrtLog(e.dir, agent))
	if err != nil {
		return nil
	}
	var out []rec
	for line := range strings.Lines(string(b[:bytes.LastIndexByte(b, '\n')+1])) {
		var r rec
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			e.t.Fatalf("%s.log: %v: %s", agent, err, line)
		}
		out = append(out, r)
	}
	return out
}

// records returns agent's records of the given event.
func (e *e2e) records(agent, event string) []rec {
	var out []rec
	for _, r := range e.log(agent) {
		if r.Event == event {
			out = append(out, r)
		}
	}
	return out
}

// waitRecords waits until agent has logged at least n records of event,
// and returns them.
func (e *e2e) waitRecords(agent, event string, n int) []rec {
	e.t.Helper()
	var got []rec
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		got = e.records(agent, event)
		return len(got) >= n
	}) {
		e.t.Fatalf("%s logged %d %q records, want %d; log: %+v", agent, len(got), event, n, e.log(agent))
	}
	return got
}

// waitEvent waits for a stored event of the given kind (and code, if
// set) and returns all such events.
func (e *e2e) waitEvent(kind, code string) []store.Event {
	e.t.Helper()
	var got []store.Event
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		got = e.events(kind, code)
		return len(got) > 0
	}) {
		e.t.Fatalf("no %s event with code %q", kind, code)
	}
	return got
}

func (e *e2e) events(kind, code string) []store.Event {
	all, err := e.store.Events(context.Background(), 0, 1<<30)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []store.Event
	for _, ev := range all {
		if ev.Kind == kind && (code == "" || ev.Code == code) {
			out = append(out, ev)
		}
	}
	return out
}

// prompt sends a prompt to agent, starting its session if needed.
func (e *e2e) prompt(agent, content string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.gw.Supervisor().Prompt(ctx, agent, content, nil); err != nil {
		e.t.Fatalf("prompt %s: %v", agent, err)
	}
}

// pendingApprovals waits until n items are pending and returns them.
func (e *e2e) pendingApprovals(n int) []store.Approval {
	e.t.Helper()
	var got []store.Approval
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		var err error
		got, err = e.gw.Approvals(context.Background(), store.ApprovalPending)
		if err != nil {
			e.t.Fatal(err)
		}
		return len(got) >= n
	}) {
		e.t.Fatalf("%d approval items pending, want %d", len(got), n)
	}
	return got
}

// publishes renders TESTRT_PUBLISH.
func publishes(ps ...map[string]any) string {
	b, err := json.Marshal(ps)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// pub is one entry of TESTRT_PUBLISH; response is raw JSON.
func pub(sub, controller, response string, repeat int) map[string]any {
	return map[string]any{"subscription_id": sub, "controller": controller, "response": json.RawMessage(response), "repeat": repeat}
}

// Channel blocks for the usual pair: main (controller) and researcher
// (reader), with the seed's subscriptions.
const (
	mainChannel = `tools: [BCPQuery]
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 3
    budget_bits: %d
    max_cat2_queries: 2
    max_cat3_queries: 1
    subscriptions:
      - id: research-findings
        category: 2
        on_anomaly: %s
        questions:
          - {id: topic, question: "What is the topic?", max_words: 10, expected_format: short_text}
          - {id: summary, question: "What is the key finding?", max_words: 50, expected_format: short_text}
          - {id: relevance, question: "How relevant, 1 to 5?", max_words: 1, expected_format: integer, min: 1, max: 5}
      - id: research-alerts
        category: 1
        fields:
          - {name: has_breaking_news, type: boolean}
          - {name: priority, type: enum, values: [low, medium, high]}
          - {name: score, type: integer, min: 1, max: 5}
          - {name: source, type: enum, values: [web, mail, feed, other]}
      - id: digest
        category: 3
        directive: Summarize what changed today.
        max_words: 100`
	researcherChannel = `tools: [BCPPublish, BCPRespond]
bcp_channels:
  - peer: main
    role: reader
    max_category: 3
    budget_bits: %d`
)

// pair returns main and researcher with the given budgets and Cat-2
// anomaly policy, and their TESTRT settings.
func pair(mainBudget, readerBudget int, onAnomaly string, mainEnv, readerEnv map[string]string) []agentSpec {
	return []agentSpec{
		{name: "main", front: fmt.Sprintf(mainChannel, mainBudget, onAnomaly), env: mainEnv},
		{name: "researcher", front: fmt.Sprintf(researcherChannel, readerBudget), env: readerEnv},
	}
}

// The seed's worked example: a Cat-2 finding of 10 + 50 + 1 words.
const seedFinding = `{"relevance": 4, "topic": "  Quantum   error correction ", "summary": "A new surface code lowers the logical error rate tenfold."}`

// approval returns the stored item id.
func (e *e2e) approval(id string) *store.Approval {
	e.t.Helper()
	a, err := e.gw.Approval(context.Background(), id)
	if err != nil {
		e.t.Fatalf("approval %s: %v", id, err)
	}
	return a
}

// deliveries returns every stored delivery.
func (e *e2e) deliveries() []store.Delivery {
	e.t.Helper()
	ds, err := e.store.Deliveries(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return ds
}

// eventsFor returns the stored events of kind about ref.
func (e *e2e) eventsFor(kind, ref string) []store.Event {
	var out []store.Event
	for _, ev := range e.events(kind, "") {
		if ev.Ref == ref {
			out = append(out, ev)
		}
	}
	return out
}

// nextPending waits for a pending item not in seen, adds it to seen and
// returns it.
func (e *e2e) nextPending(seen map[string]bool) store.Approval {
	e.t.Helper()
	var got *store.Approval
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		items, err := e.gw.Approvals(context.Background(), store.ApprovalPending)
		if err != nil {
			e.t.Fatal(err)
		}
		for i := range items {
			if !seen[items[i].ID] {
				got = &items[i]
				return true
			}
		}
		return false
	}) {
		e.t.Fatalf("no new pending approval item (seen %d)", len(seen))
	}
	seen[got.ID] = true
	return *got
}

// waitDelivered waits until delivery id is marked delivered.
func (e *e2e) waitDelivered(id string) {
	e.t.Helper()
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		d, err := e.store.Delivery(context.Background(), id)
		return err == nil && d.State == store.DeliveryDelivered
	}) {
		e.t.Fatalf("delivery %s not marked delivered", id)
	}
}

// assertNothingDelivered checks that no delivery was stored or reached
// main.
func (e *e2e) assertNothingDelivered() {
	e.t.Helper()
	if ds := e.deliveries(); len(ds) != 0 {
		e.t.Errorf("deliveries stored: %+v", ds)
	}
	if got := e.records("main", "delivery"); len(got) != 0 {
		e.t.Errorf("main received deliveries: %+v", got)
	}
}

// running waits until the gateway's supervisor answers: Run is under way.
func (e *e2e) running() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := e.gw.Supervisor().States(ctx); err != nil {
		e.t.Fatalf("gateway not running: %v", err)
	}
}

// status is one agent's status from the supervisor.
func (e *e2e) status(name string) session.AgentStatus {
	e.t.Helper()
	all, err := e.gw.Supervisor().Agents(testCtx(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range all {
		if a.Name == name {
			return a
		}
	}
	e.t.Fatalf("no agent %s", name)
	return session.AgentStatus{}
}

// eventsMatching returns the stored events of kind (and code, if set) that
// match.
func (e *e2e) eventsMatching(kind, code string, match func(store.Event) bool) []store.Event {
	var out []store.Event
	for _, ev := range e.events(kind, code) {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// waitEventMatching waits for a stored event of kind (and code, if set) that
// matches, and returns it.
func (e *e2e) waitEventMatching(kind, code string, match func(store.Event) bool) store.Event {
	e.t.Helper()
	var got []store.Event
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		got = e.eventsMatching(kind, code, match)
		return len(got) > 0
	}) {
		e.t.Fatalf("no matching %s event with code %q; those of that kind: %+v", kind, code, e.events(kind, ""))
	}
	return got[0]
}

// waitAllDelivered waits until n deliveries are stored and all of them are
// acknowledged, and returns them.
func (e *e2e) waitAllDelivered(n int) []store.Delivery {
	e.t.Helper()
	var got []store.Delivery
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		var err error
		got, err = e.store.Deliveries(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		if len(got) < n {
			return false
		}
		for _, d := range got {
			if d.State != store.DeliveryDelivered {
				return false
			}
		}
		return true
	}) {
		e.t.Fatalf("deliveries = %+v, want %d delivered", got, n)
	}
	return got
}

// queryPending returns the pending query with id, or nil.
func (e *e2e) queryPending(id string) *pendingQuery {
	e.gw.mu.Lock()
	defer e.gw.mu.Unlock()
	return e.gw.queries[id]
}

// sessionOf returns agent's running session, starting one if needed.
func (e *e2e) sessionOf(agent string) *session.Session {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	s, err := e.gw.Supervisor().Ensure(ctx, agent)
	if err != nil {
		e.t.Fatalf("session of %s: %v", agent, err)
	}
	return s
}

// injectLine routes msg as if s's runtime had written it, past the session's
// rights check: how a test plays a runtime that the SDK would not let
// misbehave.
func (e *e2e) injectLine(s *session.Session, msg any) {
	e.t.Helper()
	line, err := runtime.Marshal(msg)
	if err != nil {
		e.t.Fatal(err)
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	switch m := msg.(type) {
	case runtime.QueryRequest:
		q, err := runtime.DecodeQueryRequest(line)
		var specErr *runtime.SpecError
		if err != nil && !errors.As(err, &specErr) {
			e.t.Fatal(err)
		}
		e.gw.onMessage(s, session.NewQueryRequest(q, specErr, line))
	case runtime.Response:
		if m.SubscriptionID != "" {
			e.gw.onMessage(s, session.NewPublish(m, line))
		} else {
			e.gw.onMessage(s, session.NewAnswer(m, line))
		}
	default:
		e.t.Fatalf("injectLine: %T is not a BCP message", msg)
	}
}

// edit rewrites dir/name.md through fn, failing if fn changes nothing.
// The new content replaces the file at once (a rename, as editors save):
// a gateway watching the directory never reads it truncated, which a
// stall between a rewrite's truncation and its write would let it do.
func (e *e2e) edit(name string, fn func(string) string) {
	e.t.Helper()
	path := filepath.Join(e.dir, name+".md")
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	s := fn(string(b))
	if s == string(b) {
		e.t.Fatalf("edit of %s changed nothing", name)
	}
	tmp := filepath.Join(e.dir, "."+name+".md.tmp") // not a definition: skipped
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		e.t.Fatal(err)
	}
}

// reload reloads the definitions, failing the test on an error.
func (e *e2e) reload() Reloaded {
	e.t.Helper()
	r, err := e.gw.Reload(testCtx(e.t), "test")
	if err != nil {
		e.t.Fatalf("Reload: %v", err)
	}
	return r
}

// replace returns fn for edit replacing old with new once, failing if old
// is missing.
func replace(t *testing.T, old, new string) func(string) string {
	return func(s string) string {
		if !strings.Contains(s, old) {
			t.Fatalf("%q not found in:\n%s", old, s)
		}
		return strings.Replace(s, old, new, 1)
	}
}

// stateOf waits until agent is in state want.
func (e *e2e) waitState(agent string, want session.AgentState) {
	e.t.Helper()
	var got session.AgentState
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		states, err := e.gw.Supervisor().States(testCtx(e.t))
		if err != nil {
			e.t.Fatal(err)
		}
		got = states[agent]
		return got == want
	}) {
		e.t.Fatalf("%s is %q, want %q", agent, got, want)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testCtx bounds a decision: a store or gateway that hangs fails the
// test instead of stalling it.
func testCtx(t *testing.T) context.Context { return testproc.Context(t) }

// runningGateway is a Gateway started by startGateway, for the benchmarks
// and the load tests that run real runtime processes at full speed.
type runningGateway struct {
	gw    *Gateway
	store *store.Store
	stop  func() error // stops Run, closes the store, returns Run's error
}

// startGateway writes defs (file name -> content) to dir/agents, loads
// them, opens dir/bcpgw.db and runs a Gateway on them with dir as its
// state directory, logging errors to stderr. tune may change the Config
// before New (and seed the store). The gateway is stopped at the end of
// the test if stop was not called.
func startGateway(tb testing.TB, dir string, defs map[string]string, tune func(*Config)) *runningGateway {
	tb.Helper()
	agentsDir := filepath.Join(dir, "agents")
	if err := os.Mkdir(agentsDir, 0o700); err != nil {
		tb.Fatal(err)
	}
	for name, body := range defs {
		if err := os.WriteFile(filepath.Join(agentsDir, name), []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	set, err := agents.LoadDir(agentsDir)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "bcpgw.db"))
	if err != nil {
		tb.Fatal(err)
	}
	cfg := Config{Set: set, Store: st, StateDir: dir, Logger: hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Error})}
	if tune != nil {
		tune(&cfg)
	}
	gw, err := New(cfg)
	if err != nil {
		st.Close()
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	stopped := false
	var runErr error
	rg := &runningGateway{gw: gw, store: st}
	rg.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
			if err := st.Close(); err != nil && runErr == nil {
				runErr = err
			}
		}
		return runErr
	}
	tb.Cleanup(func() {
		if err := rg.stop(); err != nil {
			tb.Errorf("gateway: %v", err)
		}
	})
	return rg
}
