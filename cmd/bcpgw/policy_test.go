package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// policySubs are main's subscriptions with a delivery policy, for
// pairSet.
const policySubs = `      - id: alerts
        category: 1
        rate_limit: {max: 1, window: 1h}
        filter: priority in ["high", "critical"] && score >= 4
        fields:
          - {name: priority, type: enum, values: [low, medium, high, critical]}
          - {name: score, type: integer, min: 1, max: 5}
      - id: plain
        category: 1
        fields:
          - {name: ok, type: boolean}
`

// TestCheckSubscriptionPolicy: check reports what a push meets: the
// filter and its verdict (a filtered push is accepted, route filtered,
// nothing charged), the rate limit (never reached in a dry run).
func TestCheckSubscriptionPolicy(t *testing.T) {
	t.Parallel()
	dir := pairSet(t, 4000, 4000, "BCPPublish", policySubs)
	type policy struct {
		RateLimit     string `json:"rate_limit"`
		Filter        string `json:"filter"`
		FilterMatched *bool  `json:"filter_matched"`
		FilterError   string `json:"filter_error"`
	}
	type out struct {
		Accepted      bool            `json:"accepted"`
		Code          string          `json:"code"`
		Detail        string          `json:"detail"`
		BandwidthBits float64         `json:"bandwidth_bits"`
		Response      json.RawMessage `json:"response"`
		Route         string          `json:"route"`
		Filtered      bool            `json:"filtered"`
		Policy        *policy         `json:"policy"`
	}
	const expr = `priority in ["high", "critical"] && score >= 4`
	yes, no := true, false
	for _, c := range []struct {
		name, sub, resp string
		exit            int
		route, detail   string
		bits            float64
		filtered        bool
		policy          *policy
	}{
		{"filtered", "alerts", `{"priority": "low", "score": 5}`, 0, "filtered",
			"Accepted but not delivered to controller main: it does not match the delivery filter of subscription 'alerts'; nothing was charged",
			0, true, &policy{RateLimit: "1/hour", Filter: expr, FilterMatched: &no}},
		{"matched", "alerts", `{"score": 4, "priority": "critical"}`, 0, "deliver", "Published to controller main (Cat-1, 4.3 bits)",
			4.321928094887362, false, &policy{RateLimit: "1/hour", Filter: expr, FilterMatched: &yes}},
		{"invalid: the filter does not run", "alerts", `{"priority": "urgent", "score": 4}`, 1, "reject", "validation_failed: ",
			0, false, &policy{RateLimit: "1/hour", Filter: expr}},
		{"no policy", "plain", `{"ok": true}`, 0, "deliver", "Published to controller main (Cat-1, 1.0 bits)", 1, false, nil},
	} {
		r := run(t, runOpts{}, "check", "--agents", dir, "--controller", "main", "--reader", "researcher", "--subscription", c.sub, "--response", c.resp)
		if r.code != c.exit {
			t.Errorf("%s: exit %d, want %d\n%s", c.name, r.code, c.exit, r)
		}
		var o out
		if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, r)
		}
		pj, _ := json.Marshal(o.Policy)
		wj, _ := json.Marshal(c.policy)
		if o.Route != c.route || !strings.HasPrefix(o.Detail, c.detail) || o.BandwidthBits != c.bits || o.Filtered != c.filtered ||
			o.Accepted != (c.exit == 0) || string(pj) != string(wj) {
			t.Errorf("%s: got %s\nwant route %s, detail %q, bits %v, filtered %v, policy %s", c.name, r.stdout, c.route, c.detail, c.bits, c.filtered, wj)
		}
	}
}

// TestValidateSubscriptionPolicy: the summary and --json show the policy;
// a filter typo and a debounce key that is not a field are refused at
// load with file:line (debounce and batch themselves:
// debounce_batch_check_test.go).
func TestValidateSubscriptionPolicy(t *testing.T) {
	t.Parallel()
	dir := pairSet(t, 4000, 4000, "BCPPublish", policySubs)
	r := run(t, runOpts{}, "validate", dir)
	if r.code != 0 || !strings.Contains(r.stdout, `rate limit 1/hour; filter: priority in ["high", "critical"] && score >= 4`) {
		t.Errorf("validate: want the policy in the summary\n%s", r)
	}
	r = run(t, runOpts{}, "validate", "--json", dir)
	var rep struct {
		Agents []struct {
			Channels []struct {
				Subscriptions []struct {
					ID        string `json:"id"`
					RateLimit *struct {
						Max    int    `json:"max"`
						Window string `json:"window"`
						Text   string `json:"text"`
					} `json:"rate_limit"`
					Filter        string `json:"filter"`
					FilterMaxCost uint64 `json:"filter_max_cost"`
				} `json:"subscriptions"`
			} `json:"channels"`
		} `json:"agents"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	s := rep.Agents[0].Channels[0].Subscriptions[0]
	if s.ID != "alerts" || s.RateLimit == nil || s.RateLimit.Max != 1 || s.RateLimit.Window != "1h0m0s" || s.RateLimit.Text != "1/hour" ||
		!strings.HasPrefix(s.Filter, "priority in") || s.FilterMaxCost == 0 {
		t.Errorf("validate --json: subscription %+v", s)
	}
	if p := rep.Agents[0].Channels[0].Subscriptions[1]; p.RateLimit != nil || p.Filter != "" {
		t.Errorf("validate --json: a subscription without a policy shows %+v", p)
	}

	broken := pairSet(t, 4000, 4000, "BCPPublish", `      - id: alerts
        category: 1
        filter: priorty == "high"
        debounce: {key: score, window: 10m}
        fields:
          - {name: priority, type: enum, values: [low, high]}
`)
	r = run(t, runOpts{}, "validate", broken)
	for _, want := range []string{
		`main.md:14: bcp_channels[0].subscriptions[0].filter: column 1: unknown field or function "priorty" (this subscription's fields: priority string)`,
		`main.md:15: bcp_channels[0].subscriptions[0].debounce.key: "score" is not a field or question of this subscription`,
	} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("validate of a filter typo: want exit 1 and %q\n%s", want, r)
		}
	}
}
