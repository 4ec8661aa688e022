package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/internal/fakert"
	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

// recorder is the owner of the tests' sessions and supervisors: it keeps
// their events, and lets tests decide rights (holds) and take messages
// (onMessage); without them, the definition alone decides and messages
// are refused as not routed.
type recorder struct {
	mu        sync.Mutex
	events    []store.Event
	holds     func(agent, tool string) bool
	onMessage func(s *Session, m Message)
	crashes   int
	restarts  []string
}

func (r *recorder) Holds(agent, tool string) bool {
	return r.holds == nil || r.holds(agent, tool)
}

func (r *recorder) Message(s *Session, m Message) {
	if r.onMessage == nil {
		logOwner{}.Message(s, m)
		return
	}
	r.onMessage(s, m)
}

func (r *recorder) Started(*Session) {}

func (r *recorder) Crashed(string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.crashes++
}

func (r *recorder) Restarted(agent, cause string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restarts = append(r.restarts, agent+" "+cause)
}

func (r *recorder) Audit(e store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) find(kind, code string) []store.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Event
	for _, e := range r.events {
		if e.Kind == kind && (code == "" || e.Code == code) {
			out = append(out, e)
		}
	}
	return out
}

type harness struct {
	cfg   Config
	logs  *testproc.Buffer
	audit *recorder
	clock *clock.Fake
}

// newHarness describes an agent whose runtime is this test binary in the
// given fake-runtime mode.
func newHarness(t *testing.T, mode string, tools ...string) *harness {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	def := &agents.Definition{
		Name:        "researcher",
		File:        filepath.Join(dir, "researcher.md"),
		Runtime:     []string{exe, "-test.run=^$"},
		Workdir:     dir,
		Env:         map[string]string{fakert.Env: mode},
		Tools:       tools,
		IdleTimeout: time.Minute,
	}
	h := &harness{logs: &testproc.Buffer{}, audit: &recorder{}, clock: testproc.FakeClock()}
	h.cfg = Config{
		Def:    def,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "gw", Output: h.logs, Level: hclog.Trace}),
		Owner:  h.audit,
		Clock:  h.clock,
		Grace:  200 * time.Millisecond,
		LookupEnv: func(k string) (string, bool) {
			v, ok := map[string]string{"PATH": os.Getenv("PATH"), "HOME": "/home/op", "SECRET_TOKEN": "s3cret", "API_KEY": "k-123"}[k]
			return v, ok
		},
	}
	return h
}

func (h *harness) start(t *testing.T) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Start(ctx, h.cfg)
	if err != nil {
		t.Fatalf("Start: %v\nlogs:\n%s", err, h.logs)
	}
	t.Cleanup(func() {
		s.Kill()
		<-s.Done()
	})
	return s
}

func waitDone(t *testing.T, s *Session) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("session did not end")
	}
}

func TestSessionHandshakeAnnouncesSubscriptions(t *testing.T) {
	h := newHarness(t, "sdk", "BCPPublish")
	h.cfg.Subscriptions = []runtime.ActiveSubscription{{SubscriptionID: "research-alerts", Controller: "main", Category: bcp.Cat1, BandwidthBits: 3}}
	s := h.start(t)
	if !testproc.CheckFor(10*time.Second, 10*time.Millisecond, func() bool { return strings.Contains(h.logs.String(), "subscriptions 1 research-alerts") }) {
		t.Fatalf("runtime never reported its subscriptions; logs:\n%s", h.logs)
	}
	// stderr is relayed under the agent's sub-logger, at the parsed level.
	if !strings.Contains(h.logs.String(), "[DEBUG] gw.researcher: [DEBUG] fake runtime up") {
		t.Errorf("stderr line not relayed at debug under gw.researcher:\n%s", h.logs)
	}
	if got := h.audit.find("session_started", ""); len(got) != 1 {
		t.Errorf("session_started events = %d, want 1", len(got))
	}
	_ = s
}

