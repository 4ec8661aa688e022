package agents_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
)

const examplesDir = "../examples/agents"

// writeSet writes files (name -> content; names may contain a directory)
// into a fresh directory and returns it.
func writeSet(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mustLoad loads dir and fails the test on any error.
func mustLoad(t *testing.T, dir string) *agents.Set {
	t.Helper()
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatalf("LoadDir(%s): %v", dir, err)
	}
	return set
}

// loadErrors loads dir, which must fail with a *agents.LoadError, and
// returns that error.
func loadErrors(t *testing.T, dir string) *agents.LoadError {
	t.Helper()
	set, err := agents.LoadDir(dir)
	var le *agents.LoadError
	if !errors.As(err, &le) {
		t.Fatalf("LoadDir(%s): got set %v, error %v (%T); want a *agents.LoadError", dir, set != nil, err, err)
	}
	if set != nil {
		t.Errorf("LoadDir(%s) returned a set along with its error", dir)
	}
	return le
}

// errorLines renders le.Errors one per line, with dir+"/" removed.
func errorLines(le *agents.LoadError, dir string) []string {
	out := make([]string, len(le.Errors))
	for i, e := range le.Errors {
		out[i] = strings.ReplaceAll(e.Error(), dir+string(filepath.Separator), "")
	}
	return out
}

// solo is a minimal definition with extra top-level YAML lines.
func solo(extra string) string {
	return "---\nname: solo\nruntime: [bin/demo-agent]\n" + extra + "---\nYou are solo.\n"
}

// pairSet returns a controller main and a reader researcher with the given
// max categories and main's subscriptions (YAML list items, indented by
// six spaces).
func pairSet(ctrlMax, readerMax int, subs string) map[string]string {
	main := "---\nname: main\nruntime: [bin/demo-agent]\ntools: [BCPQuery]\nbcp_channels:\n" +
		"  - peer: researcher\n    role: controller\n    max_category: " + strconv.Itoa(ctrlMax) + "\n" +
		"    budget_bits: 4000\n    max_cat2_queries: 5\n"
	if subs != "" {
		main += "    subscriptions:\n" + subs
	}
	main += "---\nYou are main.\n"
	researcher := "---\nname: researcher\nruntime: [bin/demo-agent]\ntools: [BCPRespond, BCPPublish]\nbcp_channels:\n" +
		"  - peer: main\n    role: reader\n    max_category: " + strconv.Itoa(readerMax) + "\n" +
		"    budget_bits: 4000\n---\nYou are the researcher.\n"
	return map[string]string{"main.md": main, "researcher.md": researcher}
}

func TestExampleSet(t *testing.T) {
	t.Parallel()
	set := mustLoad(t, examplesDir)

	var names []string
	for _, d := range set.Agents {
		names = append(names, d.Name)
	}
	if want := []string{"main", "researcher"}; !slices.Equal(names, want) {
		t.Errorf("agents: got %q, want %q", names, want)
	}
	for _, w := range set.Warnings {
		t.Errorf("unexpected warning: %s", w)
	}
	for _, n := range set.Notes {
		t.Errorf("unexpected note: %s", n)
	}
	for _, name := range names {
		if got := set.Agent(name); got == nil || got.Name != name {
			t.Errorf("Agent(%q): got %v", name, got)
		}
	}
	if got := set.Agent("nobody"); got != nil {
		t.Errorf("Agent(nobody): got %v, want nil", got)
	}
}

func TestExampleSubscriptionBits(t *testing.T) {
	t.Parallel()
	set := mustLoad(t, examplesDir)
	tests := []struct {
		id       string
		category bcp.Category
		bits     string
	}{
		// 11 x (10 + 50 + 1) words.
		{"research-findings", bcp.Cat2, "671.0 bits"},
		// boolean 1 + log2(4) = 3.
		{"research-alerts", bcp.Cat1, "3.0 bits"},
		// 11 x 100 words.
		{"digest", bcp.Cat3, "1100.0 bits"},
	}
	for _, tt := range tests {
		sub := set.Subscription("main", "researcher", tt.id)
		if sub == nil {
			t.Errorf("Subscription(main, researcher, %q): not found", tt.id)
			continue
		}
		if got := bcp.FormatBits(sub.Bits); got != tt.bits {
			t.Errorf("%s: Bits: got %s, want %s", tt.id, got, tt.bits)
		}
		if got := bcp.FormatBits(bcp.Bits(sub.Spec)); got != tt.bits {
			t.Errorf("%s: bcp.Bits(Spec): got %s, want %s", tt.id, got, tt.bits)
		}
		if sub.Spec.Category != tt.category {
			t.Errorf("%s: category: got %d, want %d", tt.id, sub.Spec.Category, tt.category)
		}
		if ps := sub.Spec.Problems(); ps != nil {
			t.Errorf("%s: loaded spec has problems: %v", tt.id, ps)
		}
	}
	for _, missing := range []struct{ controller, reader, id string }{
		{"main", "researcher", "nope"},
		{"researcher", "main", "digest"},
		{"main", "nobody", "digest"},
	} {
		if got := set.Subscription(missing.controller, missing.reader, missing.id); got != nil {
			t.Errorf("Subscription(%s, %s, %s): got %v, want nil", missing.controller, missing.reader, missing.id, got)
		}
	}
}

