package session

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/runtime"
)

// stopPhase is where a stopping session is in the shutdown sequence.
type stopPhase int

const (
	running    stopPhase = iota
	shutdown             // shutdown sent and stdin closed; waiting Grace
	terminated           // SIGTERM sent; waiting Grace
	killed               // SIGKILL sent
)

// loop is the state that run owns.
type loop struct {
	ready    bool
	inFlight *turn  // the turn sent that has no result yet
	queue    []turn // turns waiting
	phase    stopPhase
	stopWhy  string      // why the gateway stopped it (for the exit error)
	idleStop string      // stop once idle, for this reason (stopWhenIdle)
	asked    bool        // the stop was requested (not a crash)
	timer    clock.Timer // ready, idle or stop-phase timer
	flood    floodState
	// turnTimer fires when the turn in flight has had its turn timeout
	// without a result; stoppedTimer when no turn is in flight.
	turnTimer clock.Timer
}

// run is the session's owner goroutine. It ends when the runtime has
// exited and both pipes are drained.
func (s *Session) run(lines <-chan lineEvent, exited <-chan error) {
	l := &loop{flood: s.newFloodState()}
	l.timer = s.cfg.Clock.NewTimer(s.cfg.ReadyTimeout)
	l.turnTimer = stoppedTimer{}
	var exitErr error
	for {
		in := lines
		if !l.reading() {
			in = nil // throttled: the runtime's writes block meanwhile
		}
		select {
		case ev, ok := <-in:
			if !ok {
				lines = nil // stdout closed; the exit follows
				continue
			}
			s.handleLine(l, ev)
		case <-l.flood.pauseC():
			s.resume(l)
		case <-s.goneWhileThrottled(l):
			l.flood.exited = true
			s.resume(l)
		case t := <-s.workIfReady(l):
			l.queue = append(l.queue, t)
			s.dispatch(l)
		case <-s.replyReady:
			if err := s.flushReplies(); err != nil && !errors.Is(err, ErrSessionClosed) {
				s.stopNow(l, err.Error())
			}
		case msg := <-s.sends:
			if s.sendAfterReplies(msg) {
				continue
			}
			if err := s.send(msg); err != nil && !errors.Is(err, ErrSessionClosed) {
				s.stopNow(l, err.Error())
			}
		case why := <-s.stopCh:
			s.beginStop(l, why, true)
		case why := <-s.idleCh:
			l.idleStop = why
			if l.ready {
				s.dispatch(l)
			}
		case <-s.annReady:
			if l.ready && l.phase == running {
				s.reannounce()
			}
		case <-l.timer.C():
			s.timeout(l)
		case <-l.turnTimer.C():
			s.turnTimedOut(l)
		case exitErr = <-exited:
			s.finish(l, exitErr)
			return
		}
	}
}

// workIfReady accepts turns only once the runtime is ready and until it
// is to stop once idle; meanwhile submitters wait.
func (s *Session) workIfReady(l *loop) chan turn {
	if l.ready && l.phase == running && l.idleStop == "" {
		return s.work
	}
	return nil
}

func (s *Session) resetTimer(l *loop, d time.Duration) {
	l.timer.Stop()
	if d <= 0 {
		l.timer = stoppedTimer{}
		return
	}
	l.timer = s.cfg.Clock.NewTimer(d)
}

// dispatch sends the next turn if none is in flight, or arms the idle
// timer when there is nothing to do.
func (s *Session) dispatch(l *loop) {
	defer func() { s.waiting.Store(int32(len(l.queue))) }()
	if l.inFlight != nil || l.phase != running {
		return
	}
	if len(l.queue) == 0 {
		if l.idleStop != "" {
			s.beginStop(l, l.idleStop, true)
			return
		}
		s.resetTimer(l, s.cfg.Def.IdleTimeout)
		return
	}
	t := l.queue[0]
	l.queue[0] = turn{}
	l.queue = l.queue[1:]
	s.resetTimer(l, 0) // busy: no idle timer while a turn runs
	l.inFlight = &t
	l.flood.answered = false
	l.turnTimer = s.cfg.Clock.NewTimer(s.turnTimeout())
	if err := s.send(t.msg); err != nil {
		s.stopNow(l, err.Error())
		return
	}
	if t.sent != nil {
		close(t.sent)
	}
}

