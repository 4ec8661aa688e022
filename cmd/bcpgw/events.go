package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/tui"
)

func newEventsCmd() *cobra.Command {
	var state, agent string
	var since int64
	var follow, asJSON bool
	var types []string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print the audit events, and follow new ones",
		Long: `Prints the gateway's audit events with seq greater than --since (all by
default), oldest first. With --follow, keeps printing new events as the
gateway stores them until interrupted; without --since it then starts
from now.

--type selects kinds (repeat it, or separate with commas); a trailing *
matches a prefix: --type 'approval_*' --type refused. --agent NAME keeps
the events whose agent is NAME (the first name printed: a message's
sender, the Controller a delivery was sent to, the agent whose session
it is; not the peer after "->"). Both are answered from indexes, however
long the log.

Events older than the gateway's retention (bcpgw run --retain) are
pruned; a --since before the oldest kept prints from there and says on
stderr "events before N were pruned".

--json prints one JSON object per line.

When no gateway runs on --state, the events are read from its state
file, read-only, as it left them (a post-mortem); stderr says so.
--follow needs a running gateway.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			types = splitTypes(types)
			out := cmd.OutOrStdout()
			print := func(e control.Event) error {
				if asJSON {
					return json.NewEncoder(out).Encode(e)
				}
				_, err := fmt.Fprintln(out, formatEvent(e))
				return err
			}
			// A cursor older than the gateway's retention is answered
			// from the oldest event kept, with a notice: said on stderr,
			// so that stdout stays events only.
			notice := func(text string) {
				if text != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "bcpgw events: "+text)
				}
			}
			if follow {
				cl, err := dial(ctx, state)
				var ee *exitError
				if errors.As(err, &ee) && ee.code == exitNotRunning {
					ee.msg += "; --follow needs a running gateway (without --follow, bcpgw events reads what its state file holds)"
				}
				if err != nil {
					return err
				}
				defer cl.Close()
				return apiError(followEvents(ctx, cl, control.SubscribeParams{Types: types, Agent: agent}, since, cmd.Flags().Changed("since"), print, notice))
			}
			// Without a gateway, from its state file (readFrom).
			return readFrom(ctx, cmd, state, func(ctx context.Context, cl reader) error {
				for first := true; ; first = false {
					page, err := cl.Events(ctx, control.EventsParams{Since: since, Types: types, Agent: agent})
					if err != nil {
						return err
					}
					if first {
						notice(page.Notice)
					}
					for _, e := range page.Events {
						if err := print(e); err != nil {
							return err
						}
					}
					if len(page.Events) < control.MaxEventsPage {
						return nil
					}
					since = page.Next
				}
			})
		},
	}
	stateFlag(cmd, &state)
	f := cmd.Flags()
	f.Int64Var(&since, "since", 0, "print events with seq greater than this")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	f.StringSliceVar(&types, "type", nil, "event kinds to print (prefix*)")
	f.StringVar(&agent, "agent", "", "only events about this agent")
	f.BoolVar(&asJSON, "json", false, "one JSON object per line")
	return cmd
}

// followEvents prints the events of subscription p (from since, if
// fromSince) until ctx ends or the gateway goes away.
func followEvents(ctx context.Context, cl *control.Client, p control.SubscribeParams, since int64, fromSince bool, print func(control.Event) error, notice func(string)) error {
	if fromSince {
		p.Since = &since
	}
	res, err := cl.Subscribe(ctx, p)
	if err != nil {
		return err
	}
	notice(res.Notice)
	for {
		select {
		case n, ok := <-cl.Notifications():
			if !ok {
				return &exitError{code: exitNotRunning, msg: "the connection to the gateway ended: " + cl.Err().Error()}
			}
			if err := print(n.Event); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func splitTypes(in []string) []string {
	var out []string
	for _, t := range in {
		for _, p := range strings.Split(t, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// formatEvent is one line for people:
// "1042 12:00:01 refused researcher->main budget_exhausted: ...". Text
// from runtimes is in it, so unusual characters are made visible.
func formatEvent(e control.Event) string {
	return tui.Printable(rawEvent(e))
}

func rawEvent(e control.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s %s", e.Seq, e.Time.Local().Format("2006-01-02 15:04:05"), e.Kind)
	if e.Agent != "" {
		b.WriteString(" " + e.Agent)
		if e.Peer != "" {
			b.WriteString("->" + e.Peer)
		}
	}
	if e.Category != 0 {
		fmt.Fprintf(&b, " cat%d", e.Category)
	}
	if e.Bits != 0 {
		b.WriteString(" " + bcp.FormatBits(e.Bits))
	}
	if e.Ref != "" {
		b.WriteString(" [" + e.Ref + "]")
	}
	if e.Detail != "" {
		b.WriteString(" " + e.Detail)
	}
	return b.String()
}

func newReportCmd() *cobra.Command {
	var state, agent string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Show how much Reader-originated information reached each Controller session",
		Long: `For each Controller session, the bits of Reader-originated information
delivered to it, by channel and category: the BCP audit figure "this
session was exposed to 47 bits, 6.9 of them Cat-1". A delivery re-sent
after a crash counts for every session it was sent to.

Then, for each subscription, its pushes by outcome (accepted, held for
review, delivered, filtered, refused by code) and the bits charged.

When no gateway runs on --state, the report is read from its state file,
read-only; without the definitions it lists the sessions of the agents
that were sent something. stderr says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withReader(cmd, state, func(ctx context.Context, cl reader) error {
				r, err := cl.Report(ctx, control.ReportParams{Agent: agent})
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), r)
				}
				writeReport(cmd.OutOrStdout(), r)
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	cmd.Flags().StringVar(&agent, "agent", "", "only this Controller")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeReport(w io.Writer, r control.Report) {
	writeExposure(w, r)
	if len(r.Subscriptions) == 0 {
		return
	}
	fmt.Fprintln(w, "\nSubscriptions")
	for _, f := range r.Subscriptions {
		fmt.Fprintf(w, "  %s <- %s %s: %d accepted", f.Controller, f.Reader, f.ID, f.Accepted)
		if f.Held > 0 {
			fmt.Fprintf(w, " (%d held for review)", f.Held)
		}
		if f.Superseded > 0 {
			fmt.Fprintf(w, ", %d superseded", f.Superseded)
		}
		fmt.Fprintf(w, ", %d delivered, %d filtered, %d refused", f.Delivered, f.Filtered, f.Refused)
		if len(f.RefusedBy) > 0 {
			codes := make([]string, 0, len(f.RefusedBy))
			for c := range f.RefusedBy {
				codes = append(codes, c)
			}
			sort.Strings(codes)
			for i, c := range codes {
				codes[i] = fmt.Sprintf("%s %d", c, f.RefusedBy[c])
			}
			fmt.Fprintf(w, " (%s)", strings.Join(codes, ", "))
		}
		fmt.Fprintf(w, "; %s charged\n", bcp.FormatBits(f.Bits))
	}
}

