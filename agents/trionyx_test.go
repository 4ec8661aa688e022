package agents_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
)

// trionyxWorkspace is a TriOnyx workspace written for these tests: its
// definitions in agent-definitions/, the files they name beside them.
const trionyxWorkspace = "testdata/trionyx/workspace"

func trionyxOpts() agents.LoadOptions {
	return agents.LoadOptions{
		Compat: agents.CompatTriOnyx, DefaultRuntime: []string{"/usr/bin/env", "trionyx-runner"},
		LookupEnv: func(string) (string, bool) { return "", false },
	}
}

func loadTriOnyx(t *testing.T, dir string, opts agents.LoadOptions) *agents.Set {
	t.Helper()
	set, err := agents.Load(dir, opts)
	if err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	return set
}

func warningsOf(set *agents.Set) []string {
	var out []string
	for _, w := range set.Warnings {
		out = append(out, w.String())
	}
	return out
}

func TestTriOnyxTranslation(t *testing.T) {
	ws, err := filepath.Abs(trionyxWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	set := loadTriOnyx(t, filepath.Join(trionyxWorkspace, "agent-definitions"), trionyxOpts())
	main, researcher, webhook := set.Agent("main"), set.Agent("researcher"), set.Agent("webhook")
	if main == nil || researcher == nil || webhook == nil {
		t.Fatalf("agents: %v", set.Agents)
	}

	// The security keys, as sandbox paths and network.
	if got, want := main.Workdir, filepath.Join(ws, "agents", "main"); got != want {
		t.Errorf("main workdir = %s, want %s (TriOnyx's /agents/NAME/**)", got, want)
	}
	// /agents/main/** is the workdir already: not read-only inside it.
	if got, want := main.Sandbox.ReadOnly, []string{filepath.Join(ws, "AGENTS.md")}; !slices.Equal(got, want) {
		t.Errorf("main read-only = %v, want %v", got, want)
	}
	if got, want := main.Sandbox.ReadWrite, []string{filepath.Join(ws, "obsidian/shared/wiki")}; !slices.Equal(got, want) {
		t.Errorf("main read-write = %v, want %v", got, want)
	}
	network := func(d *agents.Definition) (agents.NetworkMode, []string) {
		var allow []string
		for _, a := range d.Sandbox.Network.Allow {
			allow = append(allow, a.String())
		}
		return d.Sandbox.Network.Mode, allow
	}
	if mode, allow := network(main); mode != agents.NetworkProxy || !slices.Equal(allow, []string{"api.anthropic.com:443"}) {
		t.Errorf("main (network: none): %s %v, want proxy [api.anthropic.com:443]", mode, allow)
	}
	if mode, _ := network(researcher); mode != agents.NetworkHost {
		t.Errorf("researcher (network: outbound): %s, want host", mode)
	}
	if mode, allow := network(webhook); mode != agents.NetworkProxy || !slices.Equal(allow, []string{"api.github.com", "hooks.slack.com:443", "api.anthropic.com:443"}) {
		t.Errorf("webhook (a host list): %s %v", mode, allow)
	}
	// A missing fs_read path is left out; a missing fs_write DIR/** kept
	// (bcpgw run creates it).
	if len(webhook.Sandbox.ReadOnly) != 0 || !slices.Equal(webhook.Sandbox.ReadWrite, []string{filepath.Join(ws, "data/webhooks")}) {
		t.Errorf("webhook paths: ro %v rw %v", webhook.Sandbox.ReadOnly, webhook.Sandbox.ReadWrite)
	}

	// Runtime, model, durations, heartbeat.
	if !slices.Equal(main.Runtime, []string{"/usr/bin/env", "trionyx-runner"}) {
		t.Errorf("runtime = %v, want --default-runtime's", main.Runtime)
	}
	if main.Model != "claude-sonnet-4-6" || researcher.Model != agents.TriOnyxDefaultModel {
		t.Errorf("models %q, %q", main.Model, researcher.Model)
	}
	if main.IdleTimeout != 45*time.Minute || researcher.IdleTimeout != agents.DefaultIdleTimeout {
		t.Errorf("idle timeouts %s, %s", main.IdleTimeout, researcher.IdleTimeout)
	}
	if n := len(main.CronSchedules); n != 2 || main.CronSchedules[1].Schedule != "@every 30m0s" || main.CronSchedules[1].Label != "heartbeat" {
		t.Errorf("cron schedules: %+v", main.CronSchedules)
	}

	// The channel: rates, max_category from them, no budget.
	l := set.Link("main", "researcher")
	if l == nil {
		t.Fatal("no main-researcher link")
	}
	c := l.ControllerSide
	if c.MaxCategory != bcp.Cat2 || l.MaxCategory() != bcp.Cat2 {
		t.Errorf("max category %d (effective %d), want 2 from rates", c.MaxCategory, l.MaxCategory())
	}
	if c.Rates.Cat1 != (agents.Rate{Limit: 30, Window: time.Hour}) || c.Rates.Cat2 != (agents.Rate{Limit: 5, Window: time.Minute}) || !c.Rates.Cat3.Denied() {
		t.Errorf("main's rates %+v", *c.Rates)
	}
	if r := l.ReaderSide.Rates.Cat1; r != (agents.Rate{Limit: 60, Window: time.Hour}) {
		t.Errorf("researcher's bare cat1: 60 = %+v, want 60/hour", r)
	}
	if c.BudgetBits != agents.UnlimitedBudget || l.ReaderSide.BudgetBits != agents.UnlimitedBudget || c.MaxCat2Queries != agents.UnlimitedQueries {
		t.Errorf("budget %d/%d, cat2 queries %d: want unlimited", c.BudgetBits, l.ReaderSide.BudgetBits, c.MaxCat2Queries)
	}
	// TriOnyx's spellings: name/format/options (the name is the question),
	// a question without max_words gets TriOnyx's 10.
	findings := set.Subscription("main", "researcher", "findings")
	if findings == nil {
		t.Fatal("no findings subscription")
	}
	qs := findings.Spec.Questions
	if len(qs) != 3 || qs[0].ID != "topic" || qs[0].Format != bcp.ShortText || qs[0].MaxWords != 8 ||
		qs[1].ID != "author" || qs[1].Format != bcp.PersonName || qs[1].MaxWords != 10 ||
		qs[2].ID != "published" || qs[2].Question != "When was it published?" || qs[2].Format != bcp.Date {
		t.Errorf("questions: %+v", qs)
	}
	alerts := set.Subscription("main", "researcher", "alerts")
	if alerts == nil || !slices.Equal(alerts.Spec.Fields[1].Values, []string{"low", "high", "critical"}) {
		t.Errorf("alerts: %+v", alerts)
	}
	// The channel to an agent that is not there is ignored.
	if len(researcher.Channels) != 1 {
		t.Errorf("researcher channels: %v", researcher.Channels)
	}

	// One warning per unenforced key, at its line; the defaults said.
	warnings := strings.Join(warningsOf(set), "\n")
	for _, want := range []string{
		"main.md:12: send_to: accepted but not enforced by bcpgw",
		"main.md:14: receive_from: accepted but not enforced by bcpgw",
		"main.md:16: base_taint: accepted but not enforced by bcpgw",
		"researcher.md:6: browser: accepted but not enforced by bcpgw",
		"webhook.md:14: input_sources: accepted but not enforced by bcpgw",
		"researcher.md:5: network: outbound is the host's network here",
		"main.md:24: bcp_channels[0]: no budget_bits: unlimited with --compat trionyx",
		"researcher.md:10: bcp_channels[0]: no budget_bits: unlimited",
		`researcher.md:16: bcp_channels[1].peer: no agent named "bookmarks"`,
		"webhook.md:11: fs_read[0]: " + filepath.Join(ws, "repo/config") + " does not exist: left out of the sandbox",
		"webhook.md:13: fs_write[0]: " + filepath.Join(ws, "data/webhooks") + " does not exist yet: bcpgw run creates it",
	} {
		if n := strings.Count(warnings, want); n != 1 {
			t.Errorf("warning %q given %d times, want once; warnings:\n%s", want, n, warnings)
		}
	}
	if strings.Contains(warnings, "bcp_channels[1]: no budget_bits") {
		t.Errorf("a budget warning for the ignored channel:\n%s", warnings)
	}
	// TriOnyx's runtime reads the messages TriOnyx's way.
	if main.Dialect != agents.DialectTriOnyx || webhook.Dialect != agents.DialectTriOnyx {
		t.Errorf("dialects %q, %q: want trionyx by default", main.Dialect, webhook.Dialect)
	}
	if set.Options().Compat != agents.CompatTriOnyx {
		t.Error("the set forgot how it was loaded (a reload must read the same format)")
	}
}

// Without --compat the same files are bcpgw definitions, and refused.
func TestTriOnyxStrictWithoutCompat(t *testing.T) {
	_, err := agents.LoadDir(filepath.Join(trionyxWorkspace, "agent-definitions"))
	var le *agents.LoadError
	if !errors.As(err, &le) {
		t.Fatalf("LoadDir: %v, want a LoadError", err)
	}
	text := err.Error()
	for _, want := range []string{"main.md:1: runtime: required", "main.md:6: network: unknown field", "main.md:7: fs_read: unknown field",
		"main.md:26: bcp_channels[0].rates: unknown field", "researcher.md:6: browser: unknown field"} {
		if !strings.Contains(text, want) {
			t.Errorf("strict load lacks %q:\n%s", want, text)
		}
	}
}

// writeTriOnyx writes a workspace: files (path -> content; a path ending
// in / is a directory) and returns it with its definitions directory.
func writeTriOnyx(t *testing.T, files map[string]string) (ws, defs string) {
	t.Helper()
	ws = t.TempDir()
	for name, content := range files {
		p := filepath.Join(ws, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws, filepath.Join(ws, "agent-definitions")
}

// What cannot be translated is an error at its line.
func TestTriOnyxErrors(t *testing.T) {
	_, defs := writeTriOnyx(t, map[string]string{
		"docs/": "",
		"agent-definitions/bad.md": `---
name: bad
tools: Read
fs_read:
  - "/src/**/*.py"
  - "/docs"
  - "/agents/*/NOTES.md"
fs_raed: []
network: everywhere
base_taint: extreme
idle_timeout: 10 minutes
bcp_channels:
  - peer: other
    role: controller
    max_category: 2
    rates: {cat1: 5/day, cat2: 1000001/hour}
sandbox: none
---
`,
		"agent-definitions/other.md": `---
name: other
tools: []
runtime: [/bin/true]
env: {ANTHROPIC_BASE_URL: "${NOT_SET_ANYWHERE}"}
bcp_channels:
  - peer: bad
    role: reader
    rates: {cat1: 0, cat2: 0/hour}
heartbeat_every: 500
---
`,
	})
	opts := trionyxOpts()
	opts.DefaultRuntime = nil
	_, err := agents.Load(defs, opts)
	if err == nil {
		t.Fatal("loaded")
	}
	text := err.Error()
	for _, want := range []string{
		"bad.md:1: runtime: TriOnyx definitions name no runtime: give bcpgw --default-runtime",
		`bad.md:5: fs_read[0]: "/src/**/*.py" cannot be enforced exactly`,
		`bad.md:6: fs_read[1]: "/docs" is a directory: TriOnyx grants the directory itself, not its contents; write /docs/** for all of it`,
		`bad.md:7: fs_read[2]: "/agents/*/NOTES.md" cannot be enforced exactly`,
		"bad.md:8: fs_raed: unknown field",
		`bad.md:9: network: must be none, outbound or a list of hosts, got "everywhere"`,
		`bad.md:10: base_taint: must be low, medium or high, got "extreme"`,
		`bad.md:11: idle_timeout: "10 minutes" is not a duration`,
		"bad.md:15: bcp_channels[0].max_category: not used with --compat trionyx",
		`bad.md:16: bcp_channels[0].rates.cat1: "5/day" is not a rate`,
		"bad.md:16: bcp_channels[0].rates.cat2: at most 100000 per window",
		"bad.md:17: sandbox: not used with --compat trionyx",
		"other.md:3: tools: must list at least one tool",
		"other.md:5: env.ANTHROPIC_BASE_URL: ${NOT_SET_ANYWHERE} is not set",
		"other.md:9: bcp_channels[0].rates: every category is 0 (denied)",
		"other.md:10: heartbeat_every: @every needs an interval of at least 1s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("errors lack %q:\n%s", want, text)
		}
	}
}

// bcpgw run (MakeDirs) creates what TriOnyx agents may write; validate
// does not; the model API follows ANTHROPIC_BASE_URL; TriOnyx's
// credentials are passed through when set.
func TestTriOnyxMakeDirsAndModelAPI(t *testing.T) {
	ws, defs := writeTriOnyx(t, map[string]string{
		"agent-definitions/writer.md": `---
name: writer
tools: Write
fs_write: ["/out/**", "/out/deeper/**", "/notes.md"]
env: {ANTHROPIC_BASE_URL: "${LLM_URL}"}
runtime_dialect: bcpgw
turn_timeout: 45m
---
`,
	})
	env := map[string]string{"LLM_URL": "http://127.0.0.1:8089/v1", "ANTHROPIC_API_KEY": "sk-test"}
	opts := trionyxOpts()
	opts.LookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	set := loadTriOnyx(t, defs, opts)
	for _, dir := range []string{"agents/writer", "out"} {
		if _, err := os.Stat(filepath.Join(ws, dir)); err == nil {
			t.Errorf("validate created %s", dir)
		}
	}
	d := set.Agent("writer")
	if d.Dialect != agents.DialectBCPGW {
		t.Errorf("runtime_dialect: bcpgw read as %q", d.Dialect)
	}
	if d.TurnTimeout != 45*time.Minute {
		t.Errorf("turn_timeout: 45m read as %v", d.TurnTimeout)
	}
	if len(d.Sandbox.Network.Allow) != 1 || d.Sandbox.Network.Allow[0].String() != "127.0.0.1:8089" {
		t.Errorf("network %+v, want the model API at ANTHROPIC_BASE_URL only", d.Sandbox.Network)
	}
	if d.Env["ANTHROPIC_API_KEY"] != "${ANTHROPIC_API_KEY}" || d.Env["CLAUDE_CODE_OAUTH_TOKEN"] != "" {
		t.Errorf("env %v: want ANTHROPIC_API_KEY passed through (set), CLAUDE_CODE_OAUTH_TOKEN not (unset)", d.Env)
	}
	// /out/deeper lies inside /out; the missing /notes.md is left out.
	if !slices.Equal(d.Sandbox.ReadWrite, []string{filepath.Join(ws, "out")}) {
		t.Errorf("read-write %v", d.Sandbox.ReadWrite)
	}
	opts.MakeDirs = true
	loadTriOnyx(t, defs, opts)
	for _, dir := range []string{"agents/writer", "out"} {
		fi, err := os.Stat(filepath.Join(ws, dir))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s after a load with MakeDirs: %v %v", dir, fi, err)
		}
	}
}

// A channel whose peer has no channel back is ignored with a warning, as
// TriOnyx ignores it; a subscription of a category the rates deny is
// warned about.
func TestTriOnyxUnmirroredAndDenied(t *testing.T) {
	_, defs := writeTriOnyx(t, map[string]string{
		"agent-definitions/boss.md": `---
name: boss
tools: BCPQuery
bcp_channels:
  - peer: scout
    role: controller
    rates: {cat1: 0, cat2: 5/hour}
    budget_bits: 4000
    subscriptions:
      - id: flags
        category: 1
        fields: [{name: ok, type: boolean}]
  - peer: loner
    role: controller
    rates: {cat1: 1/hour}
---
`,
		"agent-definitions/scout.md": `---
name: scout
tools: BCPPublish
bcp_channels:
  - {peer: boss, role: reader, rates: {cat1: 10/hour, cat2: 10/hour}, budget_bits: 4000}
---
`,
		"agent-definitions/loner.md": `---
name: loner
tools: Read
---
`,
	})
	set := loadTriOnyx(t, defs, trionyxOpts())
	warnings := strings.Join(warningsOf(set), "\n")
	for _, want := range []string{
		"boss.md:13: bcp_channels[1].peer: loner has no channel back to boss: the channel is ignored, as TriOnyx ignores it",
		"boss.md:10: bcp_channels[0].subscriptions[0]: flags is Cat-1, which boss's rates deny (rates.cat1: 0): its pushes will all be refused",
	} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings lack %q:\n%s", want, warnings)
		}
	}
	if strings.Contains(warnings, "no budget_bits") {
		t.Errorf("budget warning with budget_bits set:\n%s", warnings)
	}
	if len(set.Agent("boss").Channels) != 1 || len(set.Links) != 1 {
		t.Errorf("channels %v, links %d", set.Agent("boss").Channels, len(set.Links))
	}
}
