package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway/control"
)

func newReloadCmd() *cobra.Command {
	var state string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Load changed agent definitions into the running gateway",
		Long: `Asks the running gateway to load its agents directory again, as SIGHUP
and (with run --watch, the default) a change to a .md file there do.

The new definitions are checked as a whole first. If any file has an
error, nothing changes: the running definitions stay in force, and the
errors are printed (file:line: field) and recorded as a reload_failed
event; the exit status is 1.

If they load, they take effect at once: channels, subscriptions, budget
limits and cron schedules switch in one step; Readers whose subscriptions
changed are told so; sessions of agents whose runtime, env, tools, model or
prompt changed are restarted once idle; queries in flight on a channel
that is gone fail with no_channel. Deliveries and approval items whose
channel or subscription is gone are dropped (dropped_revoked) when their
turn comes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				r, err := cl.Reload(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), r)
				}
				w := cmd.OutOrStdout()
				if !r.Changed {
					fmt.Fprintf(w, "reloaded %d agents: no changes\n", r.Agents)
					return nil
				}
				fmt.Fprintf(w, "reloaded %d agents:\n", r.Agents)
				for _, line := range r.Summary {
					fmt.Fprintf(w, "  %s\n", line)
				}
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