// A message sent from outside the turns (an operator's verdict, a query's
// error) comes after every answer reserved before it: a verdict on an
// item never overtakes the answer that told the Reader it is held.
func TestSessionSendKeepsTheOrderOfAnswers(t *testing.T) {
	h := newHarness(t, "echo", "BCPPublish")
	reserved := make(chan *PendingReply, 1)
	h.audit.onMessage = func(s *Session, m Message) {
		if _, ok := m.(Publish); ok {
			reserved <- s.ReplyLater() // answered after a commit, say
		}
	}
	s := h.start(t)
	ctx := testproc.Context(t)
	if _, err := s.Turn(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: "publish"}); err != nil {
		t.Fatal(err)
	}
	var reply *PendingReply
	select {
	case reply = <-reserved:
	case <-ctx.Done():
		t.Fatal("the runtime's push never reached the owner")
	}
	// Send returns once run has taken the verdict, before the answer
	// reserved ahead of it is filled.
	if err := s.Send(ctx, runtime.ValidationResult{Type: runtime.TypeValidationResult, Detail: "decided"}); err != nil {
		t.Fatal(err)
	}
	reply.Send(runtime.ValidationResult{Type: runtime.TypeValidationResult, Detail: "held"})
	if !testproc.CheckFor(testproc.Wait, testproc.Poll, func() bool { return strings.Contains(h.logs.String(), `"detail":"decided"`) }) {
		t.Fatalf("the verdict never reached the runtime; logs:\n%s", h.logs)
	}
	logs := h.logs.String()
	if held, decided := strings.Index(logs, `"detail":"held"`), strings.Index(logs, `"detail":"decided"`); held < 0 || held > decided {
		t.Errorf("the runtime got the verdict before the answer reserved ahead of it (held at %d, decided at %d); logs:\n%s", held, decided, logs)
	}
}

func TestSessionNoAnnouncementWithoutPublishTool(t *testing.T) {
	h := newHarness(t, "sdk") // no BCPPublish
	h.cfg.Subscriptions = []runtime.ActiveSubscription{{SubscriptionID: "research-alerts", Controller: "main", Category: bcp.Cat1}}
	s := h.start(t)
	if err := s.Prompt(context.Background(), "marker", nil); err != nil {
		t.Fatal(err)
	}
	testproc.CheckFor(10*time.Second, 10*time.Millisecond, func() bool { return strings.Contains(h.logs.String(), "prompt marker") })
	if strings.Contains(h.logs.String(), "subscriptions 1") {
		t.Error("subscriptions announced to an agent without BCPPublish")
	}
}

func TestSessionEnvironmentIsClean(t *testing.T) {
	h := newHarness(t, "sdk")
	h.cfg.Def.Env["API_KEY"] = "${API_KEY}"
	h.cfg.Def.Env["GREETING"] = "hello ${HOME} $NOT_EXPANDED"
	s := h.start(t)
	if err := s.Prompt(context.Background(), "env", nil); err != nil {
		t.Fatal(err)
	}
	// The runtime writes ENV, then CWD, on stderr: wait for both lines,
	// which the relay may log a moment apart.
	var env string
	testproc.CheckFor(10*time.Second, 10*time.Millisecond, func() bool {
		for _, l := range strings.Split(h.logs.String(), "\n") {
			if i := strings.Index(l, "ENV "); i >= 0 {
				env = l[i+4:]
				return strings.Contains(h.logs.String(), "CWD ")
			}
		}
		return false
	})
	got := strings.Split(env, ";")
	want := []string{"API_KEY=k-123", "BCPGW_AGENT=researcher", fakert.Env + "=sdk", "GREETING=hello /home/op $NOT_EXPANDED", "HOME=/home/researcher", "PATH=" + os.Getenv("PATH")}
	if strings.Join(got, ";") != strings.Join(want, ";") {
		t.Errorf("runtime environment\n got %q\nwant %q", got, want)
	}
	if strings.Contains(env, "s3cret") {
		t.Error("a gateway variable that was not passed reached the runtime")
	}
	if !strings.Contains(h.logs.String(), "CWD "+h.cfg.Def.Workdir) {
		t.Errorf("runtime not started in its workdir %s:\n%s", h.cfg.Def.Workdir, h.logs)
	}
}

func TestSessionUnsetVariableFailsStart(t *testing.T) {
	h := newHarness(t, "sdk")
	h.cfg.Def.Env["TOKEN"] = "${NOT_SET_ANYWHERE}"
	_, err := Start(context.Background(), h.cfg)
	if err == nil || !strings.Contains(err.Error(), "env TOKEN: ${NOT_SET_ANYWHERE} is not set in the gateway's environment") {
		t.Fatalf("err = %v", err)
	}
	if perm := (interface{ Permanent() bool })(nil); !errors.As(err, &perm) || !perm.Permanent() {
		t.Errorf("an unset variable is not permanent: %v", err)
	}
}