func TestExampleLink(t *testing.T) {
	t.Parallel()
	set := mustLoad(t, examplesDir)
	if got := len(set.Links); got != 1 {
		t.Fatalf("links: got %d, want 1", got)
	}
	l := set.Link("main", "researcher")
	if l == nil {
		t.Fatal("Link(main, researcher): nil")
	}
	tests := []struct {
		what      string
		got, want any
	}{
		{"Controller", l.Controller.Name, "main"},
		{"Reader", l.Reader.Name, "researcher"},
		{"ControllerSide.Role", l.ControllerSide.Role, agents.RoleController},
		{"ReaderSide.Role", l.ReaderSide.Role, agents.RoleReader},
		{"ControllerSide.Peer", l.ControllerSide.Peer, "researcher"},
		{"ReaderSide.Peer", l.ReaderSide.Peer, "main"},
		{"MaxCategory", l.MaxCategory(), bcp.Cat3},
		{"ControllerSide.BudgetBits", l.ControllerSide.BudgetBits, int64(20000)},
		{"ReaderSide.BudgetBits", l.ReaderSide.BudgetBits, int64(20000)},
		{"ControllerSide.MaxCat2Queries", l.ControllerSide.MaxCat2Queries, 10},
		{"ControllerSide.MaxCat3Queries", l.ControllerSide.MaxCat3Queries, 2},
		{"ReaderSide.Subscriptions", len(l.ReaderSide.Subscriptions), 0},
		{"main.Channel(researcher)", set.Agent("main").Channel("researcher"), l.ControllerSide},
		{"researcher.Channel(main)", set.Agent("researcher").Channel("main"), l.ReaderSide},
		{"main.Channel(nobody)", set.Agent("main").Channel("nobody") == nil, true},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.what, tt.got, tt.want)
		}
	}
	if got := set.Link("researcher", "main"); got != nil {
		t.Errorf("Link(researcher, main): got %v, want nil (researcher is the reader)", got)
	}
}

func TestExampleSubscriptionsFor(t *testing.T) {
	t.Parallel()
	set := mustLoad(t, examplesDir)
	subs := set.SubscriptionsFor("researcher")
	var ids []string
	for _, s := range subs {
		ids = append(ids, s.ID)
		if s.Controller != "main" || s.Reader != "researcher" {
			t.Errorf("%s: Controller/Reader: got %q/%q, want main/researcher", s.ID, s.Controller, s.Reader)
		}
	}
	if want := []string{"research-findings", "research-alerts", "digest"}; !slices.Equal(ids, want) {
		t.Errorf("SubscriptionsFor(researcher): got %q, want %q", ids, want)
	}
	if got := set.SubscriptionsFor("main"); len(got) != 0 {
		t.Errorf("SubscriptionsFor(main): got %d subscriptions, want 0", len(got))
	}
}

func TestExampleDefinitions(t *testing.T) {
	t.Parallel()
	set := mustLoad(t, examplesDir)
	main, researcher := set.Agent("main"), set.Agent("researcher")
	findings := set.Subscription("main", "researcher", "research-findings")
	tests := []struct {
		what      string
		got, want any
	}{
		{"main.File", main.File, filepath.Join(examplesDir, "main.md")},
		{"main.Runtime", strings.Join(main.Runtime, "|"), "../../bin/demo-agent|--role|controller"},
		{"main.Tools", strings.Join(main.Tools, "|"), "Read|Write|BCPQuery"},
		{"main.HasTool(BCPQuery)", main.HasTool(agents.ToolQuery), true},
		{"main.HasTool(bcpquery)", main.HasTool("bcpquery"), false},
		{"main.IdleTimeout", main.IdleTimeout, 10 * time.Minute},
		{"main.Workdir (default: the gateway's choice)", main.Workdir, ""},
		{"main.Sandbox.None", main.Sandbox.None, false},
		{"main.Sandbox.Network.Mode", main.Sandbox.Network.Mode, agents.NetworkNone},
		{"main.Autostart", main.Autostart, false},
		{"main.prompt", strings.HasPrefix(main.SystemPrompt, "You are the main orchestrator."), true},
		{"main.prompt has no frontmatter", strings.Contains(main.SystemPrompt, "bcp_channels"), false},
		{"main.description", main.Description, "Orchestrator; clean, it never reads untrusted content itself."},
		{"researcher.IdleTimeout (default)", researcher.IdleTimeout, agents.DefaultIdleTimeout},
		{"researcher.HasTool(BCPPublish)", researcher.HasTool(agents.ToolPublish), true},
		{"researcher.cron", len(researcher.CronSchedules), 1},
		{"researcher.cron[0]", researcher.CronSchedules[0], agents.CronSchedule{
			Schedule: "0 */2 * * *",
			Message:  "Check for new research findings and publish anything relevant.",
			Label:    "poll",
		}},
		{"research-findings policy", findings.Spec.Policy(), bcp.OnAnomalyReview},
		{"research-findings questions", len(findings.Spec.Questions), 3},
		{"relevance format", findings.Spec.Questions[2].Format, bcp.IntegerFmt},
		{"relevance min", *findings.Spec.Questions[2].Min, int64(1)},
		{"relevance max", *findings.Spec.Questions[2].Max, int64(5)},
		{"topic max_words", findings.Spec.Questions[0].MaxWords, 10},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.what, tt.got, tt.want)
		}
	}
}

