package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway"
)

func newRunCmd() *cobra.Command {
	var agentsDir, stateDir, logFormat, logLevel string
	cmd := &cobra.Command{
		Use:   "run --agents DIR --state DIR",
		Short: "Run the gateway in the foreground",
		Long: `Loads and checks the agent definitions in --agents, starts the autostart
agents, and supervises their runtimes until SIGINT or SIGTERM, when every
session is stopped gracefully (shutdown, then SIGTERM, then SIGKILL).

--state is where the gateway keeps its durable state; it is created with
mode 0700 if missing.

This version supervises sessions and validates publishes; delivery of
pushes and routing of queries come with the router, so publishes are
answered controller_unavailable after validation.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case agentsDir == "":
				return errors.New("--agents is required (or set BCPGW_AGENTS)")
			case stateDir == "":
				return errors.New("--state is required (or set BCPGW_STATE)")
			}
			logger, err := newLogger(cmd.ErrOrStderr(), logFormat, logLevel)
			if err != nil {
				return err
			}
			set, err := agents.LoadDir(agentsDir)
			if err != nil {
				return &exitError{code: exitFailed, msg: "definitions do not load:\n" + err.Error()}
			}
			for _, w := range set.Warnings {
				logger.Warn("definition warning", "warning", w.String())
			}
			if err := os.MkdirAll(stateDir, 0o700); err != nil {
				return &exitError{code: exitFailed, msg: fmt.Sprintf("state directory: %v", err)}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			audit := gateway.LogAuditor{Logger: logger.Named("audit")}
			sv := gateway.NewSupervisor(gateway.SupervisorConfig{
				Set: set, Logger: logger, Auditor: audit,
				Session: gateway.SessionConfig{OnMessage: gateway.Unrouted(set, audit)},
			})
			logger.Info("gateway running", "agents", len(set.Agents), "dir", agentsDir, "state", stateDir)
			err = sv.Run(ctx)
			logger.Info("gateway stopped")
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&agentsDir, "agents", os.Getenv("BCPGW_AGENTS"), "directory of agent definitions (env BCPGW_AGENTS)")
	f.StringVar(&stateDir, "state", os.Getenv("BCPGW_STATE"), "state directory (env BCPGW_STATE)")
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
