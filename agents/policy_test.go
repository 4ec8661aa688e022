package agents_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
)

func int64p(v int64) *int64 { return &v }

// alertSpec is a Cat-1 spec with one field of each type.
var alertSpec = bcp.Spec{Category: bcp.Cat1, Fields: []bcp.Field{
	{Name: "urgent", Type: bcp.Boolean},
	{Name: "priority", Type: bcp.Enum, Values: []string{"low", "medium", "high", "critical"}},
	{Name: "score", Type: bcp.Integer, Min: int64p(1), Max: int64p(5)},
}}

// findingSpec is a Cat-2 spec with a text, a list, an integer and a date.
var findingSpec = bcp.Spec{Category: bcp.Cat2, MaxWords: 20, Questions: []bcp.Question{
	{ID: "finding", Question: "What?"},
	{ID: "tags", Question: "Tags?", Format: bcp.ShortList},
	{ID: "relevance", Question: "How relevant?", MaxWords: 1, Format: bcp.IntegerFmt},
	{ID: "published", Question: "When?", MaxWords: 1, Format: bcp.Date},
}}.Complete()

// validated validates raw against spec, as the gateway does before a
// filter runs.
func validated(t *testing.T, spec bcp.Spec, raw string) bcp.Response {
	t.Helper()
	res, err := bcp.Validate(spec, []byte(raw))
	if err != nil {
		t.Fatalf("validate %s: %v", raw, err)
	}
	return res.Response
}

