package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/tui"
)

func newApprovalsCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "Review Cat-3 pushes and answers in an interactive queue",
		Long: `Opens the approval queue of the running gateway in the terminal: the
pending items, updated live, with the full text of each, its anomalies
highlighted and invisible characters shown as U+XXXX. Approve or reject
each after reading it. Keys are listed at the bottom of the screen.

Use "bcpgw approvals list" for a plain list, and "bcpgw approve" and
"bcpgw reject" to decide from scripts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runApprovalsUI(cmd, state)
		},
	}
	stateFlag(cmd, &state)
	cmd.AddCommand(newApprovalsListCmd())
	return cmd
}

func newApprovalsListCmd() *cobra.Command {
	var state, status string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List approval items (pending ones by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				items, err := cl.Approvals(ctx, status)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), items)
				}
				if len(items) == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "No %s approval items.\n", statusWord(status))
					return nil
				}
				now := time.Now()
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATUS\tAGE\tCAT\tBITS\tANOMALIES\tCONTROLLER\tREADER\tSUBSCRIPTION/QUERY\tEXPIRES IN")
				for _, a := range items {
					what := a.SubscriptionID
					if a.QueryID != "" {
						what = "query " + a.QueryID
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%d\t%s\t%s\t%s\t%s\n", a.ID, a.Status, tui.Age(now.Sub(a.CreatedAt)), a.Category,
						a.BandwidthBits, len(a.Anomalies), a.Controller, a.Reader, what, expiresIn(now, a))
				}
				return tw.Flush()
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().StringVar(&status, "status", "pending", "pending, approved, rejected, expired, dropped or all")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func statusWord(status string) string {
	switch status {
	case "":
		return "pending"
	case "all":
		return "recorded"
	}
	return status
}

func expiresIn(now time.Time, a control.Approval) string {
	if a.Status != "pending" {
		return "-"
	}
	return tui.Age(a.ExpiresAt.Sub(now))
}

func newApproveCmd() *cobra.Command {
	var state, note, sha string
	cmd := &cobra.Command{
		Use:   "approve ID",
		Short: "Approve an approval item: it is delivered to its Controller",
		Long: `Approves one pending item, which is then delivered to its Controller.

An approval applies to exact content: --sha256 names the hash of the
content you read (shown by "bcpgw approvals list --json" and in the
queue). Without it, the item's current hash is used: read the item first
("bcpgw approvals list --json") if you decide from the command line.
An item is decided once; deciding it again is refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				hash := sha
				if hash == "" {
					item, err := cl.Approval(ctx, args[0])
					if err != nil {
						return err
					}
					hash = item.SHA256
				}
				a, err := cl.Approve(ctx, args[0], hash, note)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Approved %s: Cat-%d from %s, %.1f bits, queued for delivery to %s.\n",
					a.ID, a.Category, a.Reader, a.BandwidthBits, a.Controller)
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().StringVar(&note, "note", "", "a note kept with the decision")
	cmd.Flags().StringVar(&sha, "sha256", "", "the hash of the content you reviewed (default: the item's)")
	return cmd
}

func newRejectCmd() *cobra.Command {
	var state, reason string
	cmd := &cobra.Command{
		Use:   "reject ID --reason TEXT",
		Short: "Reject an approval item: the Reader is told why, nothing is delivered",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return &exitError{code: exitUsage, msg: "--reason is required: the Reader is told it"}
			}
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				a, err := cl.Reject(ctx, args[0], "", reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Rejected %s: Cat-%d from %s, not delivered. Reason: %s\n", a.ID, a.Category, a.Reader, reason)
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; sent to the Reader)")
	return cmd
}
