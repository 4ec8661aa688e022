package session

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/sandbox"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/runtime"
	"golang.org/x/sys/unix"
)

// Session defaults. See Config.
const (
	DefaultReadyTimeout = 30 * time.Second
	DefaultGrace        = 5 * time.Second
	// DefaultTurnTimeout bounds one turn when neither the definition
	// (turn_timeout) nor the gateway (bcpgw run --turn-timeout) says
	// otherwise. Generous: a model turn with many tool calls takes
	// minutes; a runtime silent for a quarter of an hour is hung.
	DefaultTurnTimeout = 15 * time.Minute
	// DefaultFloodRate and DefaultFloodBurst bound what one runtime may
	// write on stdout: 200 lines a second sustained, bursts of 1,000, not
	// counting the lines the gateway asked for (see flood.go). An agent
	// driven by a model writes a few lines a second; a runtime over the
	// limit is slowed (its stdout is read at the limit), so it cannot
	// starve the gateway or the other sessions, and stopped only after
	// DefaultFloodStopAfter of that without doing anything it was asked
	// to. Stderr lines over the same limit are dropped, and counted.
	DefaultFloodRate      = 200.0
	DefaultFloodBurst     = 1000
	DefaultFloodStopAfter = 30 * time.Second
	// maxPendingOut bounds the bytes waiting to be written to a runtime's
	// stdin (beyond the pipe's own buffer). A runtime that stops reading
	// fills it and is stopped; one that reads never comes near it, even
	// when a group commit answers hundreds of publishes at once.
	maxPendingOut = 8 << 20
	// stderrTail is how many stderr lines an exit error keeps.
	stderrTail = 10
	// maxStderrLine bounds one relayed stderr line.
	maxStderrLine = 8 << 10
)