func TestEffectiveMaxCategory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ctrl, reader int
		want         bcp.Category
	}{
		{3, 3, bcp.Cat3},
		{3, 2, bcp.Cat2},
		{2, 3, bcp.Cat2},
		{3, 1, bcp.Cat1},
		{1, 1, bcp.Cat1},
	}
	for _, tt := range tests {
		set := mustLoad(t, writeSet(t, pairSet(tt.ctrl, tt.reader, "")))
		l := set.Link("main", "researcher")
		if l == nil {
			t.Fatalf("controller %d, reader %d: no link", tt.ctrl, tt.reader)
		}
		if got := l.MaxCategory(); got != tt.want {
			t.Errorf("controller %d, reader %d: MaxCategory: got %d, want %d", tt.ctrl, tt.reader, got, tt.want)
		}
	}
}

func TestSubscriptionCategoryAgainstEffectiveMax(t *testing.T) {
	t.Parallel()
	cat2 := "      - id: findings\n        category: 2\n        max_words: 5\n        questions:\n" +
		"          - {id: topic, question: \"What is the topic?\"}\n"
	tests := []struct {
		ctrl, reader int
		want         []string // error lines; nil means the set loads
	}{
		{3, 3, nil},
		{2, 2, nil},
		{2, 3, nil},
		{3, 2, nil},
		{1, 3, []string{"main.md:13: bcp_channels[0].subscriptions[0].category: 2 exceeds channel max_category 1"}},
		{3, 1, []string{"main.md:13: bcp_channels[0].subscriptions[0].category: 2 exceeds the channel's effective max_category 1 (researcher allows at most 1 in researcher.md)"}},
		// Reported once, against the controller's own limit.
		{1, 1, []string{"main.md:13: bcp_channels[0].subscriptions[0].category: 2 exceeds channel max_category 1"}},
	}
	for _, tt := range tests {
		dir := writeSet(t, pairSet(tt.ctrl, tt.reader, cat2))
		set, err := agents.LoadDir(dir)
		var got []string
		if err != nil {
			var le *agents.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("LoadDir: %v", err)
			}
			got = errorLines(le, dir)
		} else if set.Link("main", "researcher") == nil {
			t.Errorf("controller %d, reader %d: loaded without a link", tt.ctrl, tt.reader)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("controller %d, reader %d:\ngot  %q\nwant %q", tt.ctrl, tt.reader, got, tt.want)
		}
	}
}

func TestQuestionDefaults(t *testing.T) {
	t.Parallel()
	subs := `      - id: findings
        category: 2
        max_words: 20
        questions:
          - {id: topic, question: "What is the topic?"}
          - {id: when, question: "When?", max_words: 5, expected_format: date}
          - {id: score, question: "Score?", expected_format: integer, min: 1, max: 5}
          - {id: who, question: "Who?", max_words: 3}
`
	set := mustLoad(t, writeSet(t, pairSet(3, 3, subs)))
	sub := set.Subscription("main", "researcher", "findings")
	if sub == nil {
		t.Fatal("subscription findings not found")
	}
	tests := []struct {
		id       string
		maxWords int
		format   bcp.Format
	}{
		{"topic", 20, bcp.ShortText},
		{"when", 5, bcp.Date},
		{"score", 20, bcp.IntegerFmt},
		{"who", 3, bcp.ShortText},
	}
	if len(sub.Spec.Questions) != len(tests) {
		t.Fatalf("questions: got %d, want %d", len(sub.Spec.Questions), len(tests))
	}
	for i, tt := range tests {
		q := sub.Spec.Questions[i]
		if q.ID != tt.id || q.MaxWords != tt.maxWords || q.Format != tt.format {
			t.Errorf("questions[%d]: got {%s %d %s}, want {%s %d %s}", i, q.ID, q.MaxWords, q.Format, tt.id, tt.maxWords, tt.format)
		}
	}
	if got, want := sub.Spec.MaxWords, 20; got != want {
		t.Errorf("subscription max_words: got %d, want %d", got, want)
	}
	// 11 x (20 + 5 + 20 + 3) words.
	if got, want := bcp.FormatBits(sub.Bits), "528.0 bits"; got != want {
		t.Errorf("Bits: got %s, want %s", got, want)
	}
}

func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml string
		want time.Duration
	}{
		{"", 10 * time.Minute},
		{"idle_timeout: \"0\"\n", 0},
		{"idle_timeout: 0\n", 0},
		{"idle_timeout: 0s\n", 0},
		{"idle_timeout: 90s\n", 90 * time.Second},
		{"idle_timeout: 1h30m\n", 90 * time.Minute},
		{"idle_timeout: 10m\n", 10 * time.Minute},
	}
	for _, tt := range tests {
		set := mustLoad(t, writeSet(t, map[string]string{"solo.md": solo(tt.yaml)}))
		if got := set.Agent("solo").IdleTimeout; got != tt.want {
			t.Errorf("%q: IdleTimeout: got %v, want %v", tt.yaml, got, tt.want)
		}
	}
}

