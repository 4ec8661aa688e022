package main

import (
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
)

// The summary names each item's approval policy once its Controller sets
// any, after inheritance, with the defaults named.
func TestValidateSummaryShowsApprovalPolicies(t *testing.T) {
	set, err := agents.LoadDir(filepath.Join("..", "..", "agents", "testdata", "valid", "approval-policy"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	printApprovals(&b, set.Link("main", "researcher"))
	want := `    approvals of answers: 2 operators (distinct uids), ttl 4h
    approvals of digest: 2 operators (distinct uids), ttl 4h
    approvals of brief: 1 operator, ttl 4h
    approvals of urgent: 3 operators (distinct uids), ttl 30m
`
	if b.String() != want {
		t.Errorf("approvals lines:\n%s\nwant:\n%s", b.String(), want)
	}
	// A channel without policies prints nothing: the defaults are no news.
	set, err = agents.LoadDir(filepath.Join("..", "..", "agents", "testdata", "valid", "clean"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range set.Links {
		b.Reset()
		if printApprovals(&b, l); b.Len() != 0 {
			t.Errorf("%s -> %s without policies: %q", l.Controller.Name, l.Reader.Name, b.String())
		}
	}
	if got := approvalsText(agents.ApprovalPolicy{}); got != "1 operator, ttl --approval-ttl" {
		t.Errorf("default policy: %q", got)
	}
}

// validate --json carries the same policies.
func TestValidateJSONShowsApprovalPolicies(t *testing.T) {
	dir := filepath.Join("..", "..", "agents", "testdata", "valid", "approval-policy")
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := validateReport(dir, "", set, nil)
	got := map[string]string{}
	for _, a := range r.Agents {
		for _, c := range a.Channels {
			if c.Approvals != nil {
				got[a.Name+" answers"] = fmt.Sprintf("%d %s", c.Approvals.Required, c.Approvals.TTL)
			}
			for _, s := range c.Subscriptions {
				if s.Approvals != nil {
					got[a.Name+" "+s.ID] = fmt.Sprintf("%d %s", s.Approvals.Required, s.Approvals.TTL)
				}
			}
		}
	}
	want := map[string]string{"main answers": "2 4h0m0s", "main digest": "2 4h0m0s", "main brief": "1 4h0m0s", "main urgent": "3 30m0s"}
	if !maps.Equal(got, want) {
		t.Errorf("approvals in the JSON report = %v, want %v", got, want)
	}
}
