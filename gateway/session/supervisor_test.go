package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/internal/fakert"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

func TestBackoff(t *testing.T) {
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for n, w := range want {
		if got := Backoff(n); got != w*time.Second {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, w*time.Second)
		}
	}
	if got := Backoff(1000); got != BackoffMax {
		t.Errorf("Backoff(1000) = %v, want the cap", got)
	}
}

// supervised loads a set of fake-runtime agents (name -> mode) and runs a
// supervisor on it with a fake clock.
func supervised(t *testing.T, autostart bool, modes map[string]string) (*Supervisor, *clock.Fake, *recorder, context.CancelFunc, chan error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, mode := range modes {
		def := fmt.Sprintf("---\nname: %s\nruntime: [%q, -test.run=^$]\nautostart: %v\nenv: {%s: %s}\n---\n", name, exe, autostart, fakert.Env, mode)
		if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	clock, rec := testproc.FakeClock(), &recorder{}
	sv := NewSupervisor(SupervisorConfig{
		Set: set, Clock: clock, Owner: rec,
		Logger:  hclog.New(&hclog.LoggerOptions{Output: &testproc.Buffer{}, Level: hclog.Trace}),
		Session: Config{Grace: 200 * time.Millisecond, WorkRoot: t.TempDir(), LookupEnv: func(k string) (string, bool) { return os.LookupEnv(k) }},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("supervisor did not stop")
		}
	})
	return sv, clock, rec, cancel, done
}

func stateOf(t *testing.T, sv *Supervisor, name string) AgentState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := sv.States(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m[name]
}

func TestSupervisorBackoffThenFailed(t *testing.T) {
	sv, clock, rec, _, _ := supervised(t, true, map[string]string{"worker": "ready-then-exit"})
	// Each crash schedules a restart after 1s, 2s, 4s, 8s, 16s; the sixth
	// crash within a minute marks the agent failed.
	for i, delay := range []time.Duration{1, 2, 4, 8, 16} {
		// The state is read first: a session whose process has exited
		// also waits a second on the same clock for its pipes to drain,
		// so a pending timer of 1s alone does not prove the restart's.
		if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool {
			return stateOf(t, sv, "worker") == StateBackoff && clock.PendingFor(delay*time.Second)
		}) {
			t.Fatalf("crash %d: state %s, want backoff with a restart timer of %v", i+1, stateOf(t, sv, "worker"), delay*time.Second)
		}
		clock.Advance(delay * time.Second)
	}
	if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool { return stateOf(t, sv, "worker") == StateFailed }) {
		t.Fatalf("state %s after 6 crashes in 31s, want failed", stateOf(t, sv, "worker"))
	}
	if got := len(rec.find("session_crashed", "")); got != 6 {
		t.Errorf("session_crashed events = %d, want 6", got)
	}
	if len(rec.find("agent_failed", "")) != 1 {
		t.Error("no agent_failed event")
	}
	// The owner heard of each crash, and of the five restarts after them.
	rec.mu.Lock()
	crashes, restarts := rec.crashes, strings.Join(rec.restarts, ",")
	rec.mu.Unlock()
	if want := strings.Repeat("worker crash,", 5); crashes != 6 || restarts+"," != want {
		t.Errorf("owner told of %d crashes and restarts %q, want 6 and %q", crashes, restarts, want)
	}
	if _, err := sv.Ensure(context.Background(), "worker"); !errors.Is(err, ErrAgentFailed) {
		t.Errorf("Ensure on a failed agent = %v, want ErrAgentFailed", err)
	}
	// An operator restart clears the state and starts it again.
	if err := sv.Reset(context.Background(), "worker"); err != nil {
		t.Fatal(err)
	}
	if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool { return len(rec.find("session_crashed", "")) == 7 }) {
		t.Error("agent not started again after Reset")
	}
}

func TestSupervisorStartsOnDemandAndStopsAll(t *testing.T) {
	sv, _, rec, cancel, done := supervised(t, false, map[string]string{"alpha": "sdk", "beta": "sdk"})
	if s := stateOf(t, sv, "alpha"); s != StateStopped {
		t.Fatalf("state %s before any work, want stopped (no autostart)", s)
	}
	ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	for _, name := range []string{"alpha", "beta"} {
		if err := sv.Prompt(ctx, name, "hello", nil); err != nil {
			t.Fatalf("Prompt(%s): %v", name, err)
		}
	}
	if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool { return len(rec.find("turn_done", "")) == 2 }) {
		t.Fatal("prompts not run")
	}
	if _, err := sv.Ensure(ctx, "nobody"); err == nil {
		t.Error("Ensure of an unknown agent succeeded")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
		done <- err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if got := len(rec.find("session_stopped", "")); got != 2 {
		t.Errorf("session_stopped events = %d, want 2", got)
	}
}

// An operator's stop of an agent waiting to restart after a crash cancels
// the restart: it stays stopped until started.
func TestSupervisorStopDuringBackoff(t *testing.T) {
	sv, clock, rec, _, _ := supervised(t, true, map[string]string{"worker": "ready-then-exit"})
	if !testproc.CheckFor(10*time.Second, 5*time.Millisecond, func() bool {
		return stateOf(t, sv, "worker") == StateBackoff && clock.PendingFor(time.Second)
	}) {
		t.Fatalf("no restart timer after the first crash (state %s)", stateOf(t, sv, "worker"))
	}
	if err := sv.Stop(context.Background(), "worker", "operator"); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, sv, "worker"); s != StateStopped {
		t.Fatalf("state after Stop in backoff = %s, want stopped", s)
	}
	clock.Advance(time.Minute) // the old restart time passes
	if got := len(rec.find("session_started", "")); got != 1 {
		t.Fatalf("session_started events = %d after Stop, want 1 (no restart)", got)
	}
	if s := stateOf(t, sv, "worker"); s != StateStopped {
		t.Errorf("state = %s a minute after Stop, want stopped", s)
	}
	all, err := sv.Agents(context.Background())
	if err != nil || len(all) != 1 || !all[0].Held {
		t.Errorf("Agents = %+v, %v; want worker held", all, err)
	}
	// Start releases it.
	if _, err := sv.Start(context.Background(), "worker"); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got := len(rec.find("session_started", "")); got != 2 {
		t.Errorf("session_started events = %d after Start, want 2", got)
	}
}