// turn_timeout is a Go duration of at least a second; without it the
// definition leaves the gateway's default in force (0).
func TestTurnTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml string
		want time.Duration
	}{
		{"", 0},
		{"turn_timeout: 15m\n", 15 * time.Minute},
		{"turn_timeout: 1s\n", time.Second},
		{"turn_timeout: \"2h30m\"\n", 150 * time.Minute},
	}
	for _, tt := range tests {
		set := mustLoad(t, writeSet(t, map[string]string{"solo.md": solo(tt.yaml)}))
		if got := set.Agent("solo").TurnTimeout; got != tt.want {
			t.Errorf("%q: TurnTimeout: got %v, want %v", tt.yaml, got, tt.want)
		}
	}
	bad := []struct{ yaml, want string }{
		{"turn_timeout: 15\n", `solo.md:4: turn_timeout: "15" is not a duration (examples: 90s, 15m, 2h)`},
		{"turn_timeout: forever\n", `solo.md:4: turn_timeout: "forever" is not a duration`},
		{"turn_timeout: 0\n", `solo.md:4: turn_timeout: must be at least 1s, got "0"`},
		{"turn_timeout: 500ms\n", `solo.md:4: turn_timeout: must be at least 1s, got "500ms"`},
		{"turn_timeout: -5m\n", `solo.md:4: turn_timeout: must be at least 1s, got "-5m"`},
		{"turn_timeout: [15m]\n", `solo.md:4: turn_timeout: must be a string, got a list`},
	}
	for _, tt := range bad {
		le := loadErrors(t, writeSet(t, map[string]string{"solo.md": solo(tt.yaml)}))
		if len(le.Errors) != 1 || !strings.Contains(le.Errors[0].Error(), tt.want) {
			t.Errorf("%q: errors %v, want one containing %q", tt.yaml, le.Errors, tt.want)
		}
	}
}

func TestRuntimeAndTools(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml           string
		runtime, tools []string
	}{
		{
			yaml:    "name: solo\nruntime: bin/demo-agent --role  reader\n",
			runtime: []string{"bin/demo-agent", "--role", "reader"},
		},
		{
			yaml:    "name: solo\nruntime: \"  bin/demo-agent\t--verbose  \"\n",
			runtime: []string{"bin/demo-agent", "--verbose"},
		},
		{
			yaml:    "name: solo\nruntime: [bin/demo-agent, \"two words\"]\n",
			runtime: []string{"bin/demo-agent", "two words"},
		},
		{
			yaml:    "name: solo\nruntime: [bin/demo-agent]\ntools: Read, Write,BCPQuery, \n",
			runtime: []string{"bin/demo-agent"},
			tools:   []string{"Read", "Write", "BCPQuery"},
		},
		{
			yaml:    "name: solo\nruntime: [bin/demo-agent]\ntools: BCPRespond\n",
			runtime: []string{"bin/demo-agent"},
			tools:   []string{"BCPRespond"},
		},
		{
			yaml:    "name: solo\nruntime: [bin/demo-agent]\ntools: [Read, \"Web Fetch\"]\n",
			runtime: []string{"bin/demo-agent"},
			tools:   []string{"Read", "Web Fetch"},
		},
		{
			yaml:    "name: solo\nruntime: [bin/demo-agent]\ntools: \"\"\n",
			runtime: []string{"bin/demo-agent"},
		},
	}
	for _, tt := range tests {
		dir := writeSet(t, map[string]string{"solo.md": "---\n" + tt.yaml + "---\n"})
		d := mustLoad(t, dir).Agent("solo")
		if !slices.Equal(d.Runtime, tt.runtime) {
			t.Errorf("%q: Runtime: got %q, want %q", tt.yaml, d.Runtime, tt.runtime)
		}
		if !slices.Equal(d.Tools, tt.tools) {
			t.Errorf("%q: Tools: got %q, want %q", tt.yaml, d.Tools, tt.tools)
		}
	}
}

// TestWorkdir: without workdir the definition leaves the choice to the
// gateway (a directory of its own under the state directory); a relative
// workdir resolves against the definition file's directory, and never
// into the agents directory.
func TestWorkdir(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml string
		want func(dir string) string
	}{
		{"", func(string) string { return "" }},
		{"workdir: ../up\n", func(dir string) string { return filepath.Join(filepath.Dir(dir), "up") }},
		{"workdir: ../up/sub/../other/\n", func(dir string) string { return filepath.Join(filepath.Dir(dir), "up", "other") }},
		{"workdir: /opt/agent/\n", func(string) string { return "/opt/agent" }},
		{"workdir: //opt//agent\n", func(string) string { return "/opt/agent" }},
	}
	for _, tt := range tests {
		dir := writeSet(t, map[string]string{"solo.md": solo(tt.yaml)})
		if got, want := mustLoad(t, dir).Agent("solo").Workdir, tt.want(dir); got != want {
			t.Errorf("%q: Workdir: got %q, want %q", tt.yaml, got, want)
		}
	}
}