func (s *Session) timeout(l *loop) {
	switch {
	case !l.ready && l.phase == running:
		s.startFailed(l, fmt.Sprintf("no ready within %s of start", s.cfg.ReadyTimeout))
	case l.phase == running:
		s.audit("session_idle", "", fmt.Sprintf("idle for %s", s.cfg.Def.IdleTimeout), nil)
		s.beginStop(l, "idle timeout", true)
	case l.phase == shutdown:
		s.log.Warn("runtime still running after shutdown; sending SIGTERM", "grace", s.cfg.Grace)
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		l.phase = terminated
		// A stop waits at most the grace and one second.
		s.resetTimer(l, time.Second)
	case l.phase == terminated:
		s.log.Warn("runtime still running a second after SIGTERM; sending SIGKILL")
		s.Kill()
		l.phase = killed
		s.resetTimer(l, 0)
	}
}

// turnTimeout is the agent's turn_timeout, else the gateway's default.
func (s *Session) turnTimeout() time.Duration {
	if d := s.cfg.Def.TurnTimeout; d > 0 {
		return d
	}
	return s.cfg.TurnTimeout
}

// turnTimedOut ends a session whose runtime has not answered the turn in
// flight within the turn timeout: it is hung (deadlocked, SIGSTOPped,
// waiting for something that never comes) and holds its work for ever
// otherwise. The stop is the usual graceful sequence, whose SIGKILL ends
// even a stopped process; it is not a requested stop but the runtime's
// failure, so Err reports it like a crash: the supervisor restarts the
// agent (counting it toward failed), and the turn's owner gets
// ErrSessionClosed and sends the turn to the next session (the courier
// marks a delivery redelivered).
func (s *Session) turnTimedOut(l *loop) {
	if l.inFlight == nil || l.phase != running {
		return // answered, or already stopping
	}
	why := fmt.Sprintf("turn timeout: no result for %s within %s", turnName(l.inFlight.msg), s.turnTimeout())
	s.log.Error("runtime hung in a turn; stopping it", "reason", why)
	s.audit("turn_timeout", "", why, nil)
	s.beginStop(l, why, false)
}

// beginStop starts the graceful sequence: shutdown, then close stdin.
func (s *Session) beginStop(l *loop, why string, asked bool) {
	if l.phase != running {
		return
	}
	l.asked = asked
	if !asked {
		l.stopWhy = why
	}
	_ = s.send(runtime.Shutdown{Type: runtime.TypeShutdown, Reason: why})
	s.closeOut()
	l.phase = shutdown
	s.resetTimer(l, s.cfg.Grace)
}

// stopNow kills a misbehaving runtime at once.
func (s *Session) stopNow(l *loop, why string) {
	if l.phase == killed {
		return
	}
	s.log.Error("stopping runtime", "reason", why)
	s.audit("session_killed", bcp.ProtocolError, why, nil)
	s.closeOut()
	l.stopWhy, l.asked = why, false
	s.Kill()
	l.phase = killed
	s.resetTimer(l, 0)
}

// startFailed ends a session that never became ready.
func (s *Session) startFailed(l *loop, why string) {
	s.mu.Lock()
	if s.startErr == nil {
		s.startErr = fmt.Errorf("start %s: %s", s.name, why)
	}
	s.mu.Unlock()
	s.stopNow(l, why)
}

