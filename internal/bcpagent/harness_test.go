package bcpagent

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/llm"
	"github.com/bcpgw/bcpgw/internal/llm/llmtest"
	"github.com/bcpgw/bcpgw/internal/testproc"
	"github.com/bcpgw/bcpgw/runtime"
)

// testWait bounds every wait of these tests; it is a failure bound, not a
// timing assumption.
const testWait = 10 * time.Second

// gateway is the gateway's end of an in-process bcp-agent session.
type gateway struct {
	t     *testing.T
	enc   *runtime.Encoder
	msgs  chan runtime.Envelope
	done  chan error // Run's error, once
	agent *Agent
	audit []runtime.Envelope // text, tool_use, tool_result, log and error messages seen
	log   *testproc.Buffer   // the runtime's log (its stderr)
}

// providers are the APIs the loop tests run against: the loop must make
// conversations both accept.
var providers = []llmtest.API{llmtest.OpenAI, llmtest.Anthropic}

// forEachProvider runs f as a subtest per provider.
func forEachProvider(t *testing.T, f func(t *testing.T, api llmtest.API)) {
	for _, api := range providers {
		t.Run(string(api), func(t *testing.T) { f(t, api) })
	}
}

// setup is one session's configuration.
type setup struct {
	model    string            // PROVIDER:NAME; default openai:test-model
	noModel  bool              // start with no model at all
	srv      *llmtest.Server   // the fake provider
	env      map[string]string // more environment
	tools    []string
	maxTurns int
	cwd      string
	tune     func(*Config)
}

// startAgent runs an Agent on pipes, sends start and waits for ready.
func startAgent(t *testing.T, s setup) *gateway {
	t.Helper()
	g := runAgent(t, s)
	g.expect(runtime.TypeReady)
	return g
}

func runAgent(t *testing.T, s setup) *gateway {
	t.Helper()
	env := map[string]string{"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "ak-test"}
	if s.srv != nil {
		env["OPENAI_BASE_URL"] = s.srv.BaseURL()
		env["ANTHROPIC_BASE_URL"] = s.srv.BaseURL()
	}
	for k, v := range s.env {
		env[k] = v
	}
	logs := &testproc.Buffer{}
	cfg := Config{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Log:       logs,
		LLM:       llm.Options{Retry: llm.Retry{Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}},
	}
	if s.tune != nil {
		s.tune(&cfg)
	}
	a := New(cfg)
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	g := &gateway{t: t, enc: runtime.NewEncoder(stdinW), msgs: make(chan runtime.Envelope, 100), done: make(chan error, 1), agent: a, log: logs}
	go func() {
		err := runtime.Run(context.Background(), stdinR, stdoutW, a.Handler())
		a.Wait()
		stdoutW.Close()
		g.done <- err
	}()
	go func() {
		defer close(g.msgs)
		dec := runtime.NewDecoder(stdoutR, 0)
		for {
			env, err := dec.Next()
			if err != nil {
				return
			}
			g.msgs <- env
		}
	}()
	t.Cleanup(func() {
		stdinW.Close()
		for range g.msgs { // drain so the runtime never blocks on a write
		}
		g.wait()
		if t.Failed() {
			t.Logf("runtime log:\n%s", logs)
		}
	})
	model := s.model
	if model == "" && !s.noModel {
		model = "openai:test-model"
	}
	g.send(runtime.Start{Type: runtime.TypeStart, Agent: runtime.StartAgent{
		Name: "agent", Tools: s.tools, Model: model, SystemPrompt: "You are a test agent.", MaxTurns: s.maxTurns, Cwd: s.cwd,
	}})
	return g
}

// wait returns Run's error once Run returned (after the stdout is drained
// or closed).
func (g *gateway) wait() error {
	select {
	case err, ok := <-g.done:
		if ok {
			close(g.done)
		}
		return err
	case <-time.After(testWait):
		g.t.Error("the runtime did not end")
		return nil
	}
}

// rest returns every message until the runtime closes its stdout.
func (g *gateway) rest() []runtime.Envelope {
	var out []runtime.Envelope
	timeout := time.After(testWait)
	for {
		select {
		case env, ok := <-g.msgs:
			if !ok {
				return out
			}
			out = append(out, env)
		case <-timeout:
			g.t.Fatalf("the runtime did not close its stdout")
		}
	}
}

func (g *gateway) send(v any) {
	g.t.Helper()
	if err := g.enc.Encode(v); err != nil {
		g.t.Fatalf("send: %v", err)
	}
}

// auditOnly are the message types that only go to the audit log.
var auditOnly = map[string]bool{runtime.TypeText: true, runtime.TypeToolUse: true, runtime.TypeToolResult: true, runtime.TypeLog: true, runtime.TypeError: true}

// expect returns the next message that is not audit-only, which must be
// of type typ, decoded into v.
func (g *gateway) expect(typ string, v ...any) runtime.Envelope {
	g.t.Helper()
	timeout := time.After(testWait)
	for {
		select {
		case env, ok := <-g.msgs:
			if !ok {
				g.t.Fatalf("the runtime closed its stdout; want %s", typ)
			}
			if auditOnly[env.Type] {
				g.audit = append(g.audit, env)
				continue
			}
			if env.Type != typ {
				g.t.Fatalf("got %s (%s), want %s", env.Type, env.Raw, typ)
			}
			for _, x := range v {
				if err := env.Decode(x); err != nil {
					g.t.Fatal(err)
				}
			}
			return env
		case <-timeout:
			g.t.Fatalf("no %s within %s", typ, testWait)
			return runtime.Envelope{}
		}
	}
}

// audited returns the audit-only messages of type typ seen so far.
func (g *gateway) audited(typ string) []string {
	var out []string
	for _, env := range g.audit {
		if env.Type == typ {
			out = append(out, string(env.Raw))
		}
	}
	return out
}

// errors returns the messages of the error messages seen so far.
func (g *gateway) errors() []string {
	var out []string
	for _, env := range g.audit {
		var e runtime.Error
		if env.Type == runtime.TypeError && env.Decode(&e) == nil {
			out = append(out, e.Message)
		}
	}
	return out
}

// result waits for the turn's result.
func (g *gateway) result() runtime.Result {
	g.t.Helper()
	var r runtime.Result
	g.expect(runtime.TypeResult, &r)
	return r
}

func containsAll(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, s)
		}
	}
}
