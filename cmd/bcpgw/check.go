package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway"
)

// checkOutput is the one JSON object `bcpgw check` prints.
type checkOutput struct {
	Accepted      bool          `json:"accepted"`
	Code          bcp.Code      `json:"code"`
	Detail        string        `json:"detail"`
	BandwidthBits float64       `json:"bandwidth_bits"`
	Response      bcp.Response  `json:"response"`
	Anomalies     []bcp.Anomaly `json:"anomalies"`
	Route         bcp.Route     `json:"route"`
	// Filtered: accepted, but the subscription's filter keeps it from
	// the Controller (route "filtered"; nothing charged).
	Filtered bool `json:"filtered"`
	// Policy is what the subscription's delivery policy says of the push;
	// absent when the subscription has none (or was not found).
	Policy *checkPolicy `json:"policy,omitempty"`
}

// checkPolicy is the delivery policy a push meets (docs/definitions.md).
type checkPolicy struct {
	// RateLimit is the limit as "N/hour" or "N per DURATION". A dry run
	// starts with an empty window, so it never refuses; the gateway
	// refuses the push over it with rate_limited.
	RateLimit string `json:"rate_limit,omitempty"`
	// Filter is the expression; FilterMatched what it said (absent when
	// the push was refused before it ran), FilterError why it failed (a
	// failure counts as no match).
	Filter        string `json:"filter,omitempty"`
	FilterMatched *bool  `json:"filter_matched,omitempty"`
	FilterError   string `json:"filter_error,omitempty"`
	// Debounce is the key, its window, and this push's value of the key
	// (JSON; absent when the push was refused): a later push with the
	// same value within the window replaces this one if it is not yet
	// delivered.
	Debounce *checkDebounce `json:"debounce,omitempty"`
	// Batch is the batch the push would wait in: it reaches the
	// Controller with the others once the window from the first has
	// passed or max pushes are held.
	Batch *checkBatch `json:"batch,omitempty"`
}

type checkDebounce struct {
	Key    string `json:"key"`
	Window string `json:"window"`
	Value  string `json:"value,omitempty"`
}

type checkBatch struct {
	Window string `json:"window"`
	Max    int    `json:"max"`
}

// routeFiltered is check's route of a push the filter keeps out.
const routeFiltered bcp.Route = "filtered"

// policyOf reports what sub's policy says of verdict v; ran says whether
// the filter ran (the push validated).
func policyOf(sub *agents.Subscription, v gateway.Verdict, ran bool) *checkPolicy {
	if sub == nil || (sub.RateLimit == nil && sub.Filter == nil && sub.Debounce == nil && sub.Batch == nil) {
		return nil
	}
	p := &checkPolicy{}
	if sub.RateLimit != nil {
		p.RateLimit = sub.RateLimit.String()
	}
	if sub.Filter != nil {
		p.Filter = sub.Filter.Source
		if ran {
			matched := !v.Filtered
			p.FilterMatched = &matched
		}
		if v.FilterErr != nil {
			p.FilterError = v.FilterErr.Error()
		}
	}
	if d := sub.Debounce; d != nil {
		p.Debounce = &checkDebounce{Key: d.Key, Window: d.Window.String(), Value: v.DebounceValue()}
	}
	if b := sub.Batch; b != nil {
		p.Batch = &checkBatch{Window: b.Window.String(), Max: b.Max}
	}
	return p
}

