package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/tui"
)

func newStatusCmd() *cobra.Command {
	var state string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether the gateway runs, and what waits for whom",
		Long: `Shows the running gateway's pid, uptime, agents by state, and how many
approval items and deliveries are waiting. Exits 3 if no gateway runs on
the state directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				st, err := cl.Status(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), st)
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "bcpgw %s running, pid %d, up %s\n", st.Version, st.PID, tui.Age(time.Since(st.StartedAt)))
				fmt.Fprintf(w, "agents:     %s (%s)\n", byState(st.Agents), st.AgentsDir)
				if st.Agents["failed"] > 0 {
					// Say why, and what to do: a failed agent waits for
					// an operator.
					list, err := cl.Agents(ctx)
					if err != nil {
						return err
					}
					for _, a := range list {
						if a.State == "failed" {
							retry := ""
							if !a.RetryAt.IsZero() {
								retry = "; " + retryNote(a.RetryAt)
							}
							fmt.Fprintf(w, "  FAILED %s: %s%s\n", a.Name, a.LastError, retry)
						}
					}
					fmt.Fprintf(w, "  retried on their own after a cool-down (5m doubling to 1h); to retry at once, fix the cause, then:\n")
					fmt.Fprintf(w, "  bcpgw agents start NAME (or edit its definition: a reload retries it)\n")
				}
				fmt.Fprintf(w, "approvals:  %d pending\n", st.PendingApprovals)
				fmt.Fprintf(w, "deliveries: %d waiting for their Controller\n", st.PendingDeliveries)
				if st.ParkedDeliveries > 0 {
					fmt.Fprintf(w, "parked:     %d deliveries kept failing; see bcpgw deliveries list\n", st.ParkedDeliveries)
				}
				fmt.Fprintf(w, "events:     %d (last seq)\n", st.LastEventSeq)
				fmt.Fprintf(w, "state:      %s\n", st.StateFile)
				fmt.Fprintf(w, "socket:     %s\n", st.Socket)
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// byState renders {"running": 2, "stopped": 1} as "2 running, 1 stopped".
func byState(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