// signalName is a signal as people write it in prose: "SIGKILL", not
// Go's "killed" (which made "killed by killed").
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// finish records how the session ended and releases everyone waiting.
func (s *Session) finish(l *loop, waitErr error) {
	l.timer.Stop()
	s.resume(l)
	l.turnTimer.Stop()
	exit := &ExitError{Agent: s.name, Code: s.cmd.ProcessState.ExitCode(), Reason: l.stopWhy, Stderr: s.stderrTail()}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Signal = signalName(ws.Signal())
		}
	}
	if s.sandbox != nil {
		// The helper saw how the runtime itself ended.
		if ex := s.sandbox.Exit(); ex != nil {
			exit.Code, exit.Signal = ex.Code, ""
			if ex.Signal != 0 {
				exit.Signal = signalName(syscall.Signal(ex.Signal))
			}
		} else if exit.Signal == "" && exit.Reason == "" {
			exit.Reason = fmt.Sprintf("the sandbox's init ended (code %d) without the runtime's status", exit.Code)
		}
		s.sandbox.Close()
	}
	if !l.ready {
		s.mu.Lock()
		if s.startErr == nil {
			s.startErr = fmt.Errorf("start %s: runtime exited before ready: %w", s.name, exit)
		}
		s.mu.Unlock()
	}
	var err error
	switch {
	case l.asked:
		s.audit("session_stopped", "", "stopped", nil)
	default:
		err = exit
		s.audit("session_crashed", "", exit.Error(), nil)
	}
	s.closeOut()
	// Turns not answered are for the next session: tell their owners.
	if l.inFlight != nil {
		if l.asked {
			l.inFlight.done <- ErrStoppedOnRequest
		} else {
			l.inFlight.done <- ErrSessionClosed
		}
	}
	for _, t := range l.queue {
		t.done <- ErrSessionClosed
	}
	s.waiting.Store(0)
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	close(s.done)
}

