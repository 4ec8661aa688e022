package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// debounceBatchSubs are main's subscriptions with debounce, batch, both,
// all four policies, and none, for pairSet.
const debounceBatchSubs = `      - id: keyed
        category: 1
        debounce: {key: topic, window: 10m}
        fields:
          - {name: topic, type: enum, values: [markets, weather, sports]}
          - {name: score, type: integer, min: 1, max: 5}
      - id: scores
        category: 1
        batch: {window: 5m, max: 20}
        fields:
          - {name: n, type: integer, min: 0, max: 3}
      - id: both
        category: 2
        max_words: 5
        debounce: {key: topic, window: 90s}
        batch: {window: 1h, max: 2}
        questions:
          - {id: topic, question: "Topic?"}
      - id: all
        category: 1
        rate_limit: {max: 5, window: 1h}
        filter: score >= 3
        debounce: {key: topic, window: 10m}
        batch: {window: 5m, max: 20}
        fields:
          - {name: topic, type: enum, values: [markets, weather, sports]}
          - {name: score, type: integer, min: 1, max: 5}
      - id: plain
        category: 1
        fields:
          - {name: ok, type: boolean}
`

// TestValidateDebounceBatch: validate's summary and --json show a
// subscription's debounce {key, window} and batch {window, max}, alone,
// together and after the rate limit and filter.
func TestValidateDebounceBatch(t *testing.T) {
	t.Parallel()
	dir := pairSet(t, 4000, 4000, "BCPPublish", debounceBatchSubs)
	r := run(t, runOpts{}, "validate", dir)
	if r.code != 0 {
		t.Fatalf("validate: want exit 0\n%s", r)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "subscription" {
			lines[f[1]] = l
		}
	}
	for id, want := range map[string]string{
		"keyed":  "\tdebounce by topic within 10m0s",
		"scores": "\tbatch of up to 20 within 5m0s",
		"both":   "\tdebounce by topic within 1m30s; batch of up to 2 within 1h0m0s",
		"all":    "\trate limit 5/hour; filter: score >= 3; debounce by topic within 10m0s; batch of up to 20 within 5m0s",
	} {
		if !strings.HasSuffix(strings.TrimRight(lines[id], " "), strings.TrimLeft(want, "\t")) {
			t.Errorf("validate: subscription %s: got %q, want it to end with %q\n%s", id, lines[id], want, r)
		}
	}
	if l := lines["plain"]; l == "" || strings.Contains(l, "debounce") || strings.Contains(l, "batch") {
		t.Errorf("validate: subscription plain: %q, want no policy", l)
	}

	r = run(t, runOpts{}, "validate", "--json", dir)
	if r.code != 0 {
		t.Fatalf("validate --json: want exit 0\n%s", r)
	}
	var rep struct {
		Agents []struct {
			Name     string `json:"name"`
			Channels []struct {
				Subscriptions []struct {
					ID       string          `json:"id"`
					Debounce json.RawMessage `json:"debounce"`
					Batch    json.RawMessage `json:"batch"`
				} `json:"subscriptions"`
			} `json:"channels"`
		} `json:"agents"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	type pol struct{ debounce, batch string }
	want := map[string]pol{
		"keyed":  {`{"key":"topic","window":"10m0s"}`, ""},
		"scores": {"", `{"window":"5m0s","max":20}`},
		"both":   {`{"key":"topic","window":"1m30s"}`, `{"window":"1h0m0s","max":2}`},
		"all":    {`{"key":"topic","window":"10m0s"}`, `{"window":"5m0s","max":20}`},
		"plain":  {"", ""},
	}
	seen := 0
	for _, a := range rep.Agents {
		if a.Name != "main" {
			continue
		}
		for _, s := range a.Channels[0].Subscriptions {
			seen++
			if got := (pol{string(s.Debounce), string(s.Batch)}); got != want[s.ID] {
				t.Errorf("validate --json: %s: debounce %s, batch %s; want %s, %s", s.ID, got.debounce, got.batch, want[s.ID].debounce, want[s.ID].batch)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("validate --json: %d subscriptions of main, want %d\n%s", seen, len(want), r.stdout)
	}
}

// TestCheckDebounceBatch: check reports what a push on a subscription
// with debounce or batch meets: policy.debounce {key, window, value} with
// the push's value of the key (normalized; absent when the push is
// refused or filtered) and policy.batch {window, max}.
func TestCheckDebounceBatch(t *testing.T) {
	t.Parallel()
	dir := pairSet(t, 4000, 4000, "BCPPublish", debounceBatchSubs)
	for _, c := range []struct {
		name, sub, resp string
		exit            int
		route           string
		policy          string
	}{
		{"debounce", "keyed", `{"score": 2, "topic": "weather"}`, 0, "deliver",
			`{"debounce":{"key":"topic","window":"10m0s","value":"\"weather\""}}`},
		{"debounce, refused: no value", "keyed", `{"topic": "rain", "score": 2}`, 1, "reject",
			`{"debounce":{"key":"topic","window":"10m0s"}}`},
		{"batch", "scores", `{"n": 3}`, 0, "deliver", `{"batch":{"window":"5m0s","max":20}}`},
		{"batch, refused", "scores", `{"n": 4}`, 1, "reject", `{"batch":{"window":"5m0s","max":20}}`},
		{"both: the value is the normalized answer", "both", `{"topic": "  Rain   now "}`, 0, "deliver",
			`{"debounce":{"key":"topic","window":"1m30s","value":"\"Rain now\""},"batch":{"window":"1h0m0s","max":2}}`},
		{"all four", "all", `{"topic": "sports", "score": 4}`, 0, "deliver",
			`{"rate_limit":"5/hour","filter":"score >= 3","filter_matched":true,"debounce":{"key":"topic","window":"10m0s","value":"\"sports\""},"batch":{"window":"5m0s","max":20}}`},
		{"all four, filtered: no value", "all", `{"topic": "sports", "score": 1}`, 0, "filtered",
			`{"rate_limit":"5/hour","filter":"score >= 3","filter_matched":false,"debounce":{"key":"topic","window":"10m0s"},"batch":{"window":"5m0s","max":20}}`},
		{"no policy", "plain", `{"ok": true}`, 0, "deliver", ``},
	} {
		r := run(t, runOpts{}, "check", "--agents", dir, "--controller", "main", "--reader", "researcher", "--subscription", c.sub, "--response", c.resp)
		if r.code != c.exit {
			t.Errorf("%s: exit %d, want %d\n%s", c.name, r.code, c.exit, r)
		}
		var o struct {
			Route  string          `json:"route"`
			Policy json.RawMessage `json:"policy"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, r)
		}
		if o.Route != c.route || string(o.Policy) != c.policy {
			t.Errorf("%s: route %s, policy %s\nwant route %s, policy %s", c.name, o.Route, o.Policy, c.route, c.policy)
		}
	}
}