// Config configures one runtime session.
type Config struct {
	// Def is the agent. Required.
	Def *agents.Definition
	// Subscriptions are announced (bcp_subscriptions_active) right after
	// ready when the agent holds BCPPublish and there is at least one.
	// The supervisor replaces them later, after a reload.
	Subscriptions []runtime.ActiveSubscription
	// Logger receives the session's own log lines and the runtime's
	// stderr, under a sub-logger named after the agent. Default: discard.
	Logger hclog.Logger
	// Owner receives the session's events and BCP messages. Default: one
	// that logs the events and refuses the messages as not routed.
	Owner Owner
	// Clock times the ready timeout, idle timeout and the stop phases.
	// Default: the system clock.
	Clock clock.Clock
	// LookupEnv reads the gateway's environment for PATH, HOME, LANG and
	// ${VAR} in the definition's env. Default: os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// ReadyTimeout bounds the wait for ready. Default DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// Grace is how long a stopping runtime gets after shutdown, and again
	// after SIGTERM, before SIGKILL. Default DefaultGrace.
	Grace time.Duration
	// TurnTimeout bounds a turn of an agent whose definition sets no
	// turn_timeout: a runtime with no result within it is stopped as a
	// crashed one, and the turn goes to the next session. Default
	// DefaultTurnTimeout.
	TurnTimeout time.Duration
	// MaxLine bounds one stdout line. Default runtime.DefaultMaxLine.
	MaxLine int
	// FloodRate (lines per second) and FloodBurst bound stdout and stderr
	// for agents whose definition sets no flood_limit (its fields, when
	// set, win). Defaults DefaultFloodRate and DefaultFloodBurst.
	FloodRate  float64
	FloodBurst int
	// FloodStopAfter is how long a runtime may stay throttled without
	// writing a line the gateway asked for before it is stopped for
	// flooding. Default DefaultFloodStopAfter.
	FloodStopAfter time.Duration
	// SandboxHelper is the sandbox helper program. Default:
	// sandbox.Helper() (bcpgw-sandbox beside the executable, else the
	// executable itself).
	SandboxHelper string
	// WorkRoot holds the working directories of agents whose definition
	// sets none: STATE/work/NAME, created 0700. Required for such agents.
	WorkRoot string
	// Egress returns the unix socket of the gateway's egress proxy for an
	// agent whose network is a list of destinations. Nil refuses such
	// agents.
	Egress func(def *agents.Definition) (string, error)
	// Spawn starts a runtime's process (a reaper may want to know of it);
	// Release is told when it has been waited for. Default: cmd.Start.
	Spawn   func(cmd *exec.Cmd) error
	Release func(pid int)
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Owner == nil {
		c.Owner = logOwner{log: c.Logger}
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.LookupEnv == nil {
		c.LookupEnv = os.LookupEnv
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.TurnTimeout <= 0 {
		c.TurnTimeout = DefaultTurnTimeout
	}
	if c.MaxLine <= 0 {
		c.MaxLine = runtime.DefaultMaxLine
	}
	if c.FloodRate <= 0 {
		c.FloodRate = DefaultFloodRate
	}
	if c.FloodBurst <= 0 {
		c.FloodBurst = DefaultFloodBurst
	}
	if c.FloodStopAfter <= 0 {
		c.FloodStopAfter = DefaultFloodStopAfter
	}
}

// ExitError is how a runtime ended when nobody asked it to: its exit
// status and the last lines it wrote to stderr.
type ExitError struct {
	Agent  string
	Code   int    // exit code, or -1 when killed by a signal
	Signal string // the signal's name ("SIGKILL"), if any
	Reason string // why the gateway stopped it, if it did (e.g. flooding)
	Stderr []string
}

func (e *ExitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "runtime of %s ", e.Agent)
	switch {
	case e.Reason != "":
		fmt.Fprintf(&b, "stopped by the gateway: %s", e.Reason)
	case e.Signal != "":
		fmt.Fprintf(&b, "killed by %s", e.Signal)
	default:
		fmt.Fprintf(&b, "exited with code %d", e.Code)
	}
	if len(e.Stderr) > 0 {
		fmt.Fprintf(&b, "; last stderr: %s", strings.Join(e.Stderr, " | "))
	}
	return b.String()
}

// ErrSessionClosed is returned when work is submitted to a session that
// has ended.
var ErrSessionClosed = errors.New("session closed")

// Session is one runtime process, from spawn to exit. One goroutine (run)
// owns its state; the others send it typed messages. Create it with
// Start.
type Session struct {
	cfg     Config
	id      string // names the session in its events (their ref)
	name    string
	started time.Time
	log     hclog.Logger
	cmd     *exec.Cmd

	out    *lineQueue  // to the stdin writer
	work   chan turn   // prompts, queries and deliveries, in order
	sends  chan any    // messages sent right away (not turns)
	stopCh chan string // stop requests, with a reason
	idleCh chan string // stop-when-idle requests, with a reason
	// idleAsked is set by stopWhenIdle before it asks run: a Turn that
	// comes after it must not be taken, even if run sees the turn first.
	idleAsked atomic.Bool
	// waiting is how many turns wait behind the one in flight (Waiting);
	// only run sets it.
	waiting atomic.Int32
	done    chan struct{}
	// gone is closed when the runtime's process has exited, which may be
	// before its pipes are drained (never, if pidfds are not available):
	// what a throttled runtime left in its pipe is then read at once.
	gone chan struct{}

	ready    chan struct{} // closed when ready arrives
	startErr error         // set before done closes, if the start failed
	sandbox  *sandbox.Cmd  // nil when the agent is not sandboxed
	report   sandbox.Report

	mu     sync.Mutex
	err    error // why the session ended; nil if stopped on request
	stderr []string

	// replies keeps answers to the runtime in the order of the messages
	// they answer, even when some are completed later by other goroutines
	// (a publish is answered after its commit). replyReady wakes run.
	replyMu    sync.Mutex
	replies    []*PendingReply
	replyReady chan struct{}

	// announced holds the subscriptions to announce next (set by
	// setAnnounced); annReady wakes run to send them.
	annMu     sync.Mutex
	announced *[]runtime.ActiveSubscription
	annReady  chan struct{}
}

// turn is one unit of work that ends with the runtime's result.
type turn struct {
	msg  any
	done chan error    // receives nil on result, ErrSessionClosed if the session ends first
	sent chan struct{} // if not nil, closed once msg is handed to the runtime
}

// Start spawns the definition's runtime and returns once it has
// answered start with ready and been told its subscriptions. On failure
// the error says why: not executable, exited early, printed something
// that is not JSON before ready, or no ready in time. ctx bounds the start
// only; stop a running session with Stop.
func Start(ctx context.Context, cfg Config) (*Session, error) {
	cfg.defaults()
	def := cfg.Def
	s := &Session{
		cfg:    cfg,
		id:     store.NewID("ses-", 8),
		name:   def.Name,
		log:    cfg.Logger.Named(def.Name),
		out:    newLineQueue(),
		work:   make(chan turn),
		sends:  make(chan any),
		stopCh: make(chan string, 1),
		idleCh: make(chan string, 1),
		done:   make(chan struct{}),
		gone:   make(chan struct{}),
		ready:  make(chan struct{}),

		replyReady: make(chan struct{}, 1),
		annReady:   make(chan struct{}, 1),
	}
	fail := func(err error) (*Session, error) { return nil, fmt.Errorf("start %s: %w", def.Name, err) }
	env, err := runtimeEnv(def, cfg.LookupEnv)
	if err != nil {
		return fail(err)
	}
	path, _ := envValue(env, "PATH")
	prog, err := runtimeProgram(def, path)
	if err != nil {
		return fail(err)
	}
	workdir, err := cfg.workdir(def)
	if err != nil {
		return fail(err)
	}
	// start is the first line on stdin. It is queued before anything is
	// spawned, so nothing can fail between spawning and supervising, and
	// every later send happens on the run goroutine.
	if err := s.send(runtime.Start{Type: runtime.TypeStart, Agent: runtime.StartAgent{
		Name: def.Name, Tools: nonNil(def.Tools), Model: def.Model, SystemPrompt: def.SystemPrompt,
		MaxTurns: def.MaxTurns, Cwd: workdir,
	}}); err != nil {
		return fail(err)
	}
	cmd, err := s.command(def, prog, env, workdir)
	if err != nil {
		return fail(err)
	}
	// Until run owns the session (its finish closes the sandbox's status
	// pipe), a failed start closes it here.
	owned := false
	defer func() {
		if !owned && s.sandbox != nil {
			s.sandbox.Close()
		}
	}()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fail(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return fail(err)
	}
	if cfg.Spawn != nil {
		err = cfg.Spawn(cmd)
	} else {
		err = cmd.Start()
	}
	if s.sandbox != nil {
		s.sandbox.Started()
	}
	if err != nil {
		return fail(spawnError(def, prog, s.sandbox != nil, err))
	}
	// Watch for the process's own exit without reaping it: a process
	// that left children holding its pipes must not hold up the end.
	pidfd, pidErr := unix.PidfdOpen(cmd.Process.Pid, 0)
	if s.sandbox != nil {
		rctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
		s.report, err = s.sandbox.WaitReady(rctx)
		cancel()
		if err != nil {
			// The helper's whole group: it may be stuck in its setup.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			stdout.Close()
			stderr.Close()
			stdin.Close()
			_ = cmd.Wait()
			if cfg.Release != nil {
				cfg.Release(cmd.Process.Pid)
			}
			if pidErr == nil {
				unix.Close(pidfd)
			}
			s.sandbox.Close()
			return fail(err)
		}
	}
	s.cmd, s.started = cmd, cfg.Clock.Now()
	s.audit("session_started", "", fmt.Sprintf("pid %d: %s (%s)", cmd.Process.Pid, strings.Join(def.Runtime, " "), s.sandboxSummary()), nil)

	lines := make(chan lineEvent)
	exited := make(chan error, 1)
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() { defer pipes.Done(); s.readStdout(stdout, lines) }()
	go func() { defer pipes.Done(); s.relayStderr(stderr) }()
	go s.writeStdin(stdin)
	go func() {
		// Wait only after both pipes hit EOF, as os/exec requires; but
		// once the process itself has exited, its pipes get one more
		// second (a daemon it left behind may hold them open forever).
		// That second is the host's, not cfg.Clock's: it is how long
		// the kernel may take to hand over what the runtime wrote last,
		// and a test's fake clock moving on must not cut that short.
		drained := make(chan struct{})
		go func() { pipes.Wait(); close(drained) }()
		gone := s.gone
		if pidErr == nil {
			go func() { waitExit(pidfd); close(gone) }()
			select {
			case <-drained:
			case <-gone:
				t := time.NewTimer(time.Second)
				select {
				case <-drained:
				case <-t.C:
					s.log.Warn("runtime exited but something it started holds its pipes; closing them")
					stdout.Close()
					stderr.Close()
					<-drained
				}
				t.Stop()
			}
		}
		<-drained
		err := cmd.Wait()
		if cfg.Release != nil {
			cfg.Release(cmd.Process.Pid)
		}
		if pidErr == nil {
			// The watcher returns once the process is reaped; only then
			// may its descriptor number be reused.
			<-gone
			unix.Close(pidfd)
		}
		exited <- err
	}()
	go s.run(lines, exited)
	owned = true

	select {
	case <-s.ready:
		return s, nil
	case <-s.done:
		return nil, s.startErr
	case <-ctx.Done():
		s.Kill()
		<-s.done
		return fail(ctx.Err())
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func envValue(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v, true
		}
	}
	return "", false
}

// startHint explains the common reasons a runtime cannot be executed.
func startHint(prog string, err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return " (check the runtime path in the definition; relative paths are resolved against the definition's directory)"
	case errors.Is(err, os.ErrPermission):
		return fmt.Sprintf(" (%s is not executable: chmod +x it)", prog)
	}
	return ""
}

