package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
)

func newValidateCmd() *cobra.Command {
	var asJSON bool
	var stateDir string
	var compat compatFlags
	cmd := &cobra.Command{
		Use:   "validate DIR",
		Short: "Check a directory of agent definitions and summarize it",
		Long: `Loads every .md definition in DIR as one set, applies every load-time rule
and prints a summary: each agent, its sandbox (workdir, extra read-only and
writable paths, network), its channels (effective max category and both
sides' budgets) and each subscription with its bits per push and its
delivery policy (rate limit, filter, debounce, batch; --json adds the filter's estimated
worst-case cost).

With --state (or BCPGW_STATE), the rules about the state directory are
applied too (no workdir or sandbox path may reach into it), as bcpgw run
applies them; without it they are not.

An agent with sandbox: none is valid but printed as a WARNING: bcpgw run
refuses such a set unless started with --allow-unsandboxed.

Errors read path/file.md:LINE: field.path: message, all of them at once.
Exit status: 0 valid (warnings may be printed), 1 invalid.
` + compatHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := compat.options(stateDir, false)
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			set, err := agents.Load(args[0], opts)
			warnRuntimes(set)
			var le *agents.LoadError
			if err != nil && !errors.As(err, &le) {
				// The directory itself is unreadable: report it like any
				// other load error, so --json still prints one object.
				le = &agents.LoadError{Errors: []*agents.ParseError{{File: args[0], Msg: err.Error()}}}
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if asJSON {
				if err := json.NewEncoder(out).Encode(validateReport(args[0], stateDir, set, le)); err != nil {
					return err
				}
			} else {
				printProblems(errOut, set, le)
				if set != nil {
					printSummary(out, set, stateDir)
				}
			}
			if le != nil {
				return &exitError{code: exitFailed, msg: fmt.Sprintf("%s: %d error(s)", args[0], len(le.Errors))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of text")
	cmd.Flags().StringVar(&stateDir, "state", os.Getenv("BCPGW_STATE"), "the gateway's state directory, to check that no agent reaches into it (env BCPGW_STATE; optional)")
	compat.add(cmd.Flags())
	return cmd
}

// warnRuntimes adds a warning, at the runtime key, for each agent of set
// whose runtime program cannot be found or executed here: the gateway
// would fail it at its first start.
func warnRuntimes(set *agents.Set) {
	if set == nil {
		return
	}
	for _, d := range set.Agents {
		if err := session.CheckRuntimeProgram(d, os.LookupEnv); err != nil {
			set.Warnings = append(set.Warnings, d.Warnf("runtime", "the agent cannot start here: %v", err))
		}
	}
}

// printUnsandboxed warns, loudly and apart from the summary, about every
// agent that opted out of the sandbox: such a runtime can reach around
// every guarantee the gateway gives on the pipe.
func printUnsandboxed(w io.Writer, set *agents.Set) {
	for _, d := range set.Unsandboxed() {
		fmt.Fprintf(w, "WARNING %s: NOT SANDBOXED (sandbox: none): its runtime can reach everything its user can; "+
			"bcpgw run refuses this set unless started with --allow-unsandboxed\n", d.Name)
	}
}

// unsandboxedRefusal is why bcpgw run refuses a set with sandbox: none
// agents unless started with --allow-unsandboxed: it names them and the
// two ways out.
func unsandboxedRefusal(open []*agents.Definition) string {
	names := make([]string, len(open))
	for i, d := range open {
		names[i] = fmt.Sprintf("%s (%s)", d.Name, d.File)
	}
	verb, whose := "says", "its runtime"
	if len(open) > 1 {
		verb, whose = "say", "their runtimes"
	}
	return fmt.Sprintf("refusing to run without a sandbox: %s %s sandbox: none, so %s could reach everything this user can; "+
		"remove sandbox: none, or start bcpgw run with --allow-unsandboxed", strings.Join(names, ", "), verb, whose)
}

// sandboxLine describes d's sandbox in one line. stateDir may be empty,
// then a default workdir is shown as <state>/work/NAME.
func sandboxLine(d *agents.Definition, stateDir string) string {
	workdir, _ := workdirOf(d, stateDir)
	if d.Workdir == "" {
		workdir += " (default)"
	}
	if d.Sandbox.None {
		return "none (NOT SANDBOXED: its runtime can reach everything its user can), workdir " + workdir
	}
	return fmt.Sprintf("workdir %s, read-only [%s], read-write [%s], network %s", workdir,
		strings.Join(d.Sandbox.ReadOnly, ", "), strings.Join(d.Sandbox.ReadWrite, ", "), networkText(d.Sandbox.Network))
}

// workdirOf returns d's working directory as the gateway will use it, and
// whether it is known (an explicit workdir, or --state given).
func workdirOf(d *agents.Definition, stateDir string) (string, bool) {
	switch {
	case d.Workdir != "":
		return d.Workdir, true
	case stateDir == "":
		return agents.DefaultWorkdir("<state>", d.Name), false
	}
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	return agents.DefaultWorkdir(stateDir, d.Name), true
}

func networkText(n agents.Network) string {
	if n.Mode != agents.NetworkProxy {
		return string(cmp.Or(n.Mode, agents.NetworkNone))
	}
	return "[" + strings.Join(destinations(n), ", ") + "] through the egress proxy"
}

// destinations returns n's allowed destinations as written.
func destinations(n agents.Network) []string {
	out := make([]string, len(n.Allow))
	for i, d := range n.Allow {
		out[i] = d.String()
	}
	return out
}

func printProblems(w io.Writer, set *agents.Set, le *agents.LoadError) {
	var (
		warnings []*agents.Warning
		notes    []string
	)
	if set != nil {
		warnings, notes = set.Warnings, set.Notes
	}
	if le != nil {
		warnings, notes = le.Warnings, le.Notes
		for _, e := range le.Errors {
			fmt.Fprintf(w, "error: %s\n", e)
		}
	}
	for _, x := range warnings {
		fmt.Fprintf(w, "warning: %s\n", x)
	}
	if set != nil {
		printUnsandboxed(w, set)
	}
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func printSummary(w io.Writer, set *agents.Set, stateDir string) {
	subs := 0
	for _, l := range set.Links {
		subs += len(l.ControllerSide.Subscriptions)
	}
	fmt.Fprintf(w, "%s: valid: %s, %s, %s\n", set.Dir,
		plural(len(set.Agents), "agent"), plural(len(set.Links), "channel"), plural(subs, "subscription"))
	for _, d := range set.Agents {
		fmt.Fprintf(w, "\nagent %s  (%s)\n", d.Name, d.File)
		fmt.Fprintf(w, "  sandbox: %s\n", sandboxLine(d, stateDir))
		if len(d.Channels) == 0 {
			fmt.Fprintln(w, "  no channels")
		}
		for _, c := range d.Channels {
			l := linkOf(set, d, c)
			fmt.Fprintf(w, "  channel to %s: %s, max category %d (effective %d), budget %s (%s), %s (%s)\n",
				c.Peer, c.Role, c.MaxCategory, l.MaxCategory(),
				budgetText(l.ControllerSide.BudgetBits), l.Controller.Name, budgetText(l.ReaderSide.BudgetBits), l.Reader.Name)
			if r := ratesText(l); r != "" {
				fmt.Fprintf(w, "    rates: %s\n", r)
			}
			if c.Role == agents.RoleController {
				printApprovals(w, l) // validate_approvals.go
			}
			if len(c.Subscriptions) == 0 {
				continue
			}
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			for _, s := range c.Subscriptions {
				fmt.Fprintf(tw, "    subscription %s\tCat-%d\t%14s per push\t%s%s\n", s.ID, s.Spec.Category, bcp.FormatBits(s.Bits), shape(s.Spec), policyColumn(s))
			}
			tw.Flush()
		}
	}
}

// linkOf returns the link that channel c of d belongs to.
func linkOf(set *agents.Set, d *agents.Definition, c *agents.Channel) *agents.Link {
	if c.Role == agents.RoleController {
		return set.Link(d.Name, c.Peer)
	}
	return set.Link(c.Peer, d.Name)
}

// policyColumn is a subscription's delivery policy as the summary's last
// column ("\trate limit 1/hour; filter: score >= 4"), or nothing.
func policyColumn(s *agents.Subscription) string {
	if p := s.PolicyText(); p != "" {
		return "\t" + p
	}
	return ""
}

func shape(s bcp.Spec) string {
	switch s.Category {
	case bcp.Cat1:
		return plural(len(s.Fields), "field")
	case bcp.Cat2:
		return plural(len(s.Questions), "question")
	}
	return fmt.Sprintf("summary of %d words", s.MaxWords)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// The --json report. Field names are part of the CLI's interface.
type (
	jsonReport struct {
		Dir      string        `json:"dir"`
		Valid    bool          `json:"valid"`
		Errors   []jsonProblem `json:"errors"`
		Warnings []jsonProblem `json:"warnings"`
		Notes    []string      `json:"notes"`
		Agents   []jsonAgent   `json:"agents"`
	}
	jsonProblem struct {
		File string `json:"file"`
		Line int    `json:"line"`
		Path string `json:"path"`
		Msg  string `json:"message"`
	}
	jsonAgent struct {
		Name     string        `json:"name"`
		File     string        `json:"file"`
		Tools    []string      `json:"tools"`
		Sandbox  jsonSandbox   `json:"sandbox"`
		Channels []jsonChannel `json:"channels"`
	}
	// jsonSandbox: workdir is empty when it is the default and --state was
	// not given; network is none, host or proxy (then allow lists where).
	jsonSandbox struct {
		None           bool     `json:"none"`
		Workdir        string   `json:"workdir"`
		WorkdirDefault bool     `json:"workdir_default"`
		ReadOnly       []string `json:"read_only"`
		ReadWrite      []string `json:"read_write"`
		Network        string   `json:"network"`
		Allow          []string `json:"allow"`
	}
	jsonChannel struct {
		Peer                 string       `json:"peer"`
		Role                 agents.Role  `json:"role"`
		MaxCategory          bcp.Category `json:"max_category"`
		EffectiveMaxCategory bcp.Category `json:"effective_max_category"`
		ControllerBudgetBits int64        `json:"controller_budget_bits"`
		ReaderBudgetBits     int64        `json:"reader_budget_bits"`
		// Rates, by side, for TriOnyx channels (--compat trionyx): cat1,
		// cat2, cat3 as "N/unit" or "denied". A budget of 2^53 bits is
		// unlimited.
		ControllerRates map[string]string  `json:"controller_rates,omitempty"`
		ReaderRates     map[string]string  `json:"reader_rates,omitempty"`
		Subscriptions   []jsonSubscription `json:"subscriptions"`
		// Approvals is the approval policy of answers on a controller
		// side, when its Controller set any (validate_approvals.go).
		Approvals *jsonApprovals `json:"approvals,omitempty"`
	}
	jsonSubscription struct {
		ID            string         `json:"id"`
		Category      bcp.Category   `json:"category"`
		BandwidthBits float64        `json:"bandwidth_bits"`
		Fields        []bcp.Field    `json:"fields,omitempty"`
		Questions     []bcp.Question `json:"questions,omitempty"`
		Directive     string         `json:"directive,omitempty"`
		MaxWords      int            `json:"max_words,omitempty"`
		OnAnomaly     bcp.OnAnomaly  `json:"on_anomaly,omitempty"`
		// RateLimit and Filter are the delivery policy, when set;
		// FilterMaxCost is the filter's estimated worst-case cost, at most
		// agents.MaxFilterCost.
		RateLimit     *jsonRateLimit `json:"rate_limit,omitempty"`
		Filter        string         `json:"filter,omitempty"`
		FilterMaxCost uint64         `json:"filter_max_cost,omitempty"`
		// Debounce and Batch too, windows as Go durations.
		Debounce *jsonDebounce `json:"debounce,omitempty"`
		Batch    *jsonBatch    `json:"batch,omitempty"`
		// Approvals is its approval policy after inheritance, when its
		// Controller set any (validate_approvals.go).
		Approvals *jsonApprovals `json:"approvals,omitempty"`
	}
	// jsonRateLimit is a subscription's rate_limit: window as a Go
	// duration ("1h0m0s"), text as the summary writes it ("1/hour").
	jsonRateLimit struct {
		Max    int    `json:"max"`
		Window string `json:"window"`
		Text   string `json:"text"`
	}
	jsonDebounce struct {
		Key    string `json:"key"`
		Window string `json:"window"`
	}
	jsonBatch struct {
		Window string `json:"window"`
		Max    int    `json:"max"`
	}
)

func validateReport(dir, stateDir string, set *agents.Set, le *agents.LoadError) jsonReport {
	r := jsonReport{Dir: dir, Valid: le == nil, Errors: []jsonProblem{}, Warnings: []jsonProblem{}, Notes: []string{}, Agents: []jsonAgent{}}
	warnings := []*agents.Warning(nil)
	if le != nil {
		for _, e := range le.Errors {
			r.Errors = append(r.Errors, jsonProblem{e.File, e.Line, e.Path, e.Msg})
		}
		warnings = le.Warnings
		r.Notes = append(r.Notes, le.Notes...)
	}
	if set == nil {
		for _, w := range warnings {
			r.Warnings = append(r.Warnings, jsonProblem{w.File, w.Line, w.Path, w.Msg})
		}
		return r
	}
	for _, w := range set.Warnings {
		r.Warnings = append(r.Warnings, jsonProblem{w.File, w.Line, w.Path, w.Msg})
	}
	r.Notes = append(r.Notes, set.Notes...)
	for _, d := range set.Agents {
		a := jsonAgent{Name: d.Name, File: d.File, Tools: d.Tools, Sandbox: sandboxReport(d, stateDir), Channels: []jsonChannel{}}
		if a.Tools == nil {
			a.Tools = []string{}
		}
		for _, c := range d.Channels {
			l := linkOf(set, d, c)
			jc := jsonChannel{
				Peer: c.Peer, Role: c.Role, MaxCategory: c.MaxCategory, EffectiveMaxCategory: l.MaxCategory(),
				ControllerBudgetBits: l.ControllerSide.BudgetBits, ReaderBudgetBits: l.ReaderSide.BudgetBits,
				ControllerRates: ratesReport(l.ControllerSide.Rates), ReaderRates: ratesReport(l.ReaderSide.Rates),
				Subscriptions: []jsonSubscription{},
			}
			if c.Role == agents.RoleController {
				jc.Approvals = approvalsReport(l, "")
			}
			for _, s := range c.Subscriptions {
				js := jsonSubscription{
					ID: s.ID, Category: s.Spec.Category, BandwidthBits: s.Bits,
					Fields: s.Spec.Fields, Questions: s.Spec.Questions, Directive: s.Spec.Directive,
					MaxWords: s.Spec.MaxWords, OnAnomaly: s.Spec.OnAnomaly,
				}
				if r := s.RateLimit; r != nil {
					js.RateLimit = &jsonRateLimit{Max: r.Limit, Window: r.Window.String(), Text: r.String()}
				}
				if f := s.Filter; f != nil {
					js.Filter, js.FilterMaxCost = f.Source, f.MaxCost
				}
				if d := s.Debounce; d != nil {
					js.Debounce = &jsonDebounce{Key: d.Key, Window: d.Window.String()}
				}
				if b := s.Batch; b != nil {
					js.Batch = &jsonBatch{Window: b.Window.String(), Max: b.Max}
				}
				js.Approvals = approvalsReport(l, s.ID)
				jc.Subscriptions = append(jc.Subscriptions, js)
			}
			a.Channels = append(a.Channels, jc)
		}
		r.Agents = append(r.Agents, a)
	}
	return r
}

func sandboxReport(d *agents.Definition, stateDir string) jsonSandbox {
	sb := jsonSandbox{
		None:      d.Sandbox.None,
		ReadOnly:  append([]string{}, d.Sandbox.ReadOnly...),
		ReadWrite: append([]string{}, d.Sandbox.ReadWrite...),
		Network:   string(cmp.Or(d.Sandbox.Network.Mode, agents.NetworkNone)),
		Allow:     destinations(d.Sandbox.Network),
	}
	sb.WorkdirDefault = d.Workdir == ""
	if workdir, known := workdirOf(d, stateDir); known {
		sb.Workdir = workdir
	}
	return sb
}
