package main

import (
	"cmp"
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

func newApprovalsCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "Review Cat-3 pushes and answers in an interactive queue",
		Long: `Opens the approval queue of the running gateway in the terminal: the
pending items, updated live, with the full text of each, its anomalies
highlighted and invisible characters shown as U+XXXX. Approve or reject
each after reading it: an item can be approved only once every line of
it has been on screen ("more below" says what is not yet). Keys are
listed at the bottom of the screen, and all of them with ?.

Use "bcpgw approvals list" for a plain list, and "bcpgw approve" and
"bcpgw reject" to decide from scripts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := interactiveTerminal(cmd, "the approval queue needs a terminal (standard input and output): use bcpgw approvals list to read it, and bcpgw approve or reject ID to decide"); err != nil {
				return err
			}
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
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List approval items (pending ones by default)",
		Long: `Lists the approval items of a status, oldest first: every one, or the
first --limit. The gateway answers a page at a time, so a queue of any
length can be listed; with --json the items are printed as one JSON
array as the pages arrive.

When no gateway runs on --state, the items are read from its state file,
read-only, as it left them; stderr says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return &exitError{code: exitUsage, msg: "--limit must be 0 (every item) or more"}
			}
			return withReader(cmd, state, func(ctx context.Context, cl reader) error {
				out := cmd.OutOrStdout()
				if asJSON {
					arr := &jsonArray{w: out}
					if err := eachApproval(ctx, cl, status, limit, arr.add); err != nil {
						return err
					}
					return arr.close()
				}
				// The table is aligned over every row, so the rows (not
				// the items) are held until the end.
				now := time.Now()
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATUS\tAGE\tCAT\tBITS\tANOMALIES\tCONTROLLER\tREADER\tSUBSCRIPTION/QUERY\tEXPIRES IN\tAPPROVALS")
				n := 0
				err := eachApproval(ctx, cl, status, limit, func(a control.Approval) error {
					n++
					what := a.SubscriptionID
					if a.QueryID != "" {
						what = "query " + a.QueryID
					}
					_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%d\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Status, tui.Age(now.Sub(a.CreatedAt)), a.Category,
						a.BandwidthBits, len(a.Anomalies), a.Controller, a.Reader, what, expiresIn(now, a), cmp.Or(a.Progress(), "-"))
					return err
				})
				if err != nil {
					return err
				}
				if n == 0 {
					fmt.Fprintf(out, "No %s approval items.\n", statusWord(status))
					return nil
				}
				return tw.Flush()
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().StringVar(&status, "status", "pending", "pending, approved, rejected, expired, dropped or all")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.Flags().IntVar(&limit, "limit", 0, "print at most this many items (0: every one)")
	return cmd
}

// eachApproval calls fn with the items of a status, oldest first, at most
// limit of them (every one when limit is 0), reading them from the
// gateway a page at a time: no answer is large and only one page is held.
func eachApproval(ctx context.Context, cl reader, status string, limit int, fn func(control.Approval) error) error {
	p := control.ApprovalsParams{Status: status}
	for left := limit; ; {
		p.Limit = control.MaxApprovalsPage
		if limit > 0 {
			p.Limit = min(left, control.MaxApprovalsPage)
		}
		page, err := cl.ApprovalsPage(ctx, p)
		if err != nil {
			return err
		}
		for _, a := range page.Items {
			if err := fn(a); err != nil {
				return err
			}
		}
		left -= len(page.Items)
		if page.Next == 0 || (limit > 0 && left <= 0) {
			return nil
		}
		if page.Next <= p.Cursor {
			return fmt.Errorf("approvals list: the gateway's next cursor %d does not follow %d", page.Next, p.Cursor)
		}
		p.Cursor = page.Next
	}
}

// jsonArray writes values as one JSON array, one at a time, exactly as
// printJSON writes a slice of them: the list need not be held whole.
type jsonArray struct {
	w io.Writer
	n int
}

func (j *jsonArray) add(v control.Approval) error {
	b, err := json.MarshalIndent(v, "  ", "  ")
	if err != nil {
		return err
	}
	sep := ",\n  "
	if j.n == 0 {
		sep = "[\n  "
	}
	j.n++
	_, err = io.WriteString(j.w, sep+string(b))
	return err
}

func (j *jsonArray) close() error {
	end := "\n]\n"
	if j.n == 0 {
		end = "[]\n"
	}
	_, err := io.WriteString(j.w, end)
	return err
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
An item is decided once; deciding it again is refused.

An item whose approval policy requires several approvals (approvals:
{required: N} in its Controller's definition) is delivered once N
operators with different uids have approved it; until then "approve"
counts yours and says how many more are needed, and approving it again
yourself is refused. A rejection by anyone ends it.`,
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
				if a.Status == "pending" { // counted; others must approve too
					fmt.Fprintf(cmd.OutOrStdout(), "Approved %s (%s): Cat-%d from %s, not delivered yet: it waits for %d more approval(s) from other operators (other uids).\n",
						a.ID, a.Progress(), a.Category, a.Reader, a.Required-len(a.Approvals))
					return nil
				}
				if a.Kind == control.KindSubscription {
					fmt.Fprintf(cmd.OutOrStdout(), "Approved %s: subscription %s is active: %s may push Cat-%d (%.1f bits each) to %s, which is told.\n",
						a.ID, a.SubscriptionID, a.Reader, a.Category, a.BandwidthBits, a.Controller)
					return nil
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