// Name is the agent's name.
func (s *Session) Name() string { return s.name }

// Def returns the definition the session was started with (a reload may
// have replaced it since; the owner's Holds says what is in force).
func (s *Session) Def() *agents.Definition { return s.cfg.Def }

// ID names the session; its events carry it as their ref.
func (s *Session) ID() string { return s.id }

// StartedAt is when the runtime was spawned.
func (s *Session) StartedAt() time.Time { return s.started }

// Pid is the runtime's process id.
func (s *Session) Pid() int { return s.cmd.Process.Pid }

// Done is closed when the runtime has exited and the session is over.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err says why the session ended, once Done is closed: nil when it was
// stopped on request (Stop, idle timeout), an *ExitError when the runtime
// crashed or was stopped for misbehaving.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Ended reports whether the session has ended (its owner may not have
// heard of it yet).
func (s *Session) Ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Waiting reports how many turns are queued behind the one in flight,
// not yet handed to the runtime; 0 once the session has ended (they were
// answered ErrSessionClosed). The session's own goroutine counts a turn
// a moment after Turn or TurnSent has returned for it: a test polls.
func (s *Session) Waiting() int { return int(s.waiting.Load()) }

// Prompt queues a prompt turn. Turns run one at a time in order.
func (s *Session) Prompt(ctx context.Context, content string, metadata map[string]any) error {
	_, err := s.Turn(ctx, runtime.Prompt{Type: runtime.TypePrompt, Content: content, Metadata: metadata})
	return err
}

