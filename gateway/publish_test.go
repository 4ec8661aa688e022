package gateway

import (
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
)

func loadExamples(t *testing.T) *agents.Set {
	t.Helper()
	set, err := agents.LoadDir("../examples/agents")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestJudgePublish(t *testing.T) {
	set := loadExamples(t)
	const finding = `{"relevance":4,"topic":"Quantum computing","finding":"Error correction milestone"}`
	fresh := FreshBudgets
	left := func(c, r float64) func(*agents.Link) Remaining {
		return func(*agents.Link) Remaining { return Remaining{Controller: c, Reader: r} }
	}
	tests := []struct {
		name   string
		p      Publish
		budget func(*agents.Link) Remaining
		code   bcp.Code
		detail string
		route  bcp.Route
		bits   float64
	}{
		{"cat2 delivered", Publish{"researcher", "main", "research-findings", []byte(finding)}, fresh,
			"", "Published to controller main (Cat-2, 671.0 bits)", bcp.RouteDeliver, 671},
		{"cat1 delivered", Publish{"researcher", "main", "research-alerts", []byte(`{"priority":"high","has_breaking_news":true}`)}, fresh,
			"", "Published to controller main (Cat-1, 3.0 bits)", bcp.RouteDeliver, 3},
		{"cat3 reviewed", Publish{"researcher", "main", "digest", []byte(`{"summary":"Quiet day."}`)}, fresh,
			"", "Queued for operator review before delivery to controller main (Cat-3, 1100.0 bits)", bcp.RouteReview, 1100},
		{"cat2 anomaly reviewed", Publish{"researcher", "main", "research-findings", []byte(`{"relevance":4,"topic":"x","finding":"see https://evil.example"}`)}, fresh,
			"", "Queued for operator review", bcp.RouteReview, 671},
		{"identity is the pipe: controller cannot publish", Publish{"main", "main", "research-findings", []byte(finding)}, fresh,
			bcp.ToolNotAllowed, "tool_not_allowed: Agent 'main' does not have the BCPPublish tool", bcp.RouteReject, 0},
		{"unknown reader", Publish{"ghost", "main", "research-findings", []byte(finding)}, fresh,
			bcp.ToolNotAllowed, "tool_not_allowed", bcp.RouteReject, 0},
		{"unknown subscription", Publish{"researcher", "main", "nope", []byte(finding)}, fresh,
			bcp.SubscriptionNotFound, "subscription_not_found: No active subscription 'nope' from controller 'main'", bcp.RouteReject, 0},
		{"unknown controller", Publish{"researcher", "boss", "research-findings", []byte(finding)}, fresh,
			bcp.SubscriptionNotFound, "subscription_not_found: No active subscription 'research-findings' from controller 'boss'", bcp.RouteReject, 0},
		{"invalid before budget", Publish{"researcher", "main", "research-findings", []byte(`{}`)}, left(0, 0),
			bcp.ValidationFailed, "validation_failed: topic: missing", bcp.RouteReject, 0},
		{"controller pool exhausted", Publish{"researcher", "main", "research-findings", []byte(finding)}, left(670.9, 4000),
			bcp.BudgetExhausted, "budget_exhausted: Bandwidth budget exhausted for channel to 'main': research-findings costs 671.0 bits, main's session pool has 670.9 bits left", bcp.RouteReject, 0},
		{"reader cap exhausted", Publish{"researcher", "main", "research-findings", []byte(finding)}, left(4000, 100),
			bcp.BudgetExhausted, "budget_exhausted: Bandwidth budget exhausted for channel to 'main': research-findings costs 671.0 bits, this researcher session has 100.0 bits left", bcp.RouteReject, 0},
		{"exact budget is enough", Publish{"researcher", "main", "research-findings", []byte(finding)}, left(671, 671),
			"", "Published", bcp.RouteDeliver, 671},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := JudgePublish(set, tt.p, tt.budget)
			var code bcp.Code
			if v.Err != nil {
				code = v.Err.Code
			}
			if code != tt.code {
				t.Errorf("code = %q, want %q (%s)", code, tt.code, v.Detail())
			}
			if v.Accepted() != (tt.code == "") {
				t.Errorf("Accepted() = %v with code %q", v.Accepted(), code)
			}
			if !strings.HasPrefix(v.Detail(), tt.detail) {
				t.Errorf("Detail() = %q, want prefix %q", v.Detail(), tt.detail)
			}
			if v.Result.Route != tt.route {
				t.Errorf("route = %q, want %q", v.Result.Route, tt.route)
			}
			if v.Charged() != tt.bits {
				t.Errorf("Charged() = %v, want %v", v.Charged(), tt.bits)
			}
			if !v.Accepted() && v.Result.Response != nil {
				t.Errorf("refusal carries a response %v", v.Result.Response)
			}
		})
	}
}
