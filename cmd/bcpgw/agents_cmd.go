package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/tui"
)

func newAgentsCmd() *cobra.Command {
	var state string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "List the agents and their sessions; start or stop one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				all, err := cl.Agents(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), all)
				}
				now := time.Now()
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tROLES\tSTATE\tPID\tUP\tCHANNELS (<-reader, ->controller)\tNOTE")
				for _, a := range all {
					pid, up := "-", "-"
					if a.PID != 0 {
						pid, up = strconv.Itoa(a.PID), tui.Age(now.Sub(a.Since))
					}
					var peers []string
					for _, c := range a.Channels {
						peers = append(peers, fmt.Sprintf("%s%s(cat%d)", map[string]string{"controller": "<-", "reader": "->"}[c.Role], c.Peer, c.MaxCategory))
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Name, strings.Join(a.Roles, ","), a.State, pid, up,
						strings.Join(peers, " "), agentNote(a))
				}
				return tw.Flush()
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.AddCommand(newAgentActionCmd("start", "Start an agent's session (also after it failed)"),
		newAgentActionCmd("stop", "Stop an agent's session; it is not restarted until started or needed"))
	return cmd
}

func agentNote(a control.Agent) string {
	var notes []string
	if a.Autostart {
		notes = append(notes, "autostart")
	}
	if a.Held && a.State != "running" {
		notes = append(notes, "stopped by operator")
	}
	if a.Crashes > 0 {
		notes = append(notes, fmt.Sprintf("%d crashes/min", a.Crashes))
	}
	if !a.RetryAt.IsZero() {
		notes = append(notes, retryNote(a.RetryAt))
	}
	if a.LastError != "" && a.State != "running" {
		notes = append(notes, "last error: "+tui.Printable(a.LastError))
	}
	return strings.Join(notes, "; ")
}

// retryNote says when a failed agent is tried again on its own, in the
// operator's local time.
func retryNote(at time.Time) string {
	return "retrying at " + at.Local().Format("15:04")
}

func newAgentActionCmd(action, short string) *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   action + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				var err error
				if action == "start" {
					err = cl.StartAgent(ctx, args[0])
				} else {
					err = cl.StopAgent(ctx, args[0])
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], map[string]string{"start": "started", "stop": "stopping"}[action])
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	return cmd
}

func newPromptCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "prompt AGENT TEXT",
		Short: "Send a prompt to an agent, starting its session if needed",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			text := strings.Join(args[1:], " ")
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				if err := cl.Prompt(ctx, args[0], text); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Prompt sent to %s.\n", args[0])
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	return cmd
}
