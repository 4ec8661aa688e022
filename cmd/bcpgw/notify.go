package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway"
	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/notify"
	"github.com/bcpgw/bcpgw/internal/tui"
)

func newNotifyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "notify",
		Short: "Webhook notifications (bcpgw run --notify FILE)",
		Long: `The targets of a notify file are sent the events they ask for (an
approval item waiting, an agent failed, a reload refused ...), as JSON,
as a Slack message or as an ntfy.sh notification. See docs/operating.md,
"Notifications".`,
	}
	cmd.AddCommand(newNotifyTestCmd())
	return cmd
}

func newNotifyTestCmd() *cobra.Command {
	var state, file string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "test TARGET",
		Short: "Send a sample notification to one target and print the answer",
		Long: `Sends TARGET a sample event (kind notify_test, marked "test"), once,
signed if the target is, and prints what its endpoint answered. Nothing
else happens: the target's cursor does not move, and a 410 Gone does not
disable it.

By default the running gateway on --state sends it, with the targets it
has loaded and the secrets of its own environment. With --notify FILE,
this command loads FILE and sends it itself (the variables the file names
must then be set here), with or without a running gateway.

Exit status: 0 if the endpoint answered 2xx, 1 otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r control.NotifyTestResult
			if file != "" {
				ts, err := notify.Load(file, os.Getenv)
				if err != nil {
					return &exitError{code: exitUsage, msg: err.Error()}
				}
				t := ts.Target(args[0])
				if t == nil {
					return &exitError{code: exitUsage, msg: fmt.Sprintf("%s has no target %q (targets: %s)", file, args[0], strings.Join(ts.Names(), ", "))}
				}
				r = gateway.NotifyTestResult(t, notify.SendTest(cmd.Context(), t, notify.TestOptions{}))
			} else {
				err := withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
					var err error
					r, err = cl.NotifyTest(ctx, args[0])
					return err
				})
				if err != nil {
					return err
				}
			}
			if asJSON {
				if err := printJSON(cmd.OutOrStdout(), r); err != nil {
					return err
				}
			} else {
				printNotifyTest(cmd.OutOrStdout(), r)
			}
			if r.Outcome != string(notify.OutcomeOK) {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().StringVar(&file, "notify", "", "load the targets from this file and send from here, instead of from the gateway on --state")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printNotifyTest(w io.Writer, r control.NotifyTestResult) {
	signed := "unsigned"
	if r.Signed {
		signed = "signed"
	}
	fmt.Fprintf(w, "%s (%s, %s, %s): %s in %dms\n", r.Target, r.Host, r.Format, signed, r.Summary, r.DurationMS)
	if r.Body != "" {
		// The answer comes from elsewhere: shown with invisible
		// characters and escapes made visible.
		fmt.Fprintf(w, "%s\n", tui.Printable(strings.TrimRight(r.Body, "\n")))
	}
}