// Turn queues msg (a prompt, bcp_query or bcp_response_delivery) as a
// turn: turns are sent one at a time, in order, each once the runtime has
// answered result for the one before. The returned channel receives nil
// when the runtime answers result for msg, or ErrSessionClosed if the
// session ends first. It waits while the runtime is starting or stopping
// (a stopping session answers ErrSessionClosed once it has ended).
func (s *Session) Turn(ctx context.Context, msg any) (<-chan error, error) {
	t := turn{msg: msg, done: make(chan error, 1)}
	return t.done, s.queueTurn(ctx, t)
}

// TurnSent is Turn that also says when msg is handed to the runtime (sent
// is closed then): until then it waits behind the turns queued before it,
// and a session that ends before has not shown it to the runtime at all.
func (s *Session) TurnSent(ctx context.Context, msg any) (sent <-chan struct{}, done <-chan error, err error) {
	t := turn{msg: msg, done: make(chan error, 1), sent: make(chan struct{})}
	return t.sent, t.done, s.queueTurn(ctx, t)
}

func (s *Session) queueTurn(ctx context.Context, t turn) error {
	if s.idleAsked.Load() {
		// Stopping once idle: the work goes to the next session.
		select {
		case <-s.done:
			return ErrSessionClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case s.work <- t:
		return nil
	case <-s.done:
		return ErrSessionClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrStoppedOnRequest is how a turn in flight ends when its session is
// stopped on request (an operator's stop, a reload's restart): the
// runtime did not fail it. It wraps ErrSessionClosed.
var ErrStoppedOnRequest = fmt.Errorf("%w: stopped on request", ErrSessionClosed)

// Send writes a message to the runtime outside the turn queue (an
// operator's verdict, a query's error), after every answer reserved
// before it (ReplyLater): what it says may follow from one of them (a
// verdict on an item the Reader was told is held), and must not overtake
// it. Answers are reserved only until a commit, so the wait is short.
func (s *Session) Send(ctx context.Context, msg any) error {
	select {
	case s.sends <- msg:
		return nil
	case <-s.done:
		return ErrSessionClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PendingReply is a place in the order of a runtime's answers, reserved
// by ReplyLater and filled by Send from any goroutine.
type PendingReply struct {
	s    *Session
	msg  any
	sent bool
}

// ReplyLater reserves the next place in the order of answers to the
// runtime, for an answer that is known only later (after a commit, or an
// operator's decision). Answers reserved after it wait until it is sent.
// Only the owner's Message may call it.
func (s *Session) ReplyLater() *PendingReply {
	p := &PendingReply{s: s}
	s.replyMu.Lock()
	s.replies = append(s.replies, p)
	s.replyMu.Unlock()
	return p
}

// Send fills the reserved place with msg. It never blocks, may be called
// from any goroutine, and only the first call counts. After the session
// ended it does nothing.
func (p *PendingReply) Send(msg any) {
	s := p.s
	s.replyMu.Lock()
	if p.sent {
		s.replyMu.Unlock()
		return
	}
	p.msg, p.sent = msg, true
	s.replyMu.Unlock()
	select {
	case s.replyReady <- struct{}{}:
	default: // run is already woken
	}
}

// sendAfterReplies queues msg behind the answers still reserved, and
// reports whether there were any: if not, the caller sends it now. Only
// run calls it.
func (s *Session) sendAfterReplies(msg any) bool {
	s.replyMu.Lock()
	defer s.replyMu.Unlock()
	if len(s.replies) == 0 {
		return false
	}
	s.replies = append(s.replies, &PendingReply{s: s, msg: msg, sent: true})
	return true
}

// Skip gives up the reserved place: nothing is sent for it, and the
// answers behind it go on.
func (p *PendingReply) Skip() { p.Send(nil) }

// Reply answers the runtime from inside the owner's Message, which runs
// on the session's own goroutine (where Send would wait on itself), after
// any answer still reserved by ReplyLater. It never blocks.
func (s *Session) Reply(msg any) {
	s.ReplyLater().Send(msg)
}

// flushReplies sends the answers that are ready, in order, up to the
// first one still reserved. Only run calls it.
func (s *Session) flushReplies() error {
	s.replyMu.Lock()
	var ready []any
	for len(s.replies) > 0 && s.replies[0].sent {
		ready = append(ready, s.replies[0].msg)
		s.replies[0] = nil
		s.replies = s.replies[1:]
	}
	s.replyMu.Unlock()
	for _, msg := range ready {
		if msg == nil { // skipped
			continue
		}
		if err := s.send(msg); err != nil {
			return err
		}
	}
	return nil
}

// Stop ends the session gracefully: shutdown, close stdin, SIGTERM to the
// process group after the grace period, SIGKILL after another. It waits
// until the runtime has exited or ctx ends. Safe to call more than once.
func (s *Session) Stop(ctx context.Context, reason string) error {
	select {
	case s.stopCh <- reason:
	default: // a stop is already pending
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopWhenIdle asks the session to end gracefully once the turn in
// progress and the turns already queued are done. From now on it takes
// no new turns: Turn waits until the session has ended and then answers
// ErrSessionClosed, so work goes to the next session. It never blocks;
// only the first reason counts. Only the supervisor calls it, as it
// stops handing the session out (retire).
func (s *Session) stopWhenIdle(reason string) {
	s.idleAsked.Store(true)
	select {
	case s.idleCh <- reason:
	default: // a stop is already pending
	}
}

// setAnnounced replaces the subscriptions announced to the runtime: it is
// sent a fresh bcp_subscriptions_active with subs (possibly empty: every
// subscription was revoked) if it holds BCPPublish. It never blocks; when
// called again before the runtime was told, only the latest list is sent.
// Only the supervisor calls it, as it records what the session was told
// (Supervisor.announce).
func (s *Session) setAnnounced(subs []runtime.ActiveSubscription) {
	s.annMu.Lock()
	s.announced = &subs
	s.annMu.Unlock()
	select {
	case s.annReady <- struct{}{}:
	default: // run is already woken
	}
}

// Kill ends the session at once with SIGKILL to its process group. It
// does not wait. Safe to call more than once, and after exit.
func (s *Session) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// send encodes msg and queues it for stdin without blocking; a runtime
// that lets more than maxPendingOut bytes pile up is not reading and is
// killed. Only the run goroutine calls it (and Start, before run
// starts).
func (s *Session) send(msg any) error {
	line, err := runtime.Marshal(msg)
	if err != nil {
		return err
	}
	switch pending, ok := s.out.push(line); {
	case !ok:
		return ErrSessionClosed
	case pending > maxPendingOut:
		s.Kill()
		return fmt.Errorf("runtime is not reading its stdin (%d bytes waiting)", pending)
	}
	return nil
}

// closeOut closes stdin's queue: the writer writes what is queued, then
// closes stdin. Safe to call more than once.
func (s *Session) closeOut() { s.out.close() }

// writeStdin owns stdin: it writes queued lines until the queue is closed
// and empty, then closes stdin so the runtime sees EOF.
func (s *Session) writeStdin(stdin io.WriteCloser) {
	defer stdin.Close()
	for {
		lines, ok := s.out.take()
		if !ok {
			return
		}
		for _, line := range lines {
			if _, err := stdin.Write(line); err != nil {
				// The runtime is gone or closed stdin; discard what comes
				// so senders never block, and let Wait report the exit.
				s.out.discard()
				return
			}
		}
	}
}

// lineQueue is the queue of lines to a runtime's stdin: pushed without
// blocking by the session, taken in batches by the writer.
type lineQueue struct {
	mu         sync.Mutex
	lines      [][]byte
	bytes      int
	closed     bool
	discarding bool
	ready      chan struct{} // capacity 1: lines were pushed or the queue closed
}

func newLineQueue() *lineQueue { return &lineQueue{ready: make(chan struct{}, 1)} }

// push queues line and returns the bytes now waiting; ok is false once the
// queue is closed.
func (q *lineQueue) push(line []byte) (pending int, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, false
	}
	if !q.discarding {
		q.lines = append(q.lines, line)
		q.bytes += len(line)
	}
	q.wake()
	return q.bytes, true
}

// take waits for lines and returns them all; ok is false when the queue
// is closed and empty.
func (q *lineQueue) take() (lines [][]byte, ok bool) {
	for {
		q.mu.Lock()
		if len(q.lines) > 0 {
			lines, q.lines, q.bytes = q.lines, nil, 0
			q.mu.Unlock()
			return lines, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, false
		}
		<-q.ready
	}
}

func (q *lineQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.wake()
}

// discard drops what is queued and everything pushed later.
func (q *lineQueue) discard() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.discarding, q.lines, q.bytes = true, nil, 0
}

func (q *lineQueue) wake() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

type lineEvent struct {
	env runtime.Envelope
	err error
}

// readStdout owns stdout: one event per line until EOF.
func (s *Session) readStdout(stdout io.Reader, lines chan<- lineEvent) {
	defer close(lines)
	dec := runtime.NewDecoder(stdout, s.cfg.MaxLine)
	for {
		env, err := dec.Next()
		var le *runtime.LineError
		if err != nil && !errors.As(err, &le) {
			// EOF or a read error after the process closed the pipe.
			return
		}
		lines <- lineEvent{env: env, err: err}
	}
}

var stderrLevel = regexp.MustCompile(`(?i)^\s*(?:\S+\s+)?\[?(trace|debug|info|warn|warning|error|err|fatal)\]?[:\s]|level=(trace|debug|info|warn|warning|error)`)

// stderrLevelOf parses a level from a log line: "[INFO] ...", "ERROR: ...",
// "2024-01-01T00:00:00Z [WARN] ...", "level=debug ...". Default info.
func stderrLevelOf(line string) hclog.Level {
	m := stderrLevel.FindStringSubmatch(line)
	if m == nil {
		return hclog.Info
	}
	name := strings.ToLower(m[1] + m[2])
	switch name {
	case "warning":
		name = "warn"
	case "err", "fatal":
		name = "error"
	}
	return hclog.LevelFromString(name)
}

// safeLine returns a runtime's text line as it may reach a terminal (the
// gateway's log, an operator's bcpgw events): as it is if every character
// is graphic, else Go-quoted, so that escape sequences and invisible
// characters show as \x1b, \u200b and so on instead of acting.
func safeLine(text string) string {
	for _, r := range text {
		if r != '\t' && !unicode.IsGraphic(r) {
			return strconv.QuoteToGraphic(text)
		}
	}
	return text
}

// relayStderr owns stderr: each line goes to the agent's logger at its
// parsed level, and the last few are kept for the exit error.
func (s *Session) relayStderr(stderr io.Reader) {
	r := bufio.NewReaderSize(stderr, maxStderrLine)
	rate, burst := s.floodLimits()
	limit := newBucket(s.cfg.Clock, rate, burst)
	dropped := 0
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			text := safeLine(strings.TrimRight(string(line), "\r\n"))
			for errors.Is(err, bufio.ErrBufferFull) { // skip the rest of an overlong line
				_, err = r.ReadSlice('\n')
			}
			if limit.take() {
				if dropped > 0 {
					s.log.Warn("dropped stderr lines over the rate limit", "lines", dropped)
					dropped = 0
				}
				s.log.Log(stderrLevelOf(text), text)
				s.mu.Lock()
				s.stderr = append(s.stderr, text)
				if len(s.stderr) > stderrTail {
					s.stderr = s.stderr[1:]
				}
				s.mu.Unlock()
			} else {
				dropped++
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *Session) stderrTail() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.stderr...)
}

func (s *Session) audit(kind string, code bcp.Code, detail string, payload []byte) {
	s.cfg.Owner.Audit(store.Event{Time: s.cfg.Clock.Now(), Agent: s.name, Kind: kind, Code: string(code), Detail: detail,
		Ref: s.id, Payload: store.ClipPayload(payload)})
}

// refuse answers a runtime line with an error message and audits it.
func (s *Session) refuse(code bcp.Code, detail string, payload []byte) {
	msg := string(code) + ": " + detail
	s.audit("refused", code, msg, payload)
	_ = s.send(runtime.Error{Type: runtime.TypeError, Message: msg})
}