func TestWorkdirRefused(t *testing.T) {
	t.Parallel()
	const why = ": a runtime must not be able to change definitions; choose a directory outside it, or leave workdir out for one of its own under the state directory"
	tests := []struct {
		yaml string
		want string // the error, DIR for the agents directory
	}{
		{"workdir: .\n", "solo.md:4: workdir: DIR is the agents directory DIR" + why},
		{"workdir: sub\n", "solo.md:4: workdir: DIR/sub is inside the agents directory DIR" + why},
		{"workdir: sub/../other/\n", "solo.md:4: workdir: DIR/other is inside the agents directory DIR" + why},
		{"workdir: ..\n", "solo.md:4: workdir: PARENT contains the agents directory DIR" + why},
		{"workdir: \"\"\n", "solo.md:4: workdir: must not be empty"},
		{"workdir: /\n", `solo.md:4: workdir: "/" is the root directory: name the directories the runtime needs`},
		{"workdir: /..\n", `solo.md:4: workdir: "/.." is the root directory: name the directories the runtime needs`},
		{"workdir: \"/srv/a\\0b\"\n", "solo.md:4: workdir: must not contain a NUL character"},
	}
	for _, tt := range tests {
		dir := writeSet(t, map[string]string{"solo.md": solo(tt.yaml)})
		got := errorLines(loadErrors(t, dir), dir)
		want := strings.ReplaceAll(strings.ReplaceAll(tt.want, "PARENT", filepath.Dir(dir)), "DIR", dir)
		want = strings.ReplaceAll(want, dir+string(filepath.Separator), "") // as errorLines does
		if !slices.Equal(got, []string{want}) {
			t.Errorf("%q:\ngot  %q\nwant %q", tt.yaml, got, []string{want})
		}
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"env: {}\n", map[string]string{}},
		{
			"env:\n  LOG_LEVEL: debug\n  TOKEN: ${SECRET}\n  PORT: 8080\n  EMPTY: \"\"\n  PATHS: \"a b  c\"\n  _x1: \"true\"\n",
			map[string]string{"LOG_LEVEL": "debug", "TOKEN": "${SECRET}", "PORT": "8080", "EMPTY": "", "PATHS": "a b  c", "_x1": "true"},
		},
	}
	for _, tt := range tests {
		d := mustLoad(t, writeSet(t, map[string]string{"solo.md": solo(tt.yaml)})).Agent("solo")
		if len(d.Env) != len(tt.want) {
			t.Errorf("%q: Env: got %q, want %q", tt.yaml, d.Env, tt.want)
			continue
		}
		for k, v := range tt.want {
			if got, ok := d.Env[k]; !ok || got != v {
				t.Errorf("%q: Env[%s]: got %q (present %v), want %q", tt.yaml, k, got, ok, v)
			}
		}
	}
}

func TestOtherFields(t *testing.T) {
	t.Parallel()
	d := mustLoad(t, writeSet(t, map[string]string{"solo.md": solo(
		"description: A test agent.\nmodel: some-model-id\nmax_turns: 200\nautostart: true\n" +
			"cron_schedules:\n  - {schedule: \"@hourly\", message: Poll.}\n  - {schedule: \"*/5 * * * *\", message: Again., label: fast}\n",
	)})).Agent("solo")
	tests := []struct {
		what      string
		got, want any
	}{
		{"Description", d.Description, "A test agent."},
		{"Model", d.Model, "some-model-id"},
		{"MaxTurns", d.MaxTurns, 200},
		{"Autostart", d.Autostart, true},
		{"SystemPrompt", d.SystemPrompt, "You are solo."},
		{"cron", len(d.CronSchedules), 2},
		{"cron[0]", d.CronSchedules[0], agents.CronSchedule{Schedule: "@hourly", Message: "Poll."}},
		{"cron[1]", d.CronSchedules[1], agents.CronSchedule{Schedule: "*/5 * * * *", Message: "Again.", Label: "fast"}},
		{"Channels", len(d.Channels), 0},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.what, tt.got, tt.want)
		}
	}
}

// TestFileEncodings checks that line endings, a byte-order mark and a
// missing final newline do not change what is loaded, nor the lines that
// errors name.
func TestFileEncodings(t *testing.T) {
	t.Parallel()
	const valid = "---\nname: solo\nruntime: [bin/demo-agent, --flag]\n\nidle_timeout: 5m\n---\nYou are solo.\n"
	const broken = "---\nname: solo\nruntime: [bin/demo-agent]\n\nidle_timeout: soon\n---\nYou are solo.\n"
	tests := []struct {
		name   string
		encode func(string) string
	}{
		{"LF", func(s string) string { return s }},
		{"CRLF", func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }},
		{"BOM", func(s string) string { return "\uFEFF" + s }},
		{"BOM+CRLF", func(s string) string { return "\uFEFF" + strings.ReplaceAll(s, "\n", "\r\n") }},
		{"no body", func(s string) string { return s[:strings.LastIndex(s, "---")+3] }},
	}
	for _, tt := range tests {
		dir := writeSet(t, map[string]string{"solo.md": tt.encode(valid)})
		set, err := agents.LoadDir(dir)
		if err != nil {
			t.Errorf("%s: LoadDir: %v", tt.name, err)
			continue
		}
		d := set.Agent("solo")
		if got, want := strings.Join(d.Runtime, "|"), "bin/demo-agent|--flag"; got != want {
			t.Errorf("%s: Runtime: got %q, want %q", tt.name, got, want)
		}
		if got, want := d.IdleTimeout, 5*time.Minute; got != want {
			t.Errorf("%s: IdleTimeout: got %v, want %v", tt.name, got, want)
		}
		wantPrompt := "You are solo."
		if tt.name == "no body" {
			wantPrompt = ""
		}
		if got := d.SystemPrompt; got != wantPrompt {
			t.Errorf("%s: SystemPrompt: got %q, want %q", tt.name, got, wantPrompt)
		}

		dir = writeSet(t, map[string]string{"solo.md": tt.encode(broken)})
		got := errorLines(loadErrors(t, dir), dir)
		want := []string{`solo.md:5: idle_timeout: "soon" is not a duration (examples: 90s, 10m, 1h; 0 means never)`}
		if !slices.Equal(got, want) {
			t.Errorf("%s: errors:\ngot  %q\nwant %q", tt.name, got, want)
		}
	}
}

