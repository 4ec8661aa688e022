package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Approval policies through the real binary: a `bcpgw run` whose digest
// subscription needs two approvals, and `bcpgw approve`, `reject`,
// `approvals list` and `events` against it.
//
// Without --operator-group the control socket serves only the gateway's
// own uid (and root, which the gateway runs as here), so every client is
// the same operator: an approval is counted, a second one from another
// process of the same uid is refused and changes nothing, and the count
// survives a restart (TestCLIApprovalQuorum). With it, a member of the
// group is a second operator (TestCLIApprovalQuorumOfTwoOperators).

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

// The quorum completed by a second operator through the real binary: a
// gateway run (as root) with --operator-group serves a member of that
// group, another uid, whose approval is the second one the digest needs.
// A user outside the group cannot reach the socket.
func TestCLIApprovalQuorumOfTwoOperators(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the second operator is another uid (SysProcAttr.Credential), and --operator-group needs a root gateway")
	}
	t.Parallel()
	const group, second = 4242, 4001
	g := opQuorumEnv(t, "{required: 2}")
	g.runArgs = []string{"--operator-group", strconv.Itoa(group)}
	g.start(opPublishes(false, 1, "q"))
	a := g.nextPending(map[string]bool{})

	// The second operator runs a copy of bcpgw it can execute.
	dir, err := os.MkdirTemp("", "quorum")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, "bcpgw")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(theirs, b, 0o755); err != nil {
		t.Fatal(err)
	}
	as := func(cred *syscall.Credential, args ...string) result {
		t.Helper()
		cmd := exec.Command(theirs, append(args, "--state", g.state)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "BCPGW_STATE="}
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{stdout: out.String(), stderr: errOut.String(), code: code}
	}
	member := &syscall.Credential{Uid: second, Gid: 5000, Groups: []uint32{group}}

	// Someone outside the group: the state directory stops them.
	if r := as(&syscall.Credential{Uid: 4003, Gid: 5000}, "approvals", "list"); r.code == 0 {
		t.Errorf("a user outside the operator group listed the queue:\n%s", r)
	}
	// The gateway's user approves first; then the member of the group.
	if r := g.bcpgw("approve", a.ID, "--sha256", a.SHA256); r.code != 0 || !strings.Contains(r.stdout, "1 of 2 approvals") {
		t.Fatalf("first approve (root): %s", r)
	}
	r := as(member, "approve", a.ID, "--sha256", a.SHA256, "--note", "second pair of eyes")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Approved "+a.ID) || strings.Contains(r.stdout, "not delivered yet") {
		t.Fatalf("second approve (uid %d): %s\ngateway log:\n%s", second, r, g.stderr.String())
	}
	got := g.approval(a.ID)
	if got.Status != "approved" || len(got.Approvals) != 2 || got.Approvals[0].UID != 0 || got.Approvals[1].UID != second ||
		got.Approvals[1].Note != "second pair of eyes" {
		t.Fatalf("after two operators: %+v", got)
	}
	opWait(t, "the approved digest delivered to main", func() (bool, string) {
		ds := g.deliveriesOf(a)
		return len(ds) == 1, fmt.Sprint(ds)
	})
}