func TestSessionStartFailures(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		mode  string
		argv  []string
		want  []string
		clock bool // advance the fake clock past the ready timeout
		// permanent: retrying cannot fix it, so the agent fails at once.
		permanent bool
	}{
		{name: "missing program", argv: []string{"./no/such/runtime"}, want: []string{"no such file or directory", "relative paths are resolved against the definition's directory"}, permanent: true},
		{name: "not executable", argv: []string{notExec}, want: []string{"permission denied", "is not executable: chmod +x it"}, permanent: true},
		{name: "not in PATH", argv: []string{"no-such-runtime-anywhere"}, want: []string{`runtime "no-such-runtime-anywhere" not found in PATH`}, permanent: true},
		{name: "exits early", mode: "exit-early", want: []string{"runtime exited before ready", "exited with code 7", "fatal: missing API key"}},
		{name: "non-JSON before ready", mode: "garbage", want: []string{"printed something that is not a protocol message before ready", "Loading model weights"}},
		{name: "no ready in time", mode: "no-ready", want: []string{"no ready within 30s of start"}, clock: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.mode)
			if tt.argv != nil {
				h.cfg.Def.Runtime = tt.argv
			}
			errc := make(chan error, 1)
			go func() {
				s, err := Start(context.Background(), h.cfg)
				if s != nil {
					s.Kill()
				}
				errc <- err
			}()
			if tt.clock {
				if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool { return h.clock.PendingFor(DefaultReadyTimeout) }) {
					t.Fatal("ready timer never set")
				}
				h.clock.Advance(DefaultReadyTimeout)
			}
			var err error
			select {
			case err = <-errc:
			case <-time.After(20 * time.Second):
				t.Fatal("Start did not return")
			}
			if err == nil {
				t.Fatal("Start succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			var perm interface{ Permanent() bool }
			if got := errors.As(err, &perm) && perm.Permanent(); got != tt.permanent {
				t.Errorf("error %q: permanent = %v, want %v", err, got, tt.permanent)
			}
		})
	}
}

func TestSessionGracefulStopDeliversShutdown(t *testing.T) {
	h := newHarness(t, "sdk")
	s := h.start(t)
	if err := s.Stop(context.Background(), "operator"); err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Errorf("Err() after a requested stop = %v, want nil", err)
	}
	if !strings.Contains(h.logs.String(), "runtime got shutdown, exiting") {
		t.Errorf("runtime did not see shutdown:\n%s", h.logs)
	}
	if len(h.audit.find("session_stopped", "")) != 1 {
		t.Error("no session_stopped event")
	}
	if err := s.Stop(context.Background(), "again"); err != nil {
		t.Errorf("second Stop = %v", err)
	}
	if err := s.Prompt(context.Background(), "late", nil); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Prompt after stop = %v, want ErrSessionClosed", err)
	}
}

func TestSessionIgnoringSIGTERMIsKilled(t *testing.T) {
	h := newHarness(t, "ignore-term")
	h.cfg.Clock = clock.System{} // the stop phases run in real time (200ms, then 1s)
	s := h.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Stop(ctx, "operator"); err != nil {
		t.Fatal(err)
	}
	logs := h.logs.String()
	for _, want := range []string{"sending SIGTERM", "a second after SIGTERM; sending SIGKILL"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if s.Err() != nil {
		t.Errorf("Err() = %v, want nil for a requested stop", s.Err())
	}
}

func TestSessionCrashIsReported(t *testing.T) {
	h := newHarness(t, "sdk")
	s := h.start(t)
	if err := s.Prompt(context.Background(), "crash", nil); err != nil {
		t.Fatal(err)
	}
	waitDone(t, s)
	var ee *ExitError
	if !errors.As(s.Err(), &ee) {
		t.Fatalf("Err() = %v, want an *ExitError", s.Err())
	}
	if ee.Code != 3 || len(ee.Stderr) == 0 || !strings.Contains(strings.Join(ee.Stderr, "\n"), "about to crash") {
		t.Errorf("exit error %+v, want code 3 and the last stderr lines", ee)
	}
	if len(h.audit.find("session_crashed", "")) != 1 {
		t.Error("no session_crashed event")
	}
}

func TestSessionIdleTimeout(t *testing.T) {
	h := newHarness(t, "sdk")
	s := h.start(t)
	if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool { return h.clock.PendingFor(time.Minute) }) {
		t.Fatal("idle timer never set")
	}
	h.clock.Advance(59 * time.Second)
	select {
	case <-s.Done():
		t.Fatal("stopped before the idle timeout")
	case <-time.After(50 * time.Millisecond):
	}
	h.clock.Advance(time.Second)
	waitDone(t, s)
	if s.Err() != nil {
		t.Errorf("idle stop Err() = %v, want nil", s.Err())
	}
	if len(h.audit.find("session_idle", "")) != 1 {
		t.Error("no session_idle event")
	}
}

