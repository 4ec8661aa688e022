package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/tui"
)

// completionTimeout bounds what one completion asks the gateway: the
// shell waits for it at every TAB.
const completionTimeout = time.Second

// addCompletions makes the shell complete (bcpgw completion bash|zsh|
// fish|powershell) the agent names of agents start/stop and prompt, the
// pending approval items of approve and reject, and the parked deliveries
// of deliveries retry and discard, as the running gateway on --state (or
// $BCPGW_STATE) has them. Without a gateway, or without its answer
// within completionTimeout, nothing is offered and nothing is said.
func addCompletions(root *cobra.Command) {
	for path, list := range map[string]func(context.Context, *control.Client) ([]string, error){
		"agents start":       agentNames,
		"agents stop":        agentNames,
		"prompt":             agentNames,
		"approve":            pendingApprovals,
		"reject":             pendingApprovals,
		"deliveries retry":   parkedDeliveries,
		"deliveries discard": parkedDeliveries,
	} {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil || cmd.CommandPath() != programName+" "+path {
			panic("completion for a command that is not there: " + path)
		}
		cmd.ValidArgsFunction = completeFrom(list)
	}
}

// completeFrom completes the first argument with what list returns,
// "value\tdescription" each.
func completeFrom(list func(context.Context, *control.Client) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		state, _ := cmd.Flags().GetString("state")
		if len(args) > 0 || state == "" {
			return nil, none
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		cl, err := control.Dial(ctx, filepath.Join(state, control.SocketName))
		if err != nil {
			return nil, none
		}
		defer cl.Close()
		all, err := list(ctx, cl)
		if err != nil {
			return nil, none
		}
		var out []cobra.Completion
		for _, c := range all {
			if strings.HasPrefix(c, toComplete) {
				out = append(out, c)
			}
		}
		return out, none
	}
}

// completion is a value and its description, both made printable: they
// come from definitions and runtimes, and a tab or a newline would end
// the shell's entry.
func completion(value, description string) string {
	return tui.Printable(value) + "\t" + tui.Printable(description)
}

func agentNames(ctx context.Context, cl *control.Client) ([]string, error) {
	all, err := cl.Agents(ctx)
	var out []string
	for _, a := range all {
		what := strings.Join(append(a.Roles, a.State), ", ")
		if a.Description != "" {
			what += ": " + a.Description
		}
		out = append(out, completion(a.Name, what))
	}
	return out, err
}

// pendingApprovals are the oldest pending items (a page): those a shell
// can list usefully.
func pendingApprovals(ctx context.Context, cl *control.Client) ([]string, error) {
	page, err := cl.ApprovalsPage(ctx, control.ApprovalsParams{Status: "pending"})
	var out []string
	for _, a := range page.Items {
		out = append(out, completion(a.ID, fmt.Sprintf("Cat-%d %s → %s, %.1f bits, %d anomalies", a.Category, a.Reader, a.Controller, a.BandwidthBits, len(a.Anomalies))))
	}
	return out, err
}

// parkedDeliveries are the oldest parked deliveries (a page).
func parkedDeliveries(ctx context.Context, cl *control.Client) ([]string, error) {
	page, err := cl.Deliveries(ctx, control.DeliveriesParams{State: "parked"})
	var out []string
	for _, d := range page.Deliveries {
		out = append(out, completion(d.ID, fmt.Sprintf("Cat-%d %s → %s, failed %d times", d.Category, d.Reader, d.Controller, d.Failures)))
	}
	return out, err
}
