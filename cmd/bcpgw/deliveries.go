package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/tui"
)

func newDeliveriesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deliveries",
		Short: "List the outbox's deliveries; retry or discard parked ones",
		Long: `Every push or answer the gateway accepted is a delivery, kept until its
Controller's runtime answers result for it. A delivery whose Controller's
sessions end 10 times before answering is parked: set aside so that it
neither blocks the deliveries behind it nor vanishes (its Reader was told
it was accepted). Parked deliveries wait for an operator:

  bcpgw deliveries list            the parked ones (--status all: every one)
  bcpgw deliveries retry ID      send it again (its failures are cleared)
  bcpgw deliveries discard ID --reason "..."   give it up for good

Both are audited (delivery_requeued, delivery_discarded) with who decided.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newDeliveriesListCmd(), newDeliveriesRetryCmd(), newDeliveriesDiscardCmd())
	return cmd
}

func newDeliveriesListCmd() *cobra.Command {
	var state, stateName, controller string // stateName: the deliveries' state (--status)
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List deliveries (parked ones by default), oldest first",
		Long: `Lists deliveries of the given --status (parked by default; pending,
delivered, dropped or all), oldest first, page by page from the gateway.
--controller keeps one Controller's; --limit stops after that many (0: all).
--json prints one JSON object per line, the response included.

When no gateway runs on --state, the deliveries are read from its state
file, read-only, as it left them; stderr says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withReader(cmd, state, func(ctx context.Context, cl reader) error {
				return listDeliveries(ctx, cl, cmd.OutOrStdout(), control.DeliveriesParams{State: stateName, Controller: controller}, limit, asJSON)
			})
		},
	}
	stateFlag(cmd, &state)
	// --status, as in approvals list: --state is the state directory.
	cmd.Flags().StringVar(&stateName, "status", "parked", "parked, pending, delivered, dropped or all")
	cmd.Flags().StringVar(&controller, "controller", "", "only deliveries to this Controller")
	cmd.Flags().IntVar(&limit, "limit", 0, "print at most this many (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line")
	return cmd
}

// listDeliveries prints deliveries page by page: memory and each response
// stay bounded however many there are.
func listDeliveries(ctx context.Context, cl reader, out io.Writer, p control.DeliveriesParams, limit int, asJSON bool) error {
	now := time.Now()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	printed := 0
	for {
		page, err := cl.Deliveries(ctx, p)
		if err != nil {
			return err
		}
		for _, d := range page.Deliveries {
			if limit > 0 && printed == limit {
				return tw.Flush()
			}
			if asJSON {
				if err := json.NewEncoder(out).Encode(d); err != nil {
					return err
				}
			} else {
				if printed == 0 {
					fmt.Fprintln(tw, "ID\tSTATE\tAGE\tCAT\tBITS\tSENT\tFAILED\tCONTROLLER\tREADER\tSUBSCRIPTION/QUERY\tDETAIL")
				}
				what := d.SubscriptionID
				if d.QueryID != "" {
					what = "query " + d.QueryID
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%d\t%d\t%s\t%s\t%s\t%s\n", d.ID, d.State, tui.Age(now.Sub(d.CreatedAt)), d.Category,
					d.BandwidthBits, d.Attempts, d.Failures, d.Controller, d.Reader, what, tui.Printable(d.Detail))
			}
			printed++
		}
		if page.Next == 0 {
			break
		}
		p.Cursor = page.Next
	}
	if printed == 0 && !asJSON {
		word := p.State
		if word == "" || word == "all" {
			word = "recorded"
		}
		fmt.Fprintf(out, "No %s deliveries.\n", word)
	}
	return tw.Flush()
}

func newDeliveriesRetryCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "retry ID",
		Short: "Send a parked delivery again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				d, err := cl.RetryDelivery(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Requeued %s: Cat-%d from %s to %s, sent %d times so far; it goes to %s's next turn.\n",
					d.ID, d.Category, d.Reader, d.Controller, d.Attempts, d.Controller)
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	return cmd
}

func newDeliveriesDiscardCmd() *cobra.Command {
	var state, reason string
	cmd := &cobra.Command{
		Use:   "discard ID --reason TEXT",
		Short: "Give up a parked delivery for good",
		Long: `Marks a parked delivery dropped: it is never sent again. Its Reader was
told it was accepted, so say why in --reason; the delivery_discarded event
records it with who decided.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return &exitError{code: exitUsage, msg: "--reason is required: say why the delivery is given up"}
			}
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				d, err := cl.DiscardDelivery(ctx, args[0], reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Discarded %s (Cat-%d from %s to %s): %s.\n", d.ID, d.Category, d.Reader, d.Controller, tui.Printable(d.Detail))
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().StringVar(&reason, "reason", "", "why it is given up (required; recorded in the event)")
	return cmd
}