// handleLine applies the protocol to one line from the runtime.
func (s *Session) handleLine(l *loop, ev lineEvent) {
	if !s.countLine(l, ev) {
		return
	}
	if l.phase == killed {
		return
	}
	var le *runtime.LineError
	if errors.As(ev.err, &le) {
		if !l.ready {
			s.startFailed(l, fmt.Sprintf("printed something that is not a protocol message before ready (%v): %q", le.Err, le.Head))
			return
		}
		s.refuse(bcp.ProtocolError, le.Error(), le.Head)
		return
	}
	env := ev.env
	if !l.ready {
		switch env.Type {
		case runtime.TypeReady:
			l.ready = true
			s.announce()
			close(s.ready)
			s.dispatch(l)
		case runtime.TypeLog, runtime.TypeError, runtime.TypeText:
			s.auditOnly(env)
		default:
			s.refuse(bcp.ProtocolError, fmt.Sprintf("%q before ready", env.Type), env.Raw)
		}
		return
	}
	switch env.Type {
	case runtime.TypeResult:
		if l.inFlight == nil {
			s.refuse(bcp.ProtocolError, "result without a prompt or delivery in progress", env.Raw)
			return
		}
		s.audit("turn_done", "", turnDetail(l.inFlight.msg, env), env.Raw)
		l.turnTimer.Stop()
		l.turnTimer = stoppedTimer{}
		l.inFlight.done <- nil
		l.inFlight = nil
		s.dispatch(l)
	case runtime.TypeReady:
		s.refuse(bcp.ProtocolError, "ready sent twice", env.Raw)
	case runtime.TypeLog, runtime.TypeError, runtime.TypeText, runtime.TypeToolUse, runtime.TypeToolResult, runtime.TypeInterrupted:
		s.auditOnly(env)
	case runtime.TypeQueryRequest:
		if !s.holds(agents.ToolQuery) {
			// Refused before the spec is even read, and answered the way
			// a refused query is, so the runtime's waiting call ends; and
			// audited. Only what the answer names is decoded.
			var head struct {
				RequestID string `json:"request_id"`
				To        string `json:"to"`
			}
			if err := env.Decode(&head); err != nil {
				s.refuse(bcp.ProtocolError, err.Error(), env.Raw)
				return
			}
			reason := bcp.Errorf(bcp.ToolNotAllowed, "Agent '%s' does not have the %s tool", s.name, agents.ToolQuery).Error()
			s.audit("refused", bcp.ToolNotAllowed, reason, env.Raw)
			qe := runtime.QueryError{Type: runtime.TypeQueryError, RequestID: head.RequestID, ToAgent: head.To, Reason: reason}
			if s.cfg.Def.TriOnyx() {
				// Its runtime answers a query error with result: a turn
				// of its own (see Gateway.replyQueryError).
				l.queue = append(l.queue, turn{msg: qe, done: make(chan error, 1)})
				s.dispatch(l)
				return
			}
			s.Reply(qe)
			return
		}
		// Decoded once, spec and all: a refused spec still names the
		// request, so that the owner can answer it.
		q, err := runtime.DecodeQueryRequest(env.Raw)
		var specErr *runtime.SpecError
		if err != nil && !errors.As(err, &specErr) {
			s.refuse(bcp.ProtocolError, err.Error(), env.Raw)
			return
		}
		s.cfg.Owner.Message(s, QueryRequest{Request: q, SpecErr: specErr, line: env.Raw})
	case runtime.TypeSubscribeRequest:
		r, err := runtime.DecodeSubscribeRequest(env.Raw)
		var specErr *runtime.SpecError
		if err != nil && !errors.As(err, &specErr) {
			s.refuse(bcp.ProtocolError, err.Error(), env.Raw)
			return
		}
		if !s.holds(agents.ToolSubscribe) {
			// A Reader, or a Controller without the tool, never reaches
			// the approval queue.
			reason := bcp.Errorf(bcp.ToolNotAllowed, "Agent '%s' does not have the %s tool", s.name, agents.ToolSubscribe).Error()
			s.audit("refused", bcp.ToolNotAllowed, reason, env.Raw)
			s.Reply(runtime.SubscribeResult{Type: runtime.TypeSubscribeResult, RequestID: r.RequestID, Status: runtime.SubscribeRejected,
				ToAgent: r.To, Reason: reason})
			return
		}
		s.cfg.Owner.Message(s, SubscribeRequest{Request: r, SpecErr: specErr, line: env.Raw})
	case runtime.TypeResponse:
		var r runtime.Response
		if err := env.Decode(&r); err != nil {
			s.refuse(bcp.ProtocolError, err.Error(), env.Raw)
			return
		}
		tool := agents.ToolRespond
		switch {
		case (r.QueryID == "") == (r.SubscriptionID == ""):
			s.refuse(bcp.ProtocolError, "bcp_response needs exactly one of query_id and subscription_id", env.Raw)
			return
		case r.SubscriptionID != "":
			tool = agents.ToolPublish
		}
		if !s.holds(tool) {
			detail := bcp.Errorf(bcp.ToolNotAllowed, "Agent '%s' does not have the %s tool", s.name, tool).Error()
			s.audit("refused", bcp.ToolNotAllowed, detail, env.Raw)
			s.Reply(runtime.ValidationResult{Type: runtime.TypeValidationResult, QueryID: r.QueryID, SubscriptionID: r.SubscriptionID, Detail: detail})
			return
		}
		if tool == agents.ToolPublish {
			s.cfg.Owner.Message(s, Publish{Response: r, line: env.Raw})
		} else {
			s.cfg.Owner.Message(s, Answer{Response: r, line: env.Raw})
		}
	default:
		if why, ok := runtime.Unsupported(env.Type); ok {
			s.unsupported(env, why)
			return
		}
		s.refuse(bcp.ProtocolError, fmt.Sprintf("unknown message type %q", env.Type), env.Raw)
	}
}

// unsupported answers a TriOnyx request bcpgw does not implement: an
// error saying so, audited as a refusal, and the "<name>_response" that
// TriOnyx's runtime waits for, so that its tool call fails at once
// instead of timing out.
func (s *Session) unsupported(env runtime.Envelope, why string) {
	detail := fmt.Sprintf("%s is not supported by bcpgw: %s", env.Type, why)
	s.refuse(bcp.ProtocolError, detail, env.Raw)
	var req struct {
		RequestID string `json:"request_id"`
	}
	if env.Decode(&req) != nil || !runtime.ValidID(req.RequestID) {
		return // nothing it could match an answer with
	}
	_ = s.send(runtime.UnsupportedReply{Type: runtime.ReplyType(env.Type), RequestID: req.RequestID, Detail: string(bcp.ProtocolError) + ": " + detail})
}

