package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/tui"
)

func newSubscriptionsCmd() *cobra.Command {
	var state string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:   "subscriptions",
		Short: "List subscriptions, declared and approved; revoke approved ones",
		Long: `Lists every subscription of the running gateway: those the Controllers'
definitions declare (SOURCE definition), and those a Controller asked for
at run time with BCPSubscribe and operators approved (SOURCE approved),
with who approved them and when. Approved subscriptions live in the
state file, not in any definition; --all adds the revoked ones. --json
prints one JSON object per line, each with its spec.

  bcpgw subscriptions revoke ID --reason "..."   withdraw an approved one

A declared subscription is removed by editing its definition and
reloading.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				subs, err := cl.Subscriptions(ctx, all)
				if err != nil {
					return err
				}
				return printSubscriptions(cmd.OutOrStdout(), subs, asJSON)
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().BoolVar(&all, "all", false, "also list the revoked approved subscriptions")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line")
	cmd.AddCommand(newSubscriptionsRevokeCmd())
	return cmd
}

// printSubscriptions prints a table, or one JSON object per line. What an
// agent wrote (ids, reasons) is shown with invisible characters made
// visible.
func printSubscriptions(out io.Writer, subs []control.SubscriptionInfo, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		for _, s := range subs {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
		return nil
	}
	if len(subs) == 0 {
		_, err := fmt.Fprintln(out, "No subscriptions.")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSOURCE\tSTATUS\tCONTROLLER\tREADER\tCAT\tBITS\tAPPROVED BY\tAPPROVED AT\tNOTE")
	for _, s := range subs {
		at, note := "-", ""
		if !s.ApprovedAt.IsZero() {
			at = s.ApprovedAt.Local().Format("2006-01-02 15:04")
		}
		by := s.ApprovedBy
		if by == "" {
			by = "-"
		}
		switch {
		case s.Source == control.SourceDefinition:
			note = s.File
		case s.Status != "active":
			note = fmt.Sprintf("revoked by %s: %s", s.RevokedBy, s.Reason)
		default:
			note = "approval " + s.ApprovalID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%.1f\t%s\t%s\t%s\n", tui.Printable(s.ID), s.Source, s.Status, s.Controller, s.Reader,
			s.Category, s.BandwidthBits, tui.Printable(by), at, tui.Printable(note))
	}
	return tw.Flush()
}

func newSubscriptionsRevokeCmd() *cobra.Command {
	var state, reason string
	cmd := &cobra.Command{
		Use:   "revoke ID --reason TEXT",
		Short: "Revoke an approved subscription",
		Long: `Revokes a subscription that operators approved at a Controller's request:
its Reader is told at once that it is gone, pushes to it are refused,
its deliveries not yet sent are dropped (dropped_revoked), and its
Controller hears bcp_subscribe_result revoked with the reason. The
subscription_revoked event records who decided and why.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return &exitError{code: exitUsage, msg: "--reason is required: the Controller and the audit log are told why"}
			}
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				s, err := cl.RevokeSubscription(ctx, args[0], reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Revoked %s (Cat-%d from %s to %s): %s no longer hears of it; %s is told if it runs.\n",
					s.ID, s.Category, s.Reader, s.Controller, s.Reader, s.Controller)
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().StringVar(&reason, "reason", "", "why it is revoked (required; told to the Controller and recorded)")
	return cmd
}