func TestFileSize(t *testing.T) {
	t.Parallel()
	head := "---\nname: big\nruntime: [bin/demo-agent]\n---\n"
	pad := func(n int) string { return head + strings.Repeat("x", n-len(head)) }
	tests := []struct {
		name string
		size int
		want string // the error's text without the directory; "" = loads
	}{
		{"at the limit", agents.MaxFileBytes, ""},
		{"one byte over", agents.MaxFileBytes + 1, "big.md: file is larger than 1048576 bytes; a definition may be at most that"},
		{"10 MB", 10 << 20, "big.md: file is larger than 1048576 bytes; a definition may be at most that"},
	}
	for _, tt := range tests {
		dir := writeSet(t, map[string]string{"big.md": pad(tt.size)})
		set, err := agents.LoadDir(dir)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: LoadDir: %v", tt.name, err)
			} else if got := len(set.Agent("big").SystemPrompt); got != tt.size-len(head) {
				t.Errorf("%s: SystemPrompt: got %d bytes, want %d", tt.name, got, tt.size-len(head))
			}
			continue
		}
		le := loadErrors(t, dir)
		if got := errorLines(le, dir); !slices.Equal(got, []string{tt.want}) {
			t.Errorf("%s: errors:\ngot  %q\nwant %q", tt.name, got, []string{tt.want})
		}
		if e := le.Errors[0]; e.File != filepath.Join(dir, "big.md") || e.Line != 0 {
			t.Errorf("%s: error File/Line: got %s/%d, want %s/0", tt.name, e.File, e.Line, filepath.Join(dir, "big.md"))
		}
	}

	// Parse, given the bytes directly, refuses them too.
	data := []byte(pad(10 << 20))
	def, err := agents.Parse("big.md", data)
	var le *agents.LoadError
	if def != nil || !errors.As(err, &le) {
		t.Fatalf("Parse(10 MB): got %v, %v; want nil and a *agents.LoadError", def, err)
	}
	if got, want := err.Error(), "big.md: file is 10485760 bytes; a definition may be at most 1048576"; got != want {
		t.Errorf("Parse(10 MB): got %q, want %q", got, want)
	}
}

func TestErrorText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  agents.ParseError
		want string
	}{
		{agents.ParseError{File: "agents/main.md", Line: 14, Path: "bcp_channels[0].subscriptions[1].category", Msg: "3 exceeds channel max_category 2"},
			"agents/main.md:14: bcp_channels[0].subscriptions[1].category: 3 exceeds channel max_category 2"},
		{agents.ParseError{File: "agents/main.md", Line: 1, Msg: "frontmatter is empty"}, "agents/main.md:1: frontmatter is empty"},
		{agents.ParseError{File: "agents/main.md", Msg: "file is empty"}, "agents/main.md: file is empty"},
		{agents.ParseError{File: "agents/main.md", Path: "name", Msg: "required"}, "agents/main.md: name: required"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error(): got %q, want %q", got, tt.want)
		}
		w := agents.Warning(tt.err)
		if got := w.String(); got != tt.want {
			t.Errorf("Warning.String(): got %q, want %q", got, tt.want)
		}
	}
}