// turnDetail says what a turn was and what its result reported: turns,
// time, cost and tokens, read from usage{} or from the top-level counts
// TriOnyx's runtime writes.
func turnDetail(msg any, env runtime.Envelope) string {
	what := turnName(msg)
	var r runtime.Result
	if err := env.Decode(&r); err != nil {
		return what + " done; its result could not be read: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s done: %d model turns, %d ms, $%.4f", what, r.NumTurns, r.DurationMS, r.CostUSD)
	if u := r.Usage; u != nil {
		fmt.Fprintf(&b, ", tokens %d in, %d out", u.InputTokens, u.OutputTokens)
		if u.CacheCreationInputTokens != 0 || u.CacheReadInputTokens != 0 {
			fmt.Fprintf(&b, " (cache: %d written, %d read)", u.CacheCreationInputTokens, u.CacheReadInputTokens)
		}
	}
	if r.IsError {
		b.WriteString(", is_error")
	}
	return b.String()
}

// turnName says what a turn is, for its events: "delivery dl-...",
// "query q-...", "prompt".
func turnName(msg any) string {
	switch m := msg.(type) {
	case runtime.Prompt:
		return "prompt"
	case runtime.Query:
		return "query " + m.QueryID
	case runtime.ResponseDelivery:
		return "delivery " + m.DeliveryID
	case runtime.QueryError:
		return "query error for request " + m.RequestID
	}
	return "turn"
}

// auditOnly records a message that has no effect beyond the audit log;
// log messages also go to the agent's logger.
func (s *Session) auditOnly(env runtime.Envelope) {
	if env.Type == runtime.TypeLog {
		var m runtime.Log
		if env.Decode(&m) == nil {
			level := hclog.LevelFromString(m.Level)
			if level == hclog.NoLevel {
				level = hclog.Info
			}
			s.log.Log(level, m.Message)
		}
		return
	}
	s.audit("runtime_"+env.Type, "", "", env.Raw)
}

// holds reports whether the session may use tool: its own definition and
// the one in force now must both grant it.
func (s *Session) holds(tool string) bool {
	return s.cfg.Def.HasTool(tool) && s.cfg.Owner.Holds(s.name, tool)
}

// announce tells a Reader its subscriptions after ready, if it may
// publish: the latest list given to setAnnounced, else the one it started with.
func (s *Session) announce() {
	subs, fresh := s.takeAnnounced()
	if !fresh {
		subs = s.cfg.Subscriptions
	}
	if len(subs) == 0 || !s.cfg.Def.HasTool(agents.ToolPublish) {
		return
	}
	_ = s.send(runtime.SubscriptionsActive{Type: runtime.TypeSubscriptionsActive, Subscriptions: subs})
}

// reannounce sends the list given to setAnnounced, even an empty one: a
// Reader told its subscriptions must also hear that they are gone.
func (s *Session) reannounce() {
	subs, fresh := s.takeAnnounced()
	if !fresh || !s.cfg.Def.HasTool(agents.ToolPublish) {
		return
	}
	if subs == nil {
		subs = []runtime.ActiveSubscription{}
	}
	s.audit("subscriptions_announced", "", fmt.Sprintf("%d active after a reload or an operator's decision", len(subs)), nil)
	_ = s.send(runtime.SubscriptionsActive{Type: runtime.TypeSubscriptionsActive, Subscriptions: subs})
}

// takeAnnounced returns and clears the list given to setAnnounced; fresh is
// false if there is none.
func (s *Session) takeAnnounced() (subs []runtime.ActiveSubscription, fresh bool) {
	s.annMu.Lock()
	defer s.annMu.Unlock()
	if s.announced == nil {
		return nil, false
	}
	subs = *s.announced
	s.announced = nil
	return subs, true
}

// stoppedTimer never fires.
type stoppedTimer struct{}

func (stoppedTimer) C() <-chan time.Time { return nil }
func (stoppedTimer) Stop() bool          { return false }
