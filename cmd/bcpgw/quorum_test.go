package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Approval policies through the real binary: a `bcpgw run` whose digest
// subscription needs two approvals, and `bcpgw approve`, `reject`,
// `approvals list` and `events` against it.
//
// The control socket serves only the gateway's own uid (and root, which
// the gateway runs as here), so every client of a test is the same
// operator: an approval is counted, a second one from another process of
// the same uid is refused and changes nothing, and the count survives a
// restart. The quorum completed by a second uid is tested at the gateway
// (gateway/approvals_quorum_test.go), with two operators as the socket
// records them.

// opQuorumEnv is newOpEnv with the digest subscription's approvals set to
// policy.
func opQuorumEnv(t *testing.T, policy string) *opGateway {
	t.Helper()
	g := newOpEnv(t)
	path := filepath.Join(g.agents, "main.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const digest = `max_words: 50}`
	s := strings.Replace(string(b), digest, "max_words: 50, approvals: "+policy+"}", 1)
	if s == string(b) {
		t.Fatalf("no digest subscription in\n%s", b)
	}
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestCLIApprovalQuorum(t *testing.T) {
	t.Parallel()
	g := opQuorumEnv(t, "{required: 2, ttl: 6h}")
	if r := run(t, runOpts{}, "validate", g.agents); r.code != 0 || !strings.Contains(r.stdout, "approvals of digest: 2 operators (distinct uids), ttl 6h") {
		t.Fatalf("validate: want the policy in the summary\n%s", r)
	}
	g.start(opPublishes(false, 1, "q"))
	a := g.nextPending(map[string]bool{})
	if a.Required != 2 || len(a.Approvals) != 0 || a.ExpiresAt.Sub(a.CreatedAt).String() != "6h0m0s" {
		t.Fatalf("queued item: required %d, approvals %+v, ttl %v; want 2, none, 6h", a.Required, a.Approvals, a.ExpiresAt.Sub(a.CreatedAt))
	}
	row := func() string {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(g.ok("approvals", "list").stdout), "\n")
		if len(lines) != 2 || !strings.HasSuffix(lines[0], "APPROVALS") {
			t.Fatalf("approvals list: want a header ending in APPROVALS and one row\n%s", strings.Join(lines, "\n"))
		}
		return lines[1]
	}
	if r := row(); !strings.HasPrefix(r, a.ID+" ") || !strings.HasSuffix(r, "0 of 2 approvals") {
		t.Errorf("row before any approval: %q", r)
	}

	// The first approval is counted: nothing is delivered yet.
	p := g.startCmd("approve", a.ID, "--sha256", a.SHA256, "--note", "first look")
	r := p.wait(t)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Approved "+a.ID+" (1 of 2 approvals): Cat-3 from researcher, not delivered yet") ||
		!strings.Contains(r.stdout, "1 more approval(s) from other operators") {
		t.Fatalf("first approve: %s", r)
	}
	got := g.approval(a.ID)
	if got.Status != "pending" || len(got.Approvals) != 1 || got.Approvals[0].User != opUser() || got.Approvals[0].UID != os.Getuid() ||
		got.Approvals[0].PID != p.cmd.Process.Pid || got.Approvals[0].Note != "first look" || got.DecidedBy != "" {
		t.Errorf("after one approval: %+v", got)
	}
	if r := row(); !strings.HasSuffix(r, "1 of 2 approvals") || !strings.Contains(r, " pending ") {
		t.Errorf("row after one approval: %q", r)
	}
	evs := g.events("--type", "approval_partial")
	if len(evs) != 1 || evs[0].Ref != a.ID || !strings.Contains(evs[0].Detail, "approval 1 of 2 by "+opUser()) {
		t.Errorf("approval_partial events: %+v", evs)
	}

	// The same operator again, from another process: refused, unchanged.
	r = g.bcpgw("approve", a.ID, "--sha256", a.SHA256)
	if r.code != 1 || !strings.Contains(r.stderr, "already has your approval") || !strings.Contains(r.stderr, "1 of 2 approvals") ||
		!strings.Contains(r.stderr, "another operator (another uid)") || r.stdout != "" {
		t.Errorf("second approve by the same uid: want exit 1 and already_approved\n%s", r)
	}
	if again := g.approval(a.ID); again.Status != "pending" || len(again.Approvals) != 1 {
		t.Errorf("the refused approval changed the item: %+v", again)
	}

	// The count is durable: a restarted gateway still has it.
	g.stop()
	g.start(opPublishes(false, 1, "q"))
	if after := g.approval(a.ID); after.Status != "pending" || after.Required != 2 || len(after.Approvals) != 1 || after.Approvals[0].PID != p.cmd.Process.Pid {
		t.Fatalf("after a restart: %+v", after)
	}
	if r := g.bcpgw("approve", a.ID, "--sha256", a.SHA256); r.code != 1 || !strings.Contains(r.stderr, "already has your approval") {
		t.Errorf("same operator after a restart: want a refusal\n%s", r)
	}

	// A rejection by any operator ends it, approved by one or not.
	r = g.bcpgw("reject", a.ID, "--reason", "second thoughts")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Rejected "+a.ID) {
		t.Fatalf("reject: %s", r)
	}
	if end := g.approval(a.ID); end.Status != "rejected" || end.Reason != "second thoughts" || len(end.Approvals) != 1 {
		t.Errorf("rejected item: %+v", end)
	}
	if ds := g.deliveriesOf(a); len(ds) != 0 {
		t.Errorf("a rejected item reached main: %+v", ds)
	}
	kinds := []string{}
	for _, e := range g.events("--type", "approval_*") {
		if e.Ref == a.ID {
			kinds = append(kinds, e.Kind)
		}
	}
	if strings.Join(kinds, " ") != "approval_queued approval_partial approval_rejected" {
		t.Errorf("approval events of %s: %v", a.ID, kinds)
	}
}