// TestLoadErrorText loads a broken set from disk and checks the full text
// of its errors, and that they unwrap to *agents.ParseError.
func TestLoadErrorText(t *testing.T) {
	t.Parallel()
	subs := "      - id: alerts\n        category: 1\n        fields:\n          - {name: urgent, type: boolean}\n" +
		"      - id: digest\n        category: 3\n        directive: Summarize.\n        max_words: 50\n"
	files := pairSet(2, 3, subs)
	files["zz.md"] = "---\nruntime: [bin/demo-agent]\nbudget: 5\n---\n"
	dir := writeSet(t, files)
	le := loadErrors(t, dir)

	main, zz := filepath.Join(dir, "main.md"), filepath.Join(dir, "zz.md")
	want := []string{
		main + ":17: bcp_channels[0].subscriptions[1].category: 3 exceeds channel max_category 2",
		zz + ":1: name: required",
		zz + ":3: budget: unknown field (known: autostart, bcp_channels, cron_schedules, description, env, flood_limit, idle_timeout, max_turns, model, name, runtime, runtime_dialect, sandbox, tools, turn_timeout, workdir)",
	}
	var got []string
	form := regexp.MustCompile(`^(.+\.md):(\d+): ([a-z_]+(\[\d+\])?)(\.[a-z_]+(\[\d+\])?)*: .+$`)
	for _, e := range le.Errors {
		got = append(got, e.Error())
		if !form.MatchString(e.Error()) {
			t.Errorf("%q does not have the form path/file.md:LINE: field.path: message", e.Error())
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors:\ngot  %q\nwant %q", got, want)
	}
	if got, want := le.Error(), strings.Join(want, "\n"); got != want {
		t.Errorf("LoadError.Error():\ngot  %q\nwant %q", got, want)
	}
	var pe *agents.ParseError
	if !errors.As(error(le), &pe) || pe != le.Errors[0] {
		t.Errorf("errors.As(LoadError, *ParseError): got %v, want the first error", pe)
	}
	if got := len(le.Unwrap()); got != len(want) {
		t.Errorf("Unwrap: got %d errors, want %d", got, len(want))
	}
	if pe := le.Errors[0]; pe.File != main || pe.Line != 17 || pe.Path != "bcp_channels[0].subscriptions[1].category" {
		t.Errorf("first error fields: got %s/%d/%s", pe.File, pe.Line, pe.Path)
	}
}

func TestParseOneFile(t *testing.T) {
	t.Parallel()
	// Parse checks one file: a peer that does not exist is LoadDir's business.
	src := "---\nname: main\nruntime: [bin/demo-agent]\ntools: [BCPQuery]\nbcp_channels:\n" +
		"  - {peer: ghost, role: controller, max_category: 1, budget_bits: 10}\n---\nBody.\n"
	d, err := agents.Parse("dir/main.md", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct {
		what      string
		got, want any
	}{
		{"Name", d.Name, "main"},
		{"File", d.File, "dir/main.md"},
		{"Workdir", d.Workdir, ""},
		{"Channels", len(d.Channels), 1},
		{"Channel(ghost).Role", d.Channel("ghost").Role, agents.RoleController},
		{"Channel(ghost).BudgetBits", d.Channel("ghost").BudgetBits, int64(10)},
		{"SystemPrompt", d.SystemPrompt, "Body."},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.what, tt.got, tt.want)
		}
	}

	d, err = agents.Parse("dir/bad.md", []byte("---\nname: Bad\n---\n"))
	var le *agents.LoadError
	if d != nil || !errors.As(err, &le) {
		t.Fatalf("Parse(bad): got %v, %v; want nil and a *agents.LoadError", d, err)
	}
	// Sorted by line, as LoadDir sorts them.
	want := "dir/bad.md:1: runtime: required: the command that runs this agent, e.g. [bin/demo-agent, --role, reader]\n" +
		"dir/bad.md:2: name: \"Bad\" is not a valid agent name (lower-case letters, digits, _ and -, starting with a letter or digit)"
	if got := err.Error(); got != want {
		t.Errorf("Parse reports a file's errors in the order found, not sorted by line as LoadDir does:\ngot  %q\nwant %q", got, want)
	}
}

func TestRoleOpposite(t *testing.T) {
	t.Parallel()
	tests := []struct{ role, want agents.Role }{
		{agents.RoleController, agents.RoleReader},
		{agents.RoleReader, agents.RoleController},
	}
	for _, tt := range tests {
		if got := tt.role.Opposite(); got != tt.want {
			t.Errorf("%s.Opposite(): got %s, want %s", tt.role, got, tt.want)
		}
	}
}