// writeExposure writes what each Controller session was exposed to.
func writeExposure(w io.Writer, r control.Report) {
	if len(r.Sessions) == 0 {
		fmt.Fprintln(w, "No Controller sessions recorded yet.")
		return
	}
	for i, s := range r.Sessions {
		if i > 0 {
			fmt.Fprintln(w)
		}
		name := s.Session
		if name == "" {
			name = "(session from before the log)"
		}
		ended := "running"
		if !s.EndedAt.IsZero() {
			ended = "ended " + s.EndedAt.Local().Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(w, "%s %s, started %s, %s\n", s.Agent, name, s.StartedAt.Local().Format("2006-01-02 15:04:05"), ended)
		fmt.Fprintf(w, "  exposed to %s", bcp.FormatBits(s.Bits))
		var cats []string
		for c := 1; c <= 3; c++ {
			if b, ok := s.ByCat[c]; ok {
				cats = append(cats, fmt.Sprintf("Cat-%d %s", c, bcp.FormatBits(b)))
			}
		}
		if len(cats) > 0 {
			fmt.Fprintf(w, " (%s)", strings.Join(cats, ", "))
		}
		fmt.Fprintln(w)
		for _, c := range s.Channels {
			fmt.Fprintf(w, "    from %-16s Cat-%d  %4d deliveries  %s\n", c.Reader, c.Category, c.Deliveries, bcp.FormatBits(c.Bits))
		}
	}
}
