package agents_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
)

// The policy of each item: a subscription's own fields, else its
// channel's, else unset (the gateway's defaults).
func TestLinkApprovals(t *testing.T) {
	t.Parallel()
	set := mustLoad(t, filepath.Join("testdata", "valid", "approval-policy"))
	l := set.Link("main", "researcher")
	if l == nil {
		t.Fatal("no link main -> researcher")
	}
	for _, tc := range []struct {
		sub  string
		want agents.ApprovalPolicy
	}{
		{"", agents.ApprovalPolicy{Required: 2, TTL: 4 * time.Hour}},       // answers: the channel's
		{"digest", agents.ApprovalPolicy{Required: 2, TTL: 4 * time.Hour}}, // none of its own
		{"brief", agents.ApprovalPolicy{Required: 1, TTL: 4 * time.Hour}},  // its required, the channel's ttl
		{"urgent", agents.ApprovalPolicy{Required: 3, TTL: 30 * time.Minute}},
		{"gone", agents.ApprovalPolicy{Required: 2, TTL: 4 * time.Hour}}, // unknown: the channel's
	} {
		if got := l.Approvals(tc.sub); got != tc.want {
			t.Errorf("Approvals(%q) = %+v, want %+v", tc.sub, got, tc.want)
		}
	}
	// A channel without approvals leaves everything to the gateway.
	clean := equalSet(t, equalMain).Link("main", "researcher")
	if got := clean.Approvals("findings"); got != (agents.ApprovalPolicy{}) {
		t.Errorf("Approvals without a policy = %+v, want the zero policy", got)
	}
}

// A changed policy is a changed definition (reload reports it), but not
// one that needs the session restarted: that is the session layer's call.
func TestDefinitionEqualDetectsApprovalChanges(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, old, new string }{
		{"subscription approvals", "      - id: alerts\n", "      - id: alerts\n        approvals: {required: 2}\n"},
		{"channel approvals", "    max_cat3_queries: 2\n", "    max_cat3_queries: 2\n    approvals: {ttl: 2h}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base, set := reloaded(t, edited(t, equalMain, c.old, c.new))
			if base.Agent("main").Equal(set.Agent("main")) {
				t.Errorf("main is Equal after changing its %s", c.name)
			}
		})
	}
}