func newCheckCmd() *cobra.Command {
	var agentsDir, controller, reader, subscription, response string
	var compat compatFlags
	cmd := &cobra.Command{
		Use:   "check --agents DIR --controller C --reader R --subscription ID --response JSON",
		Short: "Dry-run one publish through exactly the gateway's validation",
		Long: `Runs the checks the gateway applies when Reader R publishes RESPONSE to
subscription ID of Controller C, with both sessions' budgets full, and prints
one JSON object: accepted, code, detail, bandwidth_bits (charged), response
(normalized, in spec order; null when refused), anomalies, route (deliver,
review, filtered or reject), filtered, and policy when the subscription has
a delivery policy: rate_limit (which a dry run, starting with an empty
window, never reaches), filter and filter_matched (and filter_error when the
filter failed, which counts as no match), debounce {key, window, value: this
push's value of the key} and batch {window, max}. A filtered push is accepted: it
is recorded, not delivered and not charged.

--response takes the JSON itself, @FILE to read it from a file, or - for
standard input.

Exit status: 0 accepted (route deliver, review or filtered), 1 refused, 2
usage or definition errors.
` + compatHelp + `
With --compat trionyx a category the channel's rates deny is refused
(category_not_allowed) before the other checks, as the gateway does; the
rates' windows are empty in a dry run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := readResponse(response, cmd.InOrStdin())
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			opts, err := compat.options("", false)
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			set, err := agents.Load(agentsDir, opts)
			if err != nil {
				return &exitError{code: exitUsage, msg: "definitions do not load:\n" + err.Error()}
			}
			if set.Agent(reader) == nil {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--reader: no agent named %q in %s", reader, agentsDir)}
			}
			p := gateway.Publish{Reader: reader, Controller: controller, SubscriptionID: subscription, Response: raw}
			v := gateway.JudgePublish(set, p, gateway.FreshBudgets)
			// Whether the filter ran: the budgets, after it, may refuse.
			filterRan := gateway.ValidatePublish(set, p).Accepted()
			if e := gateway.RateCheck(set, controller, reader, subscription); e != nil {
				v = gateway.Verdict{Result: bcp.Result{Route: bcp.RouteReject}, Err: e}
			}
			out := checkOutput{
				Accepted:      v.Accepted(),
				Detail:        v.Detail(),
				BandwidthBits: v.Charged(),
				Anomalies:     v.Result.Anomalies,
				Route:         v.Result.Route,
				Filtered:      v.Filtered,
				Policy:        policyOf(set.Subscription(controller, reader, subscription), v, filterRan),
			}
			if v.Filtered {
				out.Route = routeFiltered
			}
			if out.Anomalies == nil {
				out.Anomalies = []bcp.Anomaly{}
			}
			if v.Err != nil {
				out.Code = v.Err.Code
			} else {
				out.Response = v.Result.Response
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			if err := enc.Encode(out); err != nil {
				return err
			}
			if !out.Accepted {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&agentsDir, "agents", os.Getenv("BCPGW_AGENTS"), "directory of agent definitions (env BCPGW_AGENTS)")
	f.StringVar(&controller, "controller", "", "the subscribing Controller")
	f.StringVar(&reader, "reader", "", "the publishing Reader")
	f.StringVar(&subscription, "subscription", "", "the subscription id")
	f.StringVar(&response, "response", "", "the response JSON, @FILE, or - for stdin")
	compat.add(f)
	for _, name := range []string{"controller", "reader", "subscription", "response"} {
		_ = cmd.MarkFlagRequired(name)
	}
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if agentsDir == "" {
			return errors.New("--agents is required (or set BCPGW_AGENTS)")
		}
		return nil
	}
	return cmd
}

// readResponse resolves --response: literal JSON, @FILE or - (stdin).
func readResponse(arg string, stdin io.Reader) ([]byte, error) {
	limit := func(r io.Reader, what string) ([]byte, error) {
		data, err := io.ReadAll(io.LimitReader(r, bcp.MaxResponseBytes+1))
		if err != nil {
			return nil, fmt.Errorf("--response: read %s: %w", what, err)
		}
		return data, nil
	}
	switch {
	case arg == "-":
		return limit(stdin, "standard input")
	case strings.HasPrefix(arg, "@"):
		f, err := os.Open(arg[1:])
		if err != nil {
			return nil, fmt.Errorf("--response: %w", err)
		}
		defer f.Close()
		return limit(f, arg[1:])
	}
	return []byte(arg), nil
}