func TestLoadDirSpecialDirectories(t *testing.T) {
	t.Parallel()
	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "nope")
		set, err := agents.LoadDir(dir)
		var le *agents.LoadError
		if set != nil || err == nil || errors.As(err, &le) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("LoadDir(missing): got %v, %v (%T); want a plain not-exist error", set, err, err)
		}
	})
	tests := []struct {
		name  string
		files map[string]string
		want  []string // errors, then "note: " lines, without the directory
	}{
		{"empty", map[string]string{}, []string{"DIR: no agent definitions (.md files) found"}},
		{"only other files", map[string]string{"README.txt": "x", "sub/a.md": solo(""), ".hidden.md": solo("")},
			[]string{"DIR: no agent definitions (.md files) found", "note: README.txt: skipped: not a .md file",
				"note: sub: skipped: a directory (definitions are not searched recursively)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := writeSet(t, tt.files)
			le := loadErrors(t, dir)
			got := errorLines(le, dir)
			for _, n := range le.Notes {
				got = append(got, "note: "+strings.ReplaceAll(n, dir+string(filepath.Separator), ""))
			}
			for i := range got {
				got[i] = strings.ReplaceAll(got[i], dir, "DIR")
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	t.Run("upper-case extension", func(t *testing.T) {
		t.Parallel()
		set := mustLoad(t, writeSet(t, map[string]string{"SOLO.MD": solo("")}))
		if set.Agent("solo") == nil || len(set.Notes) != 0 {
			t.Errorf("SOLO.MD: got agents %v, notes %q; want solo loaded, no notes", set.Agents, set.Notes)
		}
	})
}

// TestSystemPromptKeepsBody checks that the body is kept verbatim (apart
// from surrounding white space), including Markdown that looks like
// frontmatter.
func TestSystemPromptKeepsBody(t *testing.T) {
	t.Parallel()
	body := "# Heading\n\n- a list\n\n---\n\nname: not-a-field\n\n    indented code\n"
	d := mustLoad(t, writeSet(t, map[string]string{"solo.md": "---\nname: solo\nruntime: [a]\n---\n\n" + body + "\n\n"})).Agent("solo")
	if got, want := d.SystemPrompt, strings.TrimSpace(body); got != want {
		t.Errorf("SystemPrompt:\ngot  %q\nwant %q", got, want)
	}
}

// TestFrontmatterEndsOnlyAtDashLine documents that the frontmatter ends at a
// "---" line, not at any line made of dashes: a Markdown underline inside a
// YAML block scalar is part of the value.
func TestFrontmatterEndsOnlyAtDashLine(t *testing.T) {
	t.Parallel()
	src := "---\nname: solo\nruntime: [bin/demo-agent]\ndescription: |\n  Notes\n  -----\n  Runs forever.\nidle_timeout: 0\nenv: {LOG_LEVEL: debug}\n---\nPrompt.\n"
	dir := writeSet(t, map[string]string{"solo.md": src})
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	d := set.Agent("solo")
	got := []any{d.Description, d.IdleTimeout, d.Env["LOG_LEVEL"], d.SystemPrompt}
	want := []any{"Notes\n-----\nRuns forever.\n", time.Duration(0), "debug", "Prompt."}
	if !slices.Equal(got, want) {
		t.Errorf("an indented line of dashes inside a YAML block scalar closes the frontmatter; "+
			"the keys after it are silently dropped into the system prompt:\ngot  %q\nwant %q", got, want)
	}
}

// TestUnreadablePeerNotReportedMissing: a peer whose file cannot be used
// (here: too large) is not also reported as a missing agent, as for a peer
// whose file fails to parse.
func TestUnreadablePeerNotReportedMissing(t *testing.T) {
	t.Parallel()
	files := pairSet(1, 1, "")
	files["researcher.md"] += strings.Repeat("x", agents.MaxFileBytes)
	dir := writeSet(t, files)
	got := errorLines(loadErrors(t, dir), dir)
	want := []string{"researcher.md: file is larger than 1048576 bytes; a definition may be at most that"}
	if !slices.Equal(got, want) {
		t.Errorf("a definition file that cannot be read is not recorded as unnamed, so its peers "+
			"also report it missing:\ngot  %q\nwant %q", got, want)
	}
}

// TestMergeKeyReportedAsAlias: a YAML merge key (<<: *anchor) is refused as
// an alias, not reported as an unknown field named "<<".
func TestMergeKeyReportedAsAlias(t *testing.T) {
	t.Parallel()
	dir := writeSet(t, map[string]string{"solo.md": solo(
		"cron_schedules:\n  - &poll {schedule: \"@hourly\", message: Poll.}\n  - <<: *poll\n    label: again\n")})
	got := errorLines(loadErrors(t, dir), dir)
	found := false
	for _, line := range got {
		if strings.HasPrefix(line, "solo.md:6: cron_schedules[1].<<: ") && strings.Contains(line, "anchors and aliases") {
			found = true
		}
	}
	if !found {
		t.Errorf("a merge key is reported as an unknown field, not as an alias; "+
			"the anchor on cron_schedules[0] is accepted silently:\ngot %q", got)
	}
}

// TestLoadedChannelsAreLinked checks an invariant that callers rely on:
// in a set that loads, every channel of every agent is one side of a Link.
func TestLoadedChannelsAreLinked(t *testing.T) {
	t.Parallel()
	dirs := []string{examplesDir}
	cases, err := os.ReadDir(filepath.Join("testdata", "valid"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		dirs = append(dirs, filepath.Join("testdata", "valid", c.Name()))
	}
	for _, dir := range dirs {
		set := mustLoad(t, dir)
		channels := 0
		for _, d := range set.Agents {
			for _, c := range d.Channels {
				channels++
				controller, reader, side := d.Name, c.Peer, func(l *agents.Link) *agents.Channel { return l.ControllerSide }
				if c.Role == agents.RoleReader {
					controller, reader, side = c.Peer, d.Name, func(l *agents.Link) *agents.Channel { return l.ReaderSide }
				}
				l := set.Link(controller, reader)
				if l == nil || side(l) != c {
					t.Errorf("%s: %s's %s is not part of a link", dir, d.Name, c)
				}
			}
		}
		if got, want := 2*len(set.Links), channels; got != want {
			t.Errorf("%s: %d links for %d channels, want 2 channels per link", dir, len(set.Links), channels)
		}
	}
}

// TestEmptyPeerRefused: peer: "" is an error like a missing peer. (A set
// with such a channel loads, and the channel has no Link, which breaks
// TestLoadedChannelsAreLinked's invariant: bcpgw validate panics on it.)
func TestEmptyPeerRefused(t *testing.T) {
	t.Parallel()
	dir := writeSet(t, map[string]string{"main.md": "---\nname: main\nruntime: [bin/demo-agent]\ntools: [BCPQuery]\n" +
		"bcp_channels:\n  - peer: \"\"\n    role: controller\n    max_category: 1\n    budget_bits: 10\n---\n"})
	set, err := agents.LoadDir(dir)
	if err == nil {
		t.Fatalf("a channel with peer: \"\" loads without error and without a Link (got %d agents, %d links)",
			len(set.Agents), len(set.Links))
	}
	var le *agents.LoadError
	if !errors.As(err, &le) {
		t.Fatalf("LoadDir: got %v (%T), want a *agents.LoadError", err, err)
	}
	for _, e := range le.Errors {
		if e.Path == "bcp_channels[0].peer" && e.Line == 6 {
			return
		}
	}
	t.Errorf("no error at main.md:6 for bcp_channels[0].peer; got:\n%v", err)
}

// TestFIFONotOpened: a named pipe called *.md is refused, not opened
// (opening it would block the loader forever).
func TestFIFONotOpened(t *testing.T) {
	t.Parallel()
	dir := writeSet(t, map[string]string{"solo.md": "---\nname: solo\nruntime: [bin/agent]\n---\n"})
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.md"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := agents.LoadDir(dir); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "pipe.md: not a regular file") {
			t.Errorf("err = %v, want pipe.md refused as not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LoadDir blocked on a FIFO")
	}
}