func TestSessionPromptsRunInOrder(t *testing.T) {
	h := newHarness(t, "sdk")
	s := h.start(t)
	for _, p := range []string{"one", "two", "three"} {
		if err := s.Prompt(context.Background(), p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !testproc.CheckFor(10*time.Second, 10*time.Millisecond, func() bool { return len(h.audit.find("turn_done", "")) == 3 }) {
		t.Fatalf("turns done = %d, want 3", len(h.audit.find("turn_done", "")))
	}
	// The prompts are logged from the runtime's stderr, which is relayed
	// apart from the results on stdout: the last may still be on its way.
	testproc.CheckFor(10*time.Second, 10*time.Millisecond, func() bool { return strings.Contains(h.logs.String(), "prompt three") })
	logs := h.logs.String()
	i1, i2, i3 := strings.Index(logs, "prompt one"), strings.Index(logs, "prompt two"), strings.Index(logs, "prompt three")
	if i1 < 0 || !(i1 < i2 && i2 < i3) {
		t.Errorf("prompts not handled in order:\n%s", logs)
	}
}

func TestSessionHostileRuntimeIsContained(t *testing.T) {
	h := newHarness(t, "hostile") // no BCP tools at all
	h.cfg.MaxLine = 1 << 20
	s := h.start(t)
	want := []struct {
		code string
		frag string
	}{
		{string(bcp.ProtocolError), "line is not a JSON object"},
		{string(bcp.ProtocolError), "line too long"},
		{string(bcp.ProtocolError), "not valid UTF-8"},
		{string(bcp.ProtocolError), "line is not a JSON object (7 bytes)"},
		{string(bcp.ProtocolError), `unknown message type "launch_missiles"`},
		{string(bcp.ToolNotAllowed), "does not have the BCPQuery tool"},
		{string(bcp.ToolNotAllowed), "does not have the BCPPublish tool"},
		{string(bcp.ProtocolError), "exactly one of query_id and subscription_id"},
		{string(bcp.ProtocolError), "result without a prompt"},
		{string(bcp.ProtocolError), "ready sent twice"},
	}
	if !testproc.CheckFor(10*time.Second, 10*time.Millisecond, func() bool { return len(h.audit.find("refused", "")) >= len(want) }) {
		t.Fatalf("refusals = %d, want %d: %+v", len(h.audit.find("refused", "")), len(want), h.audit.find("refused", ""))
	}
	got := h.audit.find("refused", "")
	for i, w := range want {
		if i >= len(got) || got[i].Code != w.code || !strings.Contains(got[i].Detail, w.frag) {
			t.Errorf("refusal %d = %+v, want code %s and %q", i, got[i], w.code, w.frag)
		}
		if i < len(got) && len(got[i].Payload) > store.MaxPayload {
			t.Errorf("refusal %d keeps %d payload bytes", i, len(got[i].Payload))
		}
	}
	// The session survives all of it and still runs turns.
	if err := s.Prompt(context.Background(), "still there?", nil); err != nil {
		t.Fatal(err)
	}
	if !testproc.CheckFor(10*time.Second, 10*time.Millisecond, func() bool { return len(h.audit.find("turn_done", "")) == 1 }) {
		t.Fatal("hostile session stopped running turns")
	}
}

// Flooding runtimes: flood_test.go.

func TestStderrLevelOf(t *testing.T) {
	tests := []struct {
		line string
		want hclog.Level
	}{
		{"[ERROR] boom", hclog.Error},
		{"2026-11-21T10:00:00Z [WARN]  slow", hclog.Warn},
		{"DEBUG: details", hclog.Debug},
		{"time=x level=trace msg=y", hclog.Trace},
		{"WARNING something", hclog.Warn},
		{"plain text", hclog.Info},
		{"informational", hclog.Info},
	}
	for _, tt := range tests {
		if got := stderrLevelOf(tt.line); got != tt.want {
			t.Errorf("stderrLevelOf(%q) = %v, want %v", tt.line, got, tt.want)
		}
	}
}

func TestSafeLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\twith a tab, ünïcödé", "plain text\twith a tab, ünïcödé"},
		{"\x1b]52;c;aGk=\a\x1b[2J", `"\x1b]52;c;aGk=\a\x1b[2J"`},
		{"zero\u200bwidth", `"zero\u200bwidth"`},
	} {
		if got := safeLine(tc.in); got != tc.want {
			t.Errorf("safeLine(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