// TestValidateRefusesCat3DebounceBatch: through the binary, a Cat-3
// subscription with batch or debounce is refused at its file and line
// (the loader's messages: agents/testdata/broken/debounce-batch-invalid),
// and check will not run on such definitions.
func TestValidateRefusesCat3DebounceBatch(t *testing.T) {
	t.Parallel()
	dir := pairSet(t, 4000, 4000, "BCPPublish", `      - id: digest
        category: 3
        directive: Summarize.
        max_words: 50
        batch: {window: 1m, max: 5}
      - id: note
        category: 3
        directive: Summarize.
        max_words: 50
        debounce: {key: summary, window: 1m}
`)
	r := run(t, runOpts{}, "validate", dir)
	for _, want := range []string{
		"main.md:16: bcp_channels[0].subscriptions[0].batch: not allowed in category 3",
		"main.md:21: bcp_channels[0].subscriptions[1].debounce: not allowed in category 3",
	} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("validate: want exit 1 and %q\n%s", want, r)
		}
	}
	r = run(t, runOpts{}, "check", "--agents", dir, "--controller", "main", "--reader", "researcher", "--subscription", "digest",
		"--response", `{"summary": "x"}`)
	if r.code != 2 || !strings.Contains(r.stderr, "batch: not allowed in category 3") {
		t.Errorf("check on definitions refusing a Cat-3 batch: want exit 2 and the error\n%s", r)
	}
}