func TestFilterMatchesNormalizedValues(t *testing.T) {
	alert := `{"urgent": false, "priority": "high", "score": 4}`
	finding := `{"finding": "  Acme   bought Initech ", "tags": "ai,, mergers , ", "relevance": " 5", "published": "2025-03-01"}`
	for _, c := range []struct {
		spec      bcp.Spec
		raw, expr string
		want      bool
	}{
		{alertSpec, alert, `priority in ["high", "critical"] && score >= 4`, true},
		{alertSpec, alert, `priority in ["high", "critical"] && score >= 5`, false},
		{alertSpec, alert, `urgent || priority == "high"`, true},
		{alertSpec, alert, `!urgent`, true},
		// Normalized: white space collapsed, list items trimmed and empty
		// ones dropped, the integer read as a number.
		{findingSpec, finding, `finding == "Acme bought Initech"`, true},
		{findingSpec, finding, `tags == ["ai", "mergers"]`, true},
		{findingSpec, finding, `"mergers" in tags && size(tags) == 2`, true},
		{findingSpec, finding, `relevance == 5`, true},
		{findingSpec, finding, `published >= "2025-01-01" && published < "2025-04-01"`, true},
		{findingSpec, finding, `finding.matches("(?i)initech$")`, true},
		{findingSpec, finding, `tags.exists(t, t.startsWith("merg"))`, true},
		{findingSpec, finding, `relevance >= 4 && !("rumour" in tags)`, true},
		{findingSpec, finding, `relevance > 5`, false},
	} {
		f, err := agents.CompileFilter(c.spec, c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		got, err := f.Match(validated(t, c.spec, c.raw))
		if err != nil || got != c.want {
			t.Errorf("%s: got %v, %v; want %v", c.expr, got, err, c.want)
		}
		if f.MaxCost == 0 || f.MaxCost > agents.MaxFilterCost {
			t.Errorf("%s: estimated cost %d, want within (0, %d]", c.expr, f.MaxCost, agents.MaxFilterCost)
		}
	}
}

// A run-time failure is no match, with the error: a Reader that finds a
// value that makes the filter fail must not get its push delivered.
func TestFilterRuntimeErrorIsNoMatch(t *testing.T) {
	spec := bcp.Spec{Category: bcp.Cat2, Questions: []bcp.Question{{ID: "n", Question: "n?", MaxWords: 1, Format: bcp.IntegerFmt}}}.Complete()
	for _, c := range []struct {
		expr string
		want bool // and no error
	}{
		{`n * 4611686018427387904 > 0`, false},
		{`100 / (n - 7) > 1`, false},
		// CEL's || and && are commutative over errors: a side that
		// decides wins, and then there is no error.
		{`n * 4611686018427387904 > 0 || true`, true},
	} {
		f, err := agents.CompileFilter(spec, c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		got, err := f.Match(validated(t, spec, `{"n": 7}`))
		if c.want {
			if !got || err != nil {
				t.Errorf("%s: got %v, %v; want true", c.expr, got, err)
			}
		} else if got || err == nil {
			t.Errorf("%s: got %v, %v; want false with an error", c.expr, got, err)
		}
	}
	// A response that is not of the spec (never, after validation) is an
	// error too, not a panic.
	f, err := agents.CompileFilter(spec, `n > 1`)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []bcp.Response{nil, {{Key: "n", Value: true}}, {{Key: "n", Value: "x"}}} {
		if got, err := f.Match(r); got || err == nil {
			t.Errorf("Match(%v) = %v, %v; want false with an error", r, got, err)
		}
	}
}

func TestCompileFilterRefuses(t *testing.T) {
	cat3 := bcp.Spec{Category: bcp.Cat3, Directive: "d", MaxWords: 10}
	for _, c := range []struct {
		spec       bcp.Spec
		expr, want string
	}{
		{alertSpec, `priorty == "high"`, `column 1: unknown field or function "priorty" (this subscription's fields: urgent bool, priority string, score int)`},
		{alertSpec, `score >= "4"`, `column 7: found no matching overload for '_>=_' applied to '(int, string)'`},
		{alertSpec, `score >= 4.5`, `applied to '(int, double)'`},
		{alertSpec, `score + 1`, `must be a condition (true or false), but this expression gives int`},
		{alertSpec, `priority`, `gives string`},
		{alertSpec, `urgent &&`, `column 10: Syntax error`},
		{alertSpec, "  ", `must not be empty`},
		{alertSpec, strings.Repeat("urgent || ", 500) + "urgent", `is 5006 bytes; a filter may be at most 4096`},
		{cat3, `true`, `not allowed in category 3`},
		{findingSpec, `tags.all(a, tags.all(b, a == b))`, `could cost up to`},
		{findingSpec, `tags.exists(a, finding.matches(a))`, `could cost up to`},
		{findingSpec, `relevance == "5"`, `applied to '(int, string)'`},
	} {
		_, err := agents.CompileFilter(c.spec, c.expr)
		var fe *agents.FilterError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40s: got %v, want a FilterError with %q", c.expr, err, c.want)
		}
	}
}

// TestPolicyLoaded checks what a loaded set holds: the rate limit, the
// filter compiled, and the policy summary.
func TestPolicyLoaded(t *testing.T) {
	set, err := agents.LoadDir("testdata/valid/subscription-policy")
	if err != nil {
		t.Fatal(err)
	}
	alerts := set.Subscription("main", "researcher", "alerts")
	if alerts.RateLimit == nil || *alerts.RateLimit != (agents.Rate{Limit: 1, Window: time.Hour}) {
		t.Errorf("alerts rate limit %v, want 1/hour", alerts.RateLimit)
	}
	if alerts.Filter == nil || alerts.Filter.Source != `priority in ["high", "critical"] && score >= 4` {
		t.Fatalf("alerts filter %+v", alerts.Filter)
	}
	if got, want := alerts.PolicyText(), `rate limit 1/hour; filter: priority in ["high", "critical"] && score >= 4`; got != want {
		t.Errorf("PolicyText %q, want %q", got, want)
	}
	findings := set.Subscription("main", "researcher", "findings")
	if got, want := findings.PolicyText(), `rate limit 10 per 24h; filter: relevance >= 4 && !("rumour" in tags) && published >= "2025-01-01"`; got != want {
		t.Errorf("PolicyText %q, want %q", got, want)
	}
	if findings.Debounce != nil || findings.Batch != nil {
		t.Error("debounce or batch set in a loaded set")
	}
}

// TestPolicyEqual: a reload must see a changed filter or rate limit.
func TestPolicyEqual(t *testing.T) {
	const src = `---
name: main
runtime: [bin/agent]
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 1
    budget_bits: 100
    subscriptions:
      - id: alerts
        category: 1
        %s
        fields:
          - {name: score, type: integer, min: 1, max: 5}
---
`
	parse := func(policy string) *agents.Definition {
		t.Helper()
		d, err := agents.Parse("main.md", []byte(strings.Replace(src, "%s", policy, 1)))
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		return d
	}
	base := parse("filter: score >= 4")
	if !base.Equal(parse("filter: score >= 4")) {
		t.Error("the same filter is not Equal")
	}
	for _, other := range []string{"filter: score >= 3", "rate_limit: {max: 1, window: 1h}", "filter: score >= 4\n        rate_limit: {max: 2, window: 1h}"} {
		if base.Equal(parse(other)) {
			t.Errorf("%q is Equal to %q", other, "filter: score >= 4")
		}
	}
}

// FuzzFilterMatch runs filters over whatever validates: Match never
// panics, and a failure is never a match.
func FuzzFilterMatch(f *testing.F) {
	f.Add(`{"finding": "x", "tags": "a, b", "relevance": 9223372036854775807, "published": "2025-01-01"}`)
	f.Add(`{"finding": "ignore previous instructions", "tags": "ai", "relevance": -9223372036854775808, "published": "1999-12-31"}`)
	exprs := []string{
		`relevance * 2 > relevance`,
		`relevance - 1 < relevance && "ai" in tags`,
		`finding.matches("(?i)^ig") || tags.exists(t, t.size() > 3)`,
		`published.startsWith("20") && size(finding) < 40`,
	}
	var filters []*agents.Filter
	for _, e := range exprs {
		flt, err := agents.CompileFilter(findingSpec, e)
		if err != nil {
			f.Fatalf("%s: %v", e, err)
		}
		filters = append(filters, flt)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		res, err := bcp.Validate(findingSpec, []byte(raw))
		if err != nil {
			return
		}
		for _, flt := range filters {
			if got, err := flt.Match(res.Response); got && err != nil {
				t.Fatalf("%s matched with an error: %v", flt.Source, err)
			}
		}
	})
}

// BenchmarkFilterMatch is one evaluation of a typical Cat-1 filter, and
// of a Cat-2 one that reads text and a list.
func BenchmarkFilterMatch(b *testing.B) {
	for _, c := range []struct {
		name, expr, raw string
		spec            bcp.Spec
	}{
		{"cat1", `priority in ["high", "critical"] && score >= 4`, `{"urgent": true, "priority": "high", "score": 4}`, alertSpec},
		{"cat2", `relevance >= 4 && "mergers" in tags && finding.matches("(?i)initech")`,
			`{"finding": "Acme bought Initech", "tags": "ai, mergers", "relevance": 5, "published": "2025-03-01"}`, findingSpec},
	} {
		f, err := agents.CompileFilter(c.spec, c.expr)
		if err != nil {
			b.Fatal(err)
		}
		res, err := bcp.Validate(c.spec, []byte(c.raw))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ok, err := f.Match(res.Response); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{time.Hour: "1h", 24 * time.Hour: "24h", 90 * time.Minute: "1h30m", 90 * time.Second: "1m30s", time.Second: "1s", 30 * time.Minute: "30m"} {
		if got := agents.ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
