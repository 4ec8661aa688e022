package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway"
	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/notify"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/reaper"
)

func newRunCmd() *cobra.Command {
	var agentsDir, stateDir, logFormat, logLevel, metricsAddr, notifyFile, operatorGroup string
	var approvalTTL, queryTimeout, turnTimeout time.Duration
	var maxBacklog int
	retain := retainFlag(store.DefaultRetain)
	var watch, allowUnsandboxed bool
	var compat compatFlags
	cmd := &cobra.Command{
		Use:   "run --agents DIR --state DIR",
		Short: "Run the gateway in the foreground",
		Long: `Loads and checks the agent definitions in --agents, starts the autostart
agents, and supervises their runtimes until SIGINT or SIGTERM, when every
session is stopped gracefully (shutdown, then SIGTERM, then SIGKILL).

--state is where the gateway keeps its durable state (bcpgw.db: the
delivery outbox, the approval queue and the audit events) and its control
socket (control.sock, used by bcpgw approvals, status, events ...); it is
created with mode 0700 if missing, and tightened to 0700 if others can
reach it. Only one gateway runs on a state directory. Deliveries accepted before a crash are sent
again on the next run with the same state directory.

Publishes and query answers are validated and charged to the budgets of
PROTOCOL.md section 6; Cat-1 and Cat-2 data is delivered to the
Controller as its next turn, Cat-3 data (and Cat-2 data flagged for
review) waits in the approval queue for --approval-ttl.

Changed definitions are loaded without a restart on SIGHUP, on bcpgw
reload, and (unless --watch=false) when a .md file in --agents changes. A
set with errors is refused as a whole and the running one stays in force
(see bcpgw reload).

--retain is how long finished records are kept: deliveries delivered or
dropped, approval items decided, and audit events (default 30d; e.g. 90d,
720h; 0 keeps everything). Older ones are deleted every minute in small
batches; pending deliveries and items are never deleted, and the exposure
figures of bcpgw report are kept apart and survive. bcpgw events --since
N for an N older than that says which events were pruned.

--turn-timeout bounds one turn of a runtime (a delivery, a prompt, a
query): one that gives no result within it is hung, and is stopped
(SIGKILL ends even a stopped process), restarted, and sent the turn again.
Default 15m; a definition's turn_timeout overrides it for its agent. A
timeout counts as a crash toward the failed state.

--operator-group lets the members of a group (a name or a gid) use the
control socket besides the gateway's user and root: other operators,
each recorded as the decider of what they approve, so that an approval
policy can require distinct people (approvals: {required: 2}). The state
directory becomes 0710 and the socket 0660, both with that group; the
state file and the agents' directories stay the gateway user's own. A
member's process is checked like the gateway user's (not sandboxed, not
started by the gateway). Only a gateway running as root can check other
users' processes, so the flag needs one.

--max-backlog bounds the deliveries one Reader may have waiting for one
Controller (default 1000). Past it, the Reader's pushes to that Controller
are refused with backlog_full, charge nothing and may be sent again later,
so a flooding Reader can neither starve nor bury its Controller. Answers
to the Controller's queries and approved items are never refused.
Deliveries whose Controller's sessions end 10 times before acknowledging
them are parked, not dropped: see bcpgw deliveries.

--metrics-addr serves Prometheus metrics (bcpgw_*) at /metrics on that
address; a bare port listens on 127.0.0.1 only. Off by default.

--notify FILE sends the events its targets ask for (an approval item
waiting, an agent failed ...) to webhooks: JSON, Slack or ntfy, signed,
at least once, each target from a cursor kept in the state file. The
file is checked at start (a variable it names must be set) and read again
on every reload. See bcpgw notify test and docs/operating.md.
` + compatHelp + `
A reload reads them the same way. bcpgw run creates the directories
TriOnyx agents may write that do not exist yet (WORKSPACE/agents/NAME and
each fs_write DIR/**).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case agentsDir == "":
				return errors.New("--agents is required (or set BCPGW_AGENTS)")
			case stateDir == "":
				return errors.New("--state is required (or set BCPGW_STATE)")
			case turnTimeout < time.Second:
				return fmt.Errorf("--turn-timeout must be at least 1s, got %s", turnTimeout)
			case maxBacklog < 1:
				return fmt.Errorf("--max-backlog must be at least 1, got %d", maxBacklog)
			}
			// What this process inherited beyond stdin, stdout and
			// stderr must not reach the runtimes (sandboxed or not):
			// close it on exec.
			if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
				return &exitError{code: exitFailed, msg: fmt.Sprintf("mark inherited descriptors close-on-exec: %v", err)}
			}
			logger, err := newLogger(cmd.ErrOrStderr(), logFormat, logLevel)
			if err != nil {
				return err
			}
			// SIGHUP is caught from the start: its default action would
			// end a gateway that is still starting. One that comes before
			// the gateway runs is acted on once it does.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			opts, err := compat.options(stateDir, true)
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			set, err := agents.Load(agentsDir, opts)
			if err != nil {
				return &exitError{code: exitFailed, msg: "definitions do not load:\n" + err.Error()}
			}
			// An unsandboxed runtime can reach around every guarantee
			// the gateway gives on the pipe: the operator must say so
			// when starting it, not only in a definition.
			if open := set.Unsandboxed(); len(open) > 0 && !allowUnsandboxed {
				return &exitError{code: exitFailed, msg: unsandboxedRefusal(open)}
			}
			for _, w := range set.Warnings {
				logger.Warn("definition warning", "warning", w.String())
			}
			// The notify file, and every variable it names, is checked
			// now: not at the first notification, hours later.
			var targets *notify.Targets
			if notifyFile != "" {
				if targets, err = notify.Load(notifyFile, os.Getenv); err != nil {
					return &exitError{code: exitFailed, msg: "notify file does not load:\n" + err.Error()}
				}
			}
			gid, err := operatorGID(operatorGroup)
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			// Refuse early, before creating anything, if a gateway
			// answers on this state directory or its socket path is taken.
			sock := filepath.Join(stateDir, control.SocketName)
			if err := control.Check(sock); err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			if err := control.PrepareDir(stateDir); err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			// The store locks the state file: a second gateway on this
			// directory stops here, before touching anything.
			st, err := store.Open(filepath.Join(stateDir, "bcpgw.db"))
			if errors.Is(err, store.ErrLocked) {
				return &exitError{code: exitFailed, msg: fmt.Sprintf("%v: another bcpgw is running with --state %s (see bcpgw status)", err, stateDir)}
			}
			if err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			defer st.Close()
			ln, err := control.ListenGroup(sock, gid)
			if err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			defer ln.Close()
			var metricsSrv *metricsServer
			var metrics *gateway.Metrics
			if metricsAddr != "" {
				mln, err := listenMetrics(metricsAddr)
				if err != nil {
					return &exitError{code: exitFailed, msg: err.Error()}
				}
				metricsSrv, metrics = newMetrics(mln, logger.Named("metrics"))
			}
			// The gateway adopts what its runtimes leave behind, so that
			// the control socket sees it as theirs, and reaps it.
			rp, err := reaper.New()
			if err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			gw, err := gateway.New(gateway.Config{Set: set, Store: st, Logger: logger, ApprovalTTL: approvalTTL, QueryTimeout: queryTimeout,
				StateDir: stateDir, AllowUnsandboxed: allowUnsandboxed, MaxBacklog: maxBacklog,
				Session: session.Config{Spawn: rp.Start, Release: rp.Release, TurnTimeout: turnTimeout},
				Watch:   watch, Metrics: metrics, Notify: targets})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv := control.NewServer(control.ServerConfig{Backend: gw.Operator(), Logger: logger.Named("control"), Version: version(),
				OperatorGroup: gid})
			served := make(chan error, 1)
			go func() {
				err := srv.Serve(ctx, ln)
				if err != nil {
					logger.Error("the control socket stopped; stopping the gateway", "error", err)
					stop()
				}
				served <- err
			}()
			hupDone := reloadOnSIGHUP(ctx, gw, hup, logger)
			retained := runRetention(ctx, st, time.Duration(retain), logger.Named("retention"))
			reaped := make(chan struct{})
			go func() { defer close(reaped); rp.Run(ctx) }()
			metricsDone := make(chan error, 1)
			if metricsSrv != nil {
				logger.Info("serving metrics", "url", "http://"+metricsSrv.ln.Addr().String()+"/metrics")
				go func() {
					err := metricsSrv.serve(ctx)
					if err != nil && ctx.Err() == nil {
						logger.Error("the metrics server stopped; stopping the gateway", "error", err)
						stop()
					}
					metricsDone <- err
				}()
			} else {
				metricsDone <- nil
			}
			logger.Info("gateway running", "agents", len(set.Agents), "dir", agentsDir, "state", stateDir, "control", ln.Path)
			err = gw.Run(ctx)
			stop()
			<-hupDone
			<-retained
			<-reaped
			err = errors.Join(err, <-served, <-metricsDone)
			logger.Info("gateway stopped")
			if err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&agentsDir, "agents", os.Getenv("BCPGW_AGENTS"), "directory of agent definitions (env BCPGW_AGENTS)")
	f.StringVar(&stateDir, "state", os.Getenv("BCPGW_STATE"), "state directory (env BCPGW_STATE)")
	f.DurationVar(&approvalTTL, "approval-ttl", gateway.DefaultApprovalTTL, "how long an approval item waits for a decision before it expires")
	f.DurationVar(&queryTimeout, "query-timeout", gateway.DefaultQueryTimeout, "how long a Reader has to answer a query")
	f.DurationVar(&turnTimeout, "turn-timeout", session.DefaultTurnTimeout, "how long a runtime has to answer a turn (a delivery, a prompt, a query) before it is restarted and the turn redelivered; an agent's turn_timeout overrides it")
	f.IntVar(&maxBacklog, "max-backlog", gateway.DefaultMaxBacklog, "how many deliveries from one Reader may wait for one Controller; further pushes on that channel are refused with backlog_full until it catches up")
	f.Var(&retain, "retain", "how long to keep finished deliveries, decided approval items and events (30d, 12h...; 0 keeps everything)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address (a bare port means 127.0.0.1); off when empty")
	f.BoolVar(&watch, "watch", true, "reload the definitions when a .md file in --agents changes")
	f.BoolVar(&allowUnsandboxed, "allow-unsandboxed", false, "run agents whose definition says sandbox: none (refused otherwise)")
	f.StringVar(&operatorGroup, "operator-group", "", "let the members of this group (a name or a gid) use the control socket as operators too; needs a gateway running as root")
	f.StringVar(&notifyFile, "notify", os.Getenv("BCPGW_NOTIFY"), "send events to the webhook targets of this file (YAML; read again on every reload; env BCPGW_NOTIFY)")
	compat.add(f)
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	return cmd
}

func newLogger(w io.Writer, format, level string) (hclog.Logger, error) {
	lvl := hclog.LevelFromString(level)
	if lvl == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level: %q is not one of trace, debug, info, warn, error", level)
	}
	if format != "text" && format != "json" {
		return nil, fmt.Errorf("--log-format: %q is not text or json", format)
	}
	return hclog.New(&hclog.LoggerOptions{
		Name: "bcpgw", Level: lvl, Output: w, JSONFormat: format == "json",
	}), nil
}

// retainFlag is a duration that also takes days: "30d", "1d12h".
type retainFlag time.Duration

func (r *retainFlag) String() string {
	d := time.Duration(*r)
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func (r *retainFlag) Set(v string) error {
	var days int64
	rest := v
	if i := strings.IndexByte(v, 'd'); i > 0 {
		n, err := strconv.ParseInt(v[:i], 10, 32)
		if err != nil {
			return fmt.Errorf("%q: use a duration such as 30d, 12h or 1d12h", v)
		}
		days, rest = n, v[i+1:]
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return fmt.Errorf("%q: use a duration such as 30d, 12h or 1d12h", v)
		}
	}
	d += time.Duration(days) * 24 * time.Hour
	if d < 0 {
		return fmt.Errorf("%q: must not be negative (0 keeps everything)", v)
	}
	*r = retainFlag(d)
	return nil
}

func (r *retainFlag) Type() string { return "duration" }

// runRetention prunes st of what finished more than keep ago until ctx
// ends (not at all when keep is 0); the returned channel is closed once
// it has stopped, before the store may be closed.
func runRetention(ctx context.Context, st *store.Store, keep time.Duration, logger hclog.Logger) <-chan struct{} {
	done := make(chan struct{})
	if keep <= 0 {
		logger.Info("retention off: finished records are kept for ever")
		close(done)
		return done
	}
	logger.Info("keeping finished records", "for", keep.String())
	go func() {
		defer close(done)
		store.Retention{Keep: keep, Pruned: func(r store.PruneResult, before time.Time, err error) {
			if err != nil {
				logger.Error("pruning failed; trying again next round", "error", err)
				return
			}
			if r.Total() > 0 {
				logger.Debug("pruned", "before", before.Format(time.RFC3339), "deliveries", r.Deliveries,
					"approvals", r.Approvals, "events", r.Events, "sessions", r.Sessions)
			}
		}}.Run(ctx, st)
	}()
	return done
}

// reloadOnSIGHUP reloads the definitions on each SIGHUP until ctx ends;
// the returned channel is closed once it has stopped listening. A refused
// reload is logged and evented by the gateway; the process goes on.
func reloadOnSIGHUP(ctx context.Context, gw *gateway.Gateway, hup <-chan os.Signal, logger hclog.Logger) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				logger.Info("SIGHUP: reloading the definitions")
				var de *gateway.DefinitionsError
				if _, err := gw.Reload(ctx, "SIGHUP"); err != nil && !errors.As(err, &de) && ctx.Err() == nil {
					logger.Error("reload failed", "error", err)
				}
			}
		}
	}()
	return done
}

// operatorGID resolves --operator-group, a group name or a gid, and
// checks that this gateway can serve it (control.CheckOperatorGroup). An
// empty flag is no group: 0.
func operatorGID(group string) (int, error) {
	if group == "" {
		return 0, nil
	}
	gid, err := strconv.Atoi(group)
	if err != nil {
		g, lerr := user.LookupGroup(group)
		if lerr != nil {
			return 0, fmt.Errorf("--operator-group: %v", lerr)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return 0, fmt.Errorf("--operator-group: group %s has gid %q", group, g.Gid)
		}
	}
	if err := control.CheckOperatorGroup(gid, os.Getuid()); err != nil {
		return 0, fmt.Errorf("--operator-group: %w", err)
	}
	return gid, nil
}
