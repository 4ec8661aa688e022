package main

// End-to-end tests of the operator commands (status, agents, prompt,
// approvals list, approve, reject, events, report): a real `bcpgw run`
// runs as a subprocess on a temporary state directory, with testrt as the
// Reader (which publishes Cat-1, Cat-2 and Cat-3 items) and as the
// Controller (which logs what is delivered to it), and the commands are
// run as subprocesses against its control socket.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// opTimeout bounds every wait for the gateway to get somewhere.
const opTimeout = 30 * time.Second

// opWait polls cond until it holds, failing the test after opTimeout with
// what was awaited and cond's last explanation.
func opWait(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(opTimeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, why)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// opStateDir is a new, short state directory: the control socket's path
// must fit in a sockaddr_un.
func opStateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// opPublishes is a TESTRT_PUBLISH list: with cat12, one Cat-1 alert and
// one Cat-2 finding first; then digests Cat-3 digests, each published
// after the decision on the one before. tag makes the digests of one run
// distinct from those of another.
func opPublishes(cat12 bool, digests int, tag string) string {
	var pubs []map[string]any
	if cat12 {
		pubs = append(pubs,
			map[string]any{"subscription_id": "alerts", "controller": "main", "response": map[string]any{"urgent": true}},
			map[string]any{"subscription_id": "findings", "controller": "main", "response": map[string]any{"finding": "finding number {i}"}})
	}
	if digests > 0 {
		pubs = append(pubs, map[string]any{"subscription_id": "digest", "controller": "main", "repeat": digests,
			"response": map[string]any{"summary": "Digest " + tag + " {i}: two sources changed, nothing urgent."}})
	}
	if pubs == nil {
		return "[]"
	}
	b, err := json.Marshal(pubs)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// opSet writes the definitions: a Controller "main" with a Cat-1, a Cat-2
// and a Cat-3 subscription on its Reader "researcher"; both are testrt,
// logging to main.log and researcher.log in their workdirs logs/main and
// logs/researcher (the only places of the test's their sandboxes see). The researcher
// autostarts and publishes what ${PUB} says.
func opSet(t *testing.T, logs string) string {
	t.Helper()
	return writeSet(t, map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
runtime: [%q]
workdir: %q
tools: [BCPQuery]
env: {TESTRT_LOG: %q}
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 3
    budget_bits: 10000000
    max_cat2_queries: 1
    subscriptions:
      - {id: alerts, category: 1, fields: [{name: urgent, type: boolean}]}
      - id: findings
        category: 2
        questions: [{id: finding, question: "What did you find?", max_words: 5}]
      - {id: digest, category: 3, directive: "Summarize what changed today.", max_words: 50}
---
`, testrt, agentDir(t, logs, "main"), filepath.Join(logs, "main", "main.log")),
		"researcher.md": fmt.Sprintf(`---
name: researcher
runtime: [%q]
workdir: %q
autostart: true
tools: [BCPPublish]
env: {TESTRT_LOG: %q, TESTRT_PUBLISH: "${PUB}"}
bcp_channels:
  - {peer: main, role: reader, max_category: 3, budget_bits: 10000000, max_cat2_queries: 1}
---
`, testrt, agentDir(t, logs, "researcher"), filepath.Join(logs, "researcher", "researcher.log")),
	})
}

// opGateway is a `bcpgw run` subprocess and what the tests need to talk
// to it.
type opGateway struct {
	t      *testing.T
	state  string
	agents string
	logs   string
	cmd    *exec.Cmd
	stderr *testproc.Buffer
	exited chan struct{}
	err    error // the exit status, once exited is closed
	// runArgs are added to the run command line.
	runArgs []string
}

// opEnv is the environment of every command: no BCPGW_STATE, so that the
// --state flag is what counts.
var opEnv = []string{"BCPGW_STATE="}

// newOpEnv writes the definitions and returns a gateway on a new state
// directory, not yet started.
func newOpEnv(t *testing.T) *opGateway {
	t.Helper()
	logs := t.TempDir()
	return &opGateway{t: t, state: opStateDir(t), agents: opSet(t, logs), logs: logs}
}

// start runs `bcpgw run` with the researcher publishing pub, and waits
// until the control socket answers. The gateway is stopped at the end of
// the test if it still runs.
func (g *opGateway) start(pub string) {
	t := g.t
	t.Helper()
	g.stderr = &testproc.Buffer{}
	g.exited = make(chan struct{})
	cmd := exec.Command(bin, append([]string{"run", "--agents", g.agents, "--state", g.state, "--log-level", "debug"}, g.runArgs...)...)
	cmd.Env = append(baseEnv(), "PUB="+pub, "BCPGW_STATE=")
	cmd.Stderr = g.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g.cmd = cmd
	exited := g.exited
	go func() {
		g.err = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			g.stop()
		}
	})
	opWait(t, "the control socket to answer", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("bcpgw run exited early (%v)\n%s", g.err, g.stderr.String())
		default:
		}
		r := g.bcpgw("status")
		return r.code == 0, r.String()
	})
}

// stop sends SIGTERM and waits for a clean exit.
func (g *opGateway) stop() {
	t := g.t
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.exited:
		if g.err != nil {
			t.Errorf("bcpgw run exited with %v after SIGTERM\n%s", g.err, g.stderr.String())
		}
	case <-time.After(opTimeout):
		g.cmd.Process.Kill()
		<-g.exited
		t.Fatalf("bcpgw run did not stop after SIGTERM\n%s", g.stderr.String())
	}
}

// kill ends the gateway with SIGKILL, as a crash would.
func (g *opGateway) kill() {
	g.t.Helper()
	if err := g.cmd.Process.Kill(); err != nil {
		g.t.Fatal(err)
	}
	<-g.exited
}

// bcpgw runs a client command against this gateway's state directory.
func (g *opGateway) bcpgw(args ...string) result {
	g.t.Helper()
	return run(g.t, runOpts{env: opEnv}, append(slices.Clone(args), "--state", g.state)...)
}

// ok runs a client command that must succeed.
func (g *opGateway) ok(args ...string) result {
	g.t.Helper()
	r := g.bcpgw(args...)
	if r.code != 0 {
		g.t.Fatalf("bcpgw %q failed\n%s\ngateway log:\n%s", args, r, g.stderr.String())
	}
	return r
}

// opJSON decodes the whole of out into v, failing the test if it is not
// one JSON value.
func opJSON(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("not the JSON expected (%v):\n%s", err, out)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("more than one JSON value:\n%s", out)
	}
}

func (g *opGateway) approvals(status string) []control.Approval {
	g.t.Helper()
	var items []control.Approval
	opJSON(g.t, g.ok("approvals", "list", "--json", "--status", status).stdout, &items)
	return items
}

// approval returns the item with id in any status.
func (g *opGateway) approval(id string) control.Approval {
	g.t.Helper()
	for _, a := range g.approvals("all") {
		if a.ID == id {
			return a
		}
	}
	g.t.Fatalf("approval %s is not listed", id)
	return control.Approval{}
}

// decidedUID is the decided_uid member of the item with id as printed by
// approvals list --json, "" if it has none. It is read from the JSON
// text: uid 0 (root) must be printed too.
func (g *opGateway) decidedUID(id string) string {
	g.t.Helper()
	var items []map[string]json.RawMessage
	opJSON(g.t, g.ok("approvals", "list", "--json", "--status", "all").stdout, &items)
	for _, a := range items {
		if string(a["id"]) == strconv.Quote(id) {
			return string(a["decided_uid"])
		}
	}
	g.t.Fatalf("approval %s is not listed", id)
	return ""
}

// nextPending waits for a pending item not in seen, adds it to seen and
// returns it.
func (g *opGateway) nextPending(seen map[string]bool) control.Approval {
	g.t.Helper()
	var found control.Approval
	opWait(g.t, "a new pending approval item", func() (bool, string) {
		items := g.approvals("pending")
		for _, a := range items {
			if !seen[a.ID] {
				found = a
				return true, ""
			}
		}
		return false, fmt.Sprintf("pending: %+v\ngateway log:\n%s", items, g.stderr.String())
	})
	seen[found.ID] = true
	return found
}

// events runs `bcpgw events --json` with args and parses its lines.
func (g *opGateway) events(args ...string) []control.Event {
	g.t.Helper()
	r := g.ok(append([]string{"events", "--json"}, args...)...)
	return opParseEvents(g.t, r.stdout)
}

func opParseEvents(t *testing.T, out string) []control.Event {
	t.Helper()
	var evs []control.Event
	for line := range strings.Lines(out) {
		var e control.Event
		err := json.Unmarshal([]byte(line), &e)
		if err != nil || !strings.HasPrefix(line, "{") || !strings.HasSuffix(line, "}\n") {
			t.Fatalf("events line %q is not one JSON object (%v)", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

func (g *opGateway) status() control.Status {
	g.t.Helper()
	var st control.Status
	opJSON(g.t, g.ok("status", "--json").stdout, &st)
	return st
}

func (g *opGateway) agentsList() map[string]control.Agent {
	g.t.Helper()
	var all []control.Agent
	opJSON(g.t, g.ok("agents", "--json").stdout, &all)
	out := map[string]control.Agent{}
	for _, a := range all {
		out[a.Name] = a
	}
	return out
}

// opRecord is a testrt log line.
type opRecord struct {
	Event          string          `json:"event"`
	Pid            int             `json:"pid"`
	SubscriptionID string          `json:"subscription_id"`
	DeliveryID     string          `json:"delivery_id"`
	Success        bool            `json:"success"`
	Detail         string          `json:"detail"`
	Category       int             `json:"category"`
	Bits           float64         `json:"bits"`
	Response       json.RawMessage `json:"response"`
	Prompt         string          `json:"prompt"`
}

// testrtLog reads name (main.log or researcher.log) from its agent's
// workdir.
func (g *opGateway) testrtLog(name string) []opRecord {
	g.t.Helper()
	b, err := os.ReadFile(filepath.Join(g.logs, strings.TrimSuffix(name, ".log"), name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		g.t.Fatal(err)
	}
	var out []opRecord
	for line := range strings.Lines(string(b)) {
		var r opRecord
		if json.Unmarshal([]byte(line), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// opCompact is raw JSON without insignificant space.
func opCompact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %s: %v", raw, err)
	}
	return b.String()
}

// deliveriesOf returns main's delivery records of a's content.
func (g *opGateway) deliveriesOf(a control.Approval) []opRecord {
	g.t.Helper()
	want := opCompact(g.t, a.Response)
	var out []opRecord
	for _, r := range g.testrtLog("main.log") {
		if r.Event == "delivery" && opCompact(g.t, r.Response) == want {
			out = append(out, r)
		}
	}
	return out
}

// waitApplied waits until main has applied the delivery of a, and returns
// its delivery record.
func (g *opGateway) waitApplied(a control.Approval) opRecord {
	g.t.Helper()
	var d opRecord
	opWait(g.t, "the delivery of "+a.ID+" to main", func() (bool, string) {
		ds := g.deliveriesOf(a)
		if len(ds) == 0 {
			return false, "gateway log:\n" + g.stderr.String()
		}
		d = ds[0]
		for _, r := range g.testrtLog("main.log") {
			if r.Event == "applied" && r.DeliveryID == d.DeliveryID {
				return true, ""
			}
		}
		return false, "not applied yet\ngateway log:\n" + g.stderr.String()
	})
	return d
}

// opProc is a client command started in the background.
type opProc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

func (g *opGateway) startCmd(args ...string) *opProc {
	g.t.Helper()
	p := &opProc{cmd: exec.Command(bin, append(slices.Clone(args), "--state", g.state)...)}
	p.cmd.Env = append(baseEnv(), opEnv...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	return p
}

func (p *opProc) wait(t *testing.T) result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		<-done
		t.Fatalf("%q did not finish", p.cmd.Args)
	}
	r := result{stdout: p.stdout.String(), stderr: p.stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		r.code = ee.ExitCode()
	default:
		t.Fatalf("%q: %v\n%s", p.cmd.Args, err, r)
	}
	return r
}

// opUser is the name the gateway records for decisions of this process's
// user: the uid's user name, or the uid as text.
func opUser() string {
	uid := strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(uid); err == nil {
		return u.Username
	}
	return uid
}

func opDecisions(evs []control.Event, id string) []control.Event {
	var out []control.Event
	for _, e := range evs {
		if e.Ref == id && strings.HasPrefix(e.Kind, "approval_") && e.Kind != "approval_queued" {
			out = append(out, e)
		}
	}
	return out
}

// ---------------------------------------------------------------------------

// Without a gateway, every client command exits 3 and says how to start
// one; without a state directory, 2 naming --state; BCPGW_STATE stands in
// for --state.
func TestCLINoGateway(t *testing.T) {
	t.Parallel()
	empty := opStateDir(t)
	missing := filepath.Join(empty, "nothing-here")
	commands := [][]string{
		{"status"}, {"status", "--json"}, {"agents"}, {"agents", "--json"}, {"agents", "start", "main"}, {"agents", "stop", "main"},
		{"prompt", "main", "hello"}, {"approvals", "list"}, {"approvals", "list", "--json"}, {"approve", "ap-x"},
		{"reject", "ap-x", "--reason", "no"}, {"events"}, {"events", "--follow"}, {"report"}, {"report", "--json"},
	}
	for _, args := range commands {
		for _, state := range []string{empty, missing} {
			r := run(t, runOpts{env: opEnv}, append(slices.Clone(args), "--state", state)...)
			sock := filepath.Join(state, "control.sock")
			if r.code != 3 || r.stdout != "" || !strings.Contains(r.stderr, "not running") ||
				!strings.Contains(r.stderr, "bcpgw run") || !strings.Contains(r.stderr, sock) {
				t.Errorf("%q on %s: want exit 3, saying the gateway is not running on %s and how to start it\n%s", args, state, sock, r)
			}
		}
		// No --state, no BCPGW_STATE.
		r := run(t, runOpts{env: opEnv}, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "--state") {
			t.Errorf("%q without --state: want exit 2 naming --state\n%s", args, r)
		}
		// BCPGW_STATE instead of --state.
		r = run(t, runOpts{env: []string{"BCPGW_STATE=" + empty}}, args...)
		if r.code != 3 || !strings.Contains(r.stderr, filepath.Join(empty, "control.sock")) {
			t.Errorf("%q with BCPGW_STATE=%s: want exit 3 naming its socket\n%s", args, empty, r)
		}
	}
	// Client commands create nothing.
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("client commands created files in the state directory: %v", entries)
	}
	// Usage errors are found before the socket is tried.
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"reject", "ap-x"}, "--reason is required"},
		{[]string{"approve"}, "accepts 1 arg"},
		{[]string{"approve", "a", "b"}, "accepts 1 arg"},
		{[]string{"reject", "--reason", "x"}, "accepts 1 arg"},
		{[]string{"approvals", "list", "extra"}, "unknown command"},
		{[]string{"agents", "start"}, "accepts 1 arg"},
		{[]string{"prompt", "main"}, "requires at least 2 arg"},
		{[]string{"events", "--since", "x"}, "invalid argument"},
		{[]string{"status", "--bogus"}, "unknown flag"},
	} {
		r := run(t, runOpts{env: opEnv}, append(tt.args, "--state", empty)...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%q: want exit 2 and %q\n%s", tt.args, tt.want, r)
		}
	}
}

// approvals list, approve and reject against a running gateway: the JSON
// and the table, the decision recorded with who made it, deliveries, and
// the refusals (already decided, wrong hash, no such item).
func TestCLIApproveAndReject(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(true, 1000, "ar"))
	seen := map[string]bool{}
	a := g.nextPending(seen)

	// The JSON has every field a reviewer needs.
	r := g.ok("approvals", "list", "--json")
	var raw []map[string]json.RawMessage
	opJSON(t, r.stdout, &raw)
	if len(raw) != 1 {
		t.Fatalf("want the one pending item, got %d\n%s", len(raw), r.stdout)
	}
	for _, k := range []string{"id", "status", "controller", "reader", "subscription_id", "category", "directive", "response",
		"sha256", "anomalies", "bandwidth_bits", "created_at", "expires_at"} {
		if _, ok := raw[0][k]; !ok {
			t.Errorf("approvals list --json item lacks %q\n%s", k, r.stdout)
		}
	}
	for _, k := range []string{"decided_at", "decided_by", "decided_pid", "note", "reason"} {
		if _, ok := raw[0][k]; ok {
			t.Errorf("a pending item has %q\n%s", k, r.stdout)
		}
	}
	if string(raw[0]["anomalies"]) != "[]" {
		t.Errorf("anomalies = %s; want [] for a clean digest", raw[0]["anomalies"])
	}
	if a.Status != "pending" || a.Controller != "main" || a.Reader != "researcher" || a.SubscriptionID != "digest" || a.QueryID != "" ||
		a.Category != 3 || a.Directive != "Summarize what changed today." || a.BandwidthBits <= 0 ||
		!a.ExpiresAt.After(a.CreatedAt) || time.Since(a.CreatedAt) > time.Hour || time.Since(a.CreatedAt) < -time.Minute {
		t.Errorf("unexpected item %+v", a)
	}
	var resp struct{ Summary string }
	if err := json.Unmarshal(a.Response, &resp); err != nil || !strings.HasPrefix(resp.Summary, "Digest ar ") {
		t.Errorf("response %s: %v", a.Response, err)
	}
	// The hash is that of the response shown.
	if sum := sha256.Sum256([]byte(opCompact(t, a.Response))); hex.EncodeToString(sum[:]) != a.SHA256 {
		t.Errorf("sha256 %s is not the hash of the response shown, %s", a.SHA256, opCompact(t, a.Response))
	}
	// The table.
	r = g.ok("approvals", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "STATUS") ||
		!strings.HasPrefix(lines[1], a.ID+" ") || !strings.Contains(lines[1], "pending") || !strings.Contains(lines[1], "digest") ||
		!strings.Contains(lines[1], "researcher") || !strings.Contains(lines[1], "main") {
		t.Errorf("approvals list: want a header and the item's row\n%s", r)
	}
	if r := g.ok("approvals", "list", "--status", "approved"); strings.TrimSpace(r.stdout) != "No approved approval items." {
		t.Errorf("approvals list --status approved with none: %s", r)
	}
	if r := g.bcpgw("approvals", "list", "--status", "bogus"); r.code != 2 || !strings.Contains(r.stderr, "use pending, approved") {
		t.Errorf("approvals list --status bogus: want exit 2 naming the statuses\n%s", r)
	}
	// status counts it.
	if st := g.status(); st.PendingApprovals != 1 || st.PID != g.cmd.Process.Pid || st.Agents["running"] < 1 {
		t.Errorf("status: %+v", st)
	}
	if r := g.ok("status"); !strings.Contains(r.stdout, "running, pid "+strconv.Itoa(g.cmd.Process.Pid)) ||
		!strings.Contains(r.stdout, "approvals:  1 pending") {
		t.Errorf("status:\n%s", r)
	}

	// A wrong hash is refused and leaves the item pending.
	r = g.bcpgw("approve", a.ID, "--sha256", strings.Repeat("0", 64), "--note", "wrong")
	if r.code != 1 || !strings.Contains(r.stderr, "not the content stored") || strings.Contains(r.stdout, "Approved") {
		t.Errorf("approve with a wrong --sha256: want exit 1 and a hash mismatch\n%s", r)
	}
	if got := g.approval(a.ID); got.Status != "pending" || got.DecidedBy != "" || got.Note != "" {
		t.Errorf("after a refused approval the item is %+v; want it pending", got)
	}
	for _, args := range [][]string{{"approve", "NOPE"}, {"reject", "NOPE", "--reason", "x"}, {"approve", "NOPE", "--sha256", a.SHA256}} {
		if r := g.bcpgw(args...); r.code != 1 || !strings.Contains(r.stderr, `no approval item "NOPE"`) {
			t.Errorf("%q: want exit 1 saying there is no such item\n%s", args, r)
		}
	}

	// Approve, with the hash of what was read.
	p := g.startCmd("approve", a.ID, "--note", "reviewed by the CLI test", "--sha256", a.SHA256)
	r = p.wait(t)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Approved "+a.ID+": Cat-3 from researcher") || !strings.Contains(r.stdout, "queued for delivery to main") {
		t.Fatalf("approve: %s", r)
	}
	got := g.approval(a.ID)
	if got.Status != "approved" || got.DecidedBy != opUser() || g.decidedUID(a.ID) != strconv.Itoa(os.Getuid()) || got.DecidedPID != p.cmd.Process.Pid ||
		got.Note != "reviewed by the CLI test" || got.DecidedAt.Before(got.CreatedAt) || got.SHA256 != a.SHA256 {
		t.Errorf("approved item %+v; want decided by %s (uid %d, pid %d) with the note", got, opUser(), os.Getuid(), p.cmd.Process.Pid)
	}
	if items := g.approvals("approved"); len(items) != 1 || items[0].ID != a.ID {
		t.Errorf("approvals list --status approved: %+v", items)
	}
	// It reaches main, once, as a Cat-3 delivery.
	d := g.waitApplied(a)
	if d.Category != 3 || d.SubscriptionID != "digest" || d.Bits != a.BandwidthBits {
		t.Errorf("delivery to main: %+v", d)
	}
	var sent []control.Event
	opWait(t, "the delivery_sent event of "+d.DeliveryID, func() (bool, string) {
		sent = nil
		evs := g.events("--type", "delivery_sent")
		for _, e := range evs {
			if e.Kind != "delivery_sent" {
				t.Errorf("--type delivery_sent printed %+v", e)
			}
			if e.Ref == d.DeliveryID {
				sent = append(sent, e)
			}
		}
		return len(sent) > 0, fmt.Sprintf("%+v", evs)
	})
	if len(sent) != 1 || sent[0].Category != 3 || sent[0].Agent != "main" || sent[0].Peer != "researcher" || sent[0].Bits != a.BandwidthBits {
		t.Errorf("delivery_sent events of %s: %+v", d.DeliveryID, sent)
	}

	// Deciding it again is refused and changes nothing.
	for _, args := range [][]string{{"approve", a.ID}, {"approve", a.ID, "--sha256", a.SHA256, "--note", "again"}, {"reject", a.ID, "--reason", "too late"}} {
		r := g.bcpgw(args...)
		if r.code != 1 || !strings.Contains(r.stderr, "already approved by "+opUser()) || !strings.Contains(r.stderr, "nothing was changed") || r.stdout != "" {
			t.Errorf("%q on an approved item: want exit 1 and \"already approved\"\n%s", args, r)
		}
	}
	if again := g.approval(a.ID); again.Note != got.Note || again.DecidedPID != got.DecidedPID || again.Status != "approved" {
		t.Errorf("a refused second decision changed the item: %+v", again)
	}

	// The researcher heard the verdict and published the next digest:
	// reject it.
	b := g.nextPending(seen)
	if r := g.bcpgw("reject", b.ID); r.code != 2 || !strings.Contains(r.stderr, "--reason is required") {
		t.Errorf("reject without --reason: want exit 2\n%s", r)
	}
	if got := g.approval(b.ID); got.Status != "pending" {
		t.Errorf("reject without --reason changed the item: %+v", got)
	}
	p = g.startCmd("reject", b.ID, "--reason", "not relevant today")
	r = p.wait(t)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Rejected "+b.ID+": Cat-3 from researcher, not delivered. Reason: not relevant today") {
		t.Fatalf("reject: %s", r)
	}
	if got := g.approval(b.ID); got.Status != "rejected" || got.Reason != "not relevant today" || got.DecidedBy != opUser() ||
		g.decidedUID(b.ID) != strconv.Itoa(os.Getuid()) || got.DecidedPID != p.cmd.Process.Pid {
		t.Errorf("rejected item %+v", got)
	}
	for _, args := range [][]string{{"reject", b.ID, "--reason", "again"}, {"approve", b.ID}, {"approve", b.ID, "--sha256", b.SHA256}} {
		if r := g.bcpgw(args...); r.code != 1 || !strings.Contains(r.stderr, "already rejected by "+opUser()) {
			t.Errorf("%q on a rejected item: want exit 1 and \"already rejected\"\n%s", args, r)
		}
	}
	// The Reader is told why.
	opWait(t, "the researcher to hear the rejection", func() (bool, string) {
		for _, rec := range g.testrtLog("researcher.log") {
			if rec.Event == "verdict" && !rec.Success && strings.Contains(rec.Detail, "not relevant today") {
				return true, ""
			}
		}
		return false, fmt.Sprint(g.testrtLog("researcher.log"))
	})

	// A third item, approved without --sha256, is delivered after the
	// first: had a refused decision released another delivery, main would
	// have got it before this one.
	c := g.nextPending(seen)
	if r := g.ok("approve", c.ID); !strings.HasPrefix(r.stdout, "Approved "+c.ID) {
		t.Errorf("approve: %s", r)
	}
	g.waitApplied(c)
	if n := len(g.deliveriesOf(a)); n != 1 {
		t.Errorf("%s delivered %d times; want once", a.ID, n)
	}
	if n := len(g.deliveriesOf(b)); n != 0 {
		t.Errorf("rejected %s delivered %d times", b.ID, n)
	}
	evs := g.events("--type", "approval_*")
	for id, want := range map[string]string{a.ID: "approval_approved", b.ID: "approval_rejected", c.ID: "approval_approved"} {
		if ds := opDecisions(evs, id); len(ds) != 1 || ds[0].Kind != want || !strings.Contains(ds[0].Detail, "by "+opUser()+" (uid ") {
			t.Errorf("decision events of %s: %+v; want one %s naming %s", id, ds, want, opUser())
		}
	}
}

// Two decisions on one item at once: exactly one wins, the other is told
// the item was already decided.
func TestCLIConcurrentDecisions(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(false, 1000, "cc"))
	seen := map[string]bool{}
	var approved []control.Approval
	for i, pair := range [][2]string{{"approve", "approve"}, {"approve", "reject"}, {"reject", "approve"}, {"reject", "reject"}, {"approve", "approve"}, {"approve", "reject"}} {
		a := g.nextPending(seen)
		var procs [2]*opProc
		for j, verb := range pair {
			args := []string{verb, a.ID, "--note", fmt.Sprintf("round %d", i)}
			if verb == "reject" {
				args = []string{verb, a.ID, "--reason", fmt.Sprintf("round %d", i)}
			}
			procs[j] = g.startCmd(args...)
		}
		var results [2]result
		for j := range procs {
			results[j] = procs[j].wait(t)
		}
		winners := 0
		var winner int
		for j, r := range results {
			switch {
			case r.code == 0:
				winners++
				winner = j
			case r.code != 1 || !strings.Contains(r.stderr, "already") || !strings.Contains(r.stderr, "nothing was changed"):
				t.Errorf("round %d: %s %s: want exit 0, or exit 1 and \"already\"\n%s", i, pair[j], a.ID, r)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d (%s/%s on %s): %d decisions succeeded; want exactly 1\n%s\n%s", i, pair[0], pair[1], a.ID, winners, results[0], results[1])
		}
		got := g.approval(a.ID)
		want := map[string]string{"approve": "approved", "reject": "rejected"}[pair[winner]]
		if got.Status != want || got.DecidedPID != procs[winner].cmd.Process.Pid {
			t.Errorf("round %d: item %+v; want %s by pid %d, the winner", i, got, want, procs[winner].cmd.Process.Pid)
		}
		if loser := results[1-winner]; !strings.Contains(loser.stderr, "already "+want) {
			t.Errorf("round %d: the loser should say the item was already %s:\n%s", i, want, loser)
		}
		if want == "approved" {
			approved = append(approved, a)
		}
	}
	// Each approved item is delivered once: wait for the last, delivered
	// after the others.
	last := g.nextPending(seen)
	g.ok("approve", last.ID)
	g.waitApplied(last)
	for _, a := range approved {
		if n := len(g.deliveriesOf(a)); n != 1 {
			t.Errorf("%s delivered %d times; want once", a.ID, n)
		}
	}
	evs := g.events("--type", "approval_*")
	for id := range seen {
		if ds := opDecisions(evs, id); len(ds) != 1 {
			t.Errorf("%s has %d decision events; want 1: %+v", id, len(ds), ds)
		}
	}
}

// events: JSON lines in seq order, --since, --type with prefixes, the
// plain format.
func TestCLIEvents(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(true, 2, "ev"))
	seen := map[string]bool{}
	a := g.nextPending(seen)
	g.ok("approve", a.ID)
	b := g.nextPending(seen)
	g.ok("reject", b.ID, "--reason", "no")
	g.waitApplied(a)
	// Delivery events are stored after the delivery: wait for the last.
	var all []control.Event
	opWait(t, "the Cat-3 delivery_acked event", func() (bool, string) {
		all = g.events()
		for _, e := range all {
			if e.Kind == "delivery_acked" && e.Category == 3 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", all)
	})
	if len(all) < 8 {
		t.Fatalf("only %d events: %+v", len(all), all)
	}
	kinds := map[string]bool{}
	for i, e := range all {
		kinds[e.Kind] = true
		if e.Seq <= 0 || i > 0 && e.Seq <= all[i-1].Seq || e.Time.IsZero() || e.Kind == "" {
			t.Errorf("event %d: %+v (previous seq %d)", i, e, all[max(i-1, 0)].Seq)
		}
	}
	for _, k := range []string{"session_started", "publish_accepted", "approval_queued", "approval_approved", "approval_rejected", "delivery_sent", "delivery_acked"} {
		if !kinds[k] {
			t.Errorf("no %s event in %v", k, kinds)
		}
	}
	// --since N prints exactly the events after N.
	mid := all[len(all)/2].Seq
	since := g.events("--since", strconv.FormatInt(mid, 10))
	if len(since) == 0 || since[0].Seq <= mid {
		t.Errorf("--since %d printed %+v", mid, since)
	}
	var want []int64
	for _, e := range all {
		if e.Seq > mid {
			want = append(want, e.Seq)
		}
	}
	var gotSeqs []int64
	for _, e := range since {
		if e.Seq <= all[len(all)-1].Seq {
			gotSeqs = append(gotSeqs, e.Seq)
		}
	}
	if !slices.Equal(gotSeqs, want) {
		t.Errorf("--since %d printed seqs %v; want %v", mid, gotSeqs, want)
	}
	if evs := g.events("--since", strconv.FormatInt(g.status().LastEventSeq+1000, 10)); len(evs) != 0 {
		t.Errorf("--since past the end printed %+v", evs)
	}
	// --type with a prefix, and exact kinds, repeated or separated by commas.
	approvals := g.events("--type", "approval_*")
	var approvalKinds []string
	for _, e := range approvals {
		if !strings.HasPrefix(e.Kind, "approval_") {
			t.Errorf("--type approval_* printed %+v", e)
		}
		approvalKinds = append(approvalKinds, e.Kind+" "+e.Ref)
	}
	for _, k := range []string{"approval_queued " + a.ID, "approval_approved " + a.ID, "approval_queued " + b.ID, "approval_rejected " + b.ID} {
		if !slices.Contains(approvalKinds, k) {
			t.Errorf("--type approval_* lacks %q: %v", k, approvalKinds)
		}
	}
	for _, args := range [][]string{{"--type", "approval_approved,approval_rejected"}, {"--type", "approval_approved", "--type", "approval_rejected"}} {
		evs := g.events(args...)
		if len(evs) != 2 || evs[0].Kind != "approval_approved" || evs[0].Ref != a.ID || evs[1].Kind != "approval_rejected" || evs[1].Ref != b.ID {
			t.Errorf("%q printed %+v", args, evs)
		}
	}
	if evs := g.events("--type", "no_such_kind"); len(evs) != 0 {
		t.Errorf("--type no_such_kind printed %+v", evs)
	}
	if r := g.bcpgw("events", "--type", "Approval!"); r.code == 0 || !strings.Contains(r.stderr, `event type "Approval!"`) {
		t.Errorf("events --type Approval!: want a refusal naming the type\n%s", r)
	}
	// The plain format: one line per event, starting with its seq.
	r := g.ok("events", "--type", "approval_approved")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 1 ||
		!strings.HasPrefix(lines[0], strconv.FormatInt(opDecisions(approvals, a.ID)[0].Seq, 10)+" ") ||
		!strings.Contains(lines[0], " approval_approved researcher->main cat3 ") || !strings.Contains(lines[0], "["+a.ID+"]") ||
		!strings.Contains(lines[0], "approved by "+opUser()) {
		t.Errorf("events --type approval_approved:\n%s", r)
	}
}

// opFollower is `bcpgw events --follow` running in the background.
type opFollower struct {
	p     *opProc
	lines chan string
}

func (g *opGateway) follow(args ...string) *opFollower {
	g.t.Helper()
	cmd := exec.Command(bin, append(append([]string{"events", "--follow", "--json"}, args...), "--state", g.state)...)
	cmd.Env = append(baseEnv(), opEnv...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		g.t.Fatal(err)
	}
	f := &opFollower{p: &opProc{cmd: cmd}, lines: make(chan string, 1024)}
	cmd.Stderr = &f.p.stderr
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	go func() {
		defer close(f.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
	}()
	g.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			for range f.lines {
			}
			cmd.Wait()
		}
	})
	return f
}

// next returns the next event the follower prints, failing the test if
// none comes within opTimeout or the follower ends.
func (f *opFollower) next(t *testing.T) control.Event {
	t.Helper()
	select {
	case line, ok := <-f.lines:
		if !ok {
			t.Fatalf("events --follow ended: %s", f.p.stderr.String())
		}
		evs := opParseEvents(t, line+"\n")
		return evs[0]
	case <-time.After(opTimeout):
		t.Fatalf("events --follow printed nothing within %s", opTimeout)
	}
	return control.Event{}
}

// stop interrupts the follower, which must exit 0 having printed nothing
// more than what was read.
func (f *opFollower) stop(t *testing.T) (rest []string) {
	t.Helper()
	if err := f.p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for line := range f.lines {
		rest = append(rest, line)
	}
	if r := f.p.wait(t); r.code != 0 {
		t.Errorf("events --follow after SIGINT: %s", r)
	}
	return rest
}

// events --follow prints new events as they are stored, filtered by type,
// from now or from --since.
func TestCLIEventsFollow(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(false, 1000, "fo"))
	seen := map[string]bool{}
	a := g.nextPending(seen)
	start := g.status().LastEventSeq

	// From now: nothing from before is printed. Prompts to main prove the
	// subscription is in place before the approval.
	f := g.follow("--type", "approval_*", "--type", "operator_prompt")
	var first control.Event
	opWait(t, "events --follow to print an operator_prompt", func() (bool, string) {
		g.ok("prompt", "main", "ping")
		select {
		case line, ok := <-f.lines:
			if !ok {
				t.Fatalf("events --follow ended: %s", f.p.stderr.String())
			}
			first = opParseEvents(t, line+"\n")[0]
			return true, ""
		case <-time.After(200 * time.Millisecond):
			return false, "nothing printed"
		}
	})
	if first.Kind != "operator_prompt" || first.Seq <= start || first.Agent != "main" || !strings.Contains(first.Detail, "by "+opUser()) {
		t.Fatalf("events --follow printed %+v first; want a new operator_prompt (after seq %d)", first, start)
	}
	g.ok("approve", a.ID, "--note", "followed")
	var approved control.Event
	for {
		e := f.next(t)
		if e.Kind != "operator_prompt" && !strings.HasPrefix(e.Kind, "approval_") || e.Seq <= start {
			t.Errorf("events --follow --type approval_* --type operator_prompt printed %+v", e)
		}
		if e.Kind == "approval_approved" {
			approved = e
			break
		}
	}
	if approved.Ref != a.ID || approved.Category != 3 || !strings.Contains(approved.Detail, "approved by "+opUser()) {
		t.Errorf("approval_approved event %+v", approved)
	}
	// The next item is queued after the verdict: it is followed too.
	b := g.nextPending(seen)
	for {
		e := f.next(t)
		if e.Kind == "approval_queued" && e.Ref == b.ID {
			break
		}
		if e.Kind != "operator_prompt" {
			t.Errorf("unexpected %+v", e)
		}
	}
	for _, line := range f.stop(t) {
		if e := opParseEvents(t, line+"\n")[0]; e.Kind != "operator_prompt" {
			t.Errorf("events --follow printed %+v at the end", e)
		}
	}

	// From --since: the events stored before are printed first, in order.
	f = g.follow("--since", "0", "--type", "approval_queued,approval_approved")
	var got []string
	for len(got) < 3 {
		e := f.next(t)
		got = append(got, e.Kind+" "+e.Ref)
	}
	if want := []string{"approval_queued " + a.ID, "approval_approved " + a.ID, "approval_queued " + b.ID}; !slices.Equal(got, want) {
		t.Errorf("events --follow --since 0 printed %q; want %q", got, want)
	}
	g.ok("approve", b.ID)
	if e := f.next(t); e.Kind != "approval_approved" || e.Ref != b.ID {
		t.Errorf("after approving %s, events --follow printed %+v", b.ID, e)
	}
	f.stop(t)
}

// agents lists the agents; stop and start one; prompt reaches its runtime.
func TestCLIAgentsAndPrompt(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(true, 0, "ag"))
	var researcher control.Agent
	opWait(t, "main and researcher running", func() (bool, string) {
		// main starts for the deliveries of the researcher's publishes.
		all := g.agentsList()
		researcher = all["researcher"]
		return all["main"].State == "running" && researcher.State == "running", fmt.Sprintf("%+v", all)
	})
	all := g.agentsList()
	main := all["main"]
	if len(all) != 2 || !slices.Equal(main.Roles, []string{"controller"}) || main.Autostart || main.PID <= 0 || main.Session == "" ||
		len(main.Channels) != 1 || main.Channels[0] != (control.Channel{Peer: "researcher", Role: "controller", MaxCategory: 3, BudgetBits: 10000000}) {
		t.Errorf("agents --json: main is %+v", main)
	}
	if !slices.Equal(researcher.Roles, []string{"reader"}) || !researcher.Autostart || researcher.Held || researcher.PID <= 0 ||
		researcher.Since.IsZero() || len(researcher.Channels) != 1 || researcher.Channels[0].Peer != "main" || researcher.Channels[0].Role != "reader" {
		t.Errorf("agents --json: researcher is %+v", researcher)
	}
	for _, a := range []control.Agent{main, researcher} {
		if err := syscall.Kill(a.PID, 0); err != nil {
			t.Errorf("%s's pid %d is not a live process: %v", a.Name, a.PID, err)
		}
	}
	r := g.ok("agents")
	if !strings.HasPrefix(r.stdout, "NAME ") || !strings.Contains(r.stdout, "researcher  reader") ||
		!strings.Contains(r.stdout, strconv.Itoa(researcher.PID)) || !strings.Contains(r.stdout, "autostart") {
		t.Errorf("agents:\n%s", r)
	}
	if st := g.status(); st.Agents["running"] != 2 {
		t.Errorf("status agents: %v", st.Agents)
	}

	// Stop the researcher: it stays stopped, its runtime ends.
	if r := g.ok("agents", "stop", "researcher"); r.stdout != "researcher: stopping\n" {
		t.Errorf("agents stop: %s", r)
	}
	opWait(t, "the researcher to stop", func() (bool, string) {
		a := g.agentsList()["researcher"]
		return a.State == "stopped" && a.Held && a.PID == 0 && a.Session == "", fmt.Sprintf("%+v", a)
	})
	waitGone(t, map[int]bool{researcher.PID: true})
	if r := g.ok("agents"); !strings.Contains(r.stdout, "stopped by operator") {
		t.Errorf("agents after stop:\n%s", r)
	}
	// Start it again.
	if r := g.ok("agents", "start", "researcher"); r.stdout != "researcher: started\n" {
		t.Errorf("agents start: %s", r)
	}
	opWait(t, "the researcher to run again", func() (bool, string) {
		a := g.agentsList()["researcher"]
		return a.State == "running" && !a.Held && a.PID > 0 && a.PID != researcher.PID && a.Session != researcher.Session, fmt.Sprintf("%+v", a)
	})
	for _, args := range [][]string{{"agents", "stop", "nosuch"}, {"agents", "start", "nosuch"}, {"prompt", "nosuch", "hello"}} {
		if r := g.bcpgw(args...); r.code != 1 || !strings.Contains(r.stderr, `no agent named "nosuch"`) {
			t.Errorf("%q: want exit 1 and no such agent\n%s", args, r)
		}
	}

	// A prompt reaches the runtime.
	if r := g.ok("prompt", "main", "hello"); r.stdout != "Prompt sent to main.\n" {
		t.Errorf("prompt: %s", r)
	}
	g.ok("prompt", "main", "hello", "there")
	opWait(t, "main to log the prompts", func() (bool, string) {
		var prompts []string
		for _, rec := range g.testrtLog("main.log") {
			if rec.Event == "prompt" {
				prompts = append(prompts, rec.Prompt)
			}
		}
		return slices.Equal(prompts, []string{"hello", "hello there"}), fmt.Sprint(prompts)
	})
	// Every action is an event naming who acted. (Operator events are
	// stored after the command has its answer: wait for them.)
	want := []string{"operator_stop researcher", "operator_start researcher", "operator_prompt main", "operator_prompt main"}
	var evs []control.Event
	opWait(t, "the operator events", func() (bool, string) {
		evs = g.events("--type", "operator_*")
		var acted []string
		for _, e := range evs {
			acted = append(acted, e.Kind+" "+e.Agent)
		}
		return slices.Equal(acted, want), fmt.Sprintf("operator events %q; want %q", acted, want)
	})
	for _, e := range evs {
		if !strings.Contains(e.Detail, "by "+opUser()+" (uid "+strconv.Itoa(os.Getuid())+", pid ") {
			t.Errorf("operator event does not name the operator: %+v", e)
		}
	}
}

// report: what each Controller session was exposed to, by channel and
// category, matching the deliveries sent.
func TestCLIReport(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(true, 1, "rp"))
	a := g.nextPending(map[string]bool{})
	g.ok("approve", a.ID)
	opWait(t, "Cat-1, Cat-2 and Cat-3 deliveries acknowledged", func() (bool, string) {
		cats := map[int]bool{}
		for _, e := range g.events("--type", "delivery_acked") {
			cats[e.Category] = true
		}
		return cats[1] && cats[2] && cats[3], fmt.Sprint(cats)
	})
	var sentBits float64
	byCat := map[int]float64{}
	for _, e := range g.events("--type", "delivery_*") {
		if e.Kind == "delivery_sent" || e.Kind == "delivery_retried" {
			sentBits += e.Bits
			byCat[e.Category] += e.Bits
		}
	}
	for _, args := range [][]string{{"report", "--json"}, {"report", "--json", "--agent", "main"}} {
		var rep control.Report
		opJSON(t, g.ok(args...).stdout, &rep)
		var total float64
		chans := map[int]control.ChannelExposure{}
		for _, s := range rep.Sessions {
			if s.Agent != "main" {
				t.Errorf("%q: session of %s: %+v", args, s.Agent, s)
				continue
			}
			if s.Session == "" || s.StartedAt.IsZero() {
				t.Errorf("%q: session %+v", args, s)
			}
			total += s.Bits
			var sum float64
			for _, c := range s.Channels {
				sum += c.Bits
				if c.Reader != "researcher" {
					t.Errorf("%q: channel %+v", args, c)
				}
				chans[c.Category] = c
			}
			var catSum float64
			for _, b := range s.ByCat {
				catSum += b
			}
			if sum != s.Bits || catSum != s.Bits {
				t.Errorf("%q: session bits %v; channels sum to %v, categories to %v", args, s.Bits, sum, catSum)
			}
		}
		if total <= 0 || total != sentBits {
			t.Errorf("%q: exposure %v bits; the delivery events sent %v", args, total, sentBits)
		}
		for cat := 1; cat <= 3; cat++ {
			if c := chans[cat]; c.Deliveries < 1 || c.Bits != byCat[cat] || c.Bits <= 0 {
				t.Errorf("%q: Cat-%d exposure %+v; want >= 1 delivery and %v bits", args, cat, c, byCat[cat])
			}
		}
		if chans[3].Bits != a.BandwidthBits || chans[3].Deliveries != 1 {
			t.Errorf("%q: Cat-3 exposure %+v; want the one approved item of %v bits", args, chans[3], a.BandwidthBits)
		}
	}
	// The by_category keys are the category numbers.
	var raw struct {
		Sessions []map[string]json.RawMessage `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(g.ok("report", "--json").stdout), &raw); err != nil || len(raw.Sessions) == 0 {
		t.Fatalf("report --json: %v", err)
	}
	var keys map[string]float64
	if err := json.Unmarshal(raw.Sessions[0]["by_category"], &keys); err != nil || keys["1"] <= 0 || keys["2"] <= 0 || keys["3"] <= 0 {
		t.Errorf("by_category %s: %v", raw.Sessions[0]["by_category"], err)
	}
	r := g.ok("report")
	for _, want := range []string{"main ses-", "exposed to", "Cat-1", "Cat-2", "Cat-3", "from researcher"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := g.bcpgw("report", "--agent", "nosuch"); r.code != 1 || !strings.Contains(r.stderr, `no agent named "nosuch"`) {
		t.Errorf("report --agent nosuch: %s", r)
	}
}

// A pending item survives a restart of the gateway, clean or not, and can
// be decided then.
func TestCLIRestartKeepsPendingItems(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(false, 2, "rs"))
	seen := map[string]bool{}
	a := g.nextPending(seen)
	g.ok("approve", a.ID)
	b := g.nextPending(seen)
	g.stop()
	sock := filepath.Join(g.state, "control.sock")
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control socket left behind after a clean stop: %v", err)
	}
	if r := g.bcpgw("status"); r.code != 3 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("status after the gateway stopped: %s", r)
	}
	if r := g.bcpgw("approve", b.ID); r.code != 3 {
		t.Errorf("approve while the gateway is stopped: %s", r)
	}

	// Restart with a researcher that publishes nothing.
	g.start(opPublishes(false, 0, ""))
	items := g.approvals("pending")
	if len(items) != 1 || items[0].ID != b.ID || items[0].SHA256 != b.SHA256 || opCompact(t, items[0].Response) != opCompact(t, b.Response) ||
		!items[0].CreatedAt.Equal(b.CreatedAt) || !items[0].ExpiresAt.Equal(b.ExpiresAt) {
		t.Fatalf("after the restart, pending items are %+v; want %+v", items, b)
	}
	if got := g.approval(a.ID); got.Status != "approved" {
		t.Errorf("after the restart, %s is %+v", a.ID, got)
	}
	if st := g.status(); st.PendingApprovals != 1 {
		t.Errorf("status after the restart: %+v", st)
	}
	if r := g.ok("approvals", "list"); !strings.Contains(r.stdout, b.ID) {
		t.Errorf("approvals list after the restart:\n%s", r)
	}
	if r := g.ok("approve", b.ID, "--note", "after the restart"); !strings.HasPrefix(r.stdout, "Approved "+b.ID) {
		t.Errorf("approve after the restart: %s", r)
	}
	g.waitApplied(b)
	if got := g.approval(b.ID); got.Status != "approved" || got.Note != "after the restart" || got.DecidedBy != opUser() {
		t.Errorf("after approval: %+v", got)
	}
	if r := g.ok("approvals", "list"); strings.TrimSpace(r.stdout) != "No pending approval items." {
		t.Errorf("approvals list with nothing pending:\n%s", r)
	}

	// A crash leaves the socket behind: clients say the gateway is not
	// running, and the next run replaces the stale socket. (The delivery
	// is acknowledged first, so that it is not sent again.)
	opWait(t, "no delivery left to acknowledge", func() (bool, string) {
		st := g.status()
		return st.PendingDeliveries == 0, fmt.Sprintf("%+v", st)
	})
	pids := map[int]bool{}
	for _, a := range g.agentsList() {
		if a.PID != 0 {
			pids[a.PID] = true
		}
	}
	g.kill()
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("after SIGKILL, control.sock: %v %v; want the stale socket", fi, err)
	}
	if r := g.bcpgw("status"); r.code != 3 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("status on a stale socket: %s", r)
	}
	waitGone(t, pids)
	g.start(opPublishes(false, 0, ""))
	if items := g.approvals("all"); len(items) != 2 || items[0].ID != a.ID || items[1].ID != b.ID ||
		items[0].Status != "approved" || items[1].Status != "approved" {
		t.Errorf("after a crash and a restart, the items are %+v", items)
	}
	if n := len(g.deliveriesOf(b)); n != 1 {
		t.Errorf("%s delivered %d times across the restarts", b.ID, n)
	}
}

// Only one gateway runs on a state directory; a file in the way of the
// control socket is refused and left alone.
func TestCLIGatewayExclusive(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.start(opPublishes(false, 0, ""))
	pid := g.cmd.Process.Pid
	opWait(t, "the researcher's session_started event", func() (bool, string) {
		evs := g.events("--type", "session_*")
		return len(evs) == 1, fmt.Sprintf("%+v", evs)
	})
	if st := g.status(); st.PID != pid || st.Socket != filepath.Join(g.state, "control.sock") || st.StateFile != filepath.Join(g.state, "bcpgw.db") {
		t.Errorf("status: %+v", st)
	}
	// BCPGW_STATE finds it without --state; --state wins over it.
	r := run(t, runOpts{env: []string{"BCPGW_STATE=" + g.state}}, "status", "--json")
	if r.code != 0 {
		t.Fatalf("status with BCPGW_STATE: %s", r)
	}
	var st control.Status
	if opJSON(t, r.stdout, &st); st.PID != pid {
		t.Errorf("status with BCPGW_STATE answers from pid %d; want %d", st.PID, pid)
	}
	if r := run(t, runOpts{env: []string{"BCPGW_STATE=" + opStateDir(t)}}, "status", "--state", g.state); r.code != 0 {
		t.Errorf("status --state with another BCPGW_STATE: %s", r)
	}
	if r := run(t, runOpts{env: []string{"BCPGW_STATE=" + g.state}}, "status", "--state", opStateDir(t)); r.code != 3 {
		t.Errorf("status --state on an empty directory with BCPGW_STATE on the gateway's: %s", r)
	}

	r = run(t, runOpts{env: append(slices.Clone(opEnv), "PUB=[]")}, "run", "--agents", g.agents, "--state", g.state)
	if r.code != 1 || !strings.Contains(r.stderr, "another bcpgw is running") {
		t.Errorf("a second bcpgw run on the same state: want exit 1 saying another bcpgw runs\n%s", r)
	}
	// The first is undisturbed.
	if st := g.status(); st.PID != pid {
		t.Errorf("after the second run, status answers from pid %d; want %d", st.PID, pid)
	}
	if r := g.ok("report"); strings.TrimSpace(r.stdout) != "No Controller sessions recorded yet." {
		t.Errorf("report with no deliveries:\n%s", r)
	}
	if r := g.ok("approvals", "list"); strings.TrimSpace(r.stdout) != "No pending approval items." {
		t.Errorf("approvals list with none:\n%s", r)
	}
	if evs := g.events("--type", "session_*"); len(evs) != 1 || evs[0].Agent != "researcher" {
		t.Errorf("the second run started sessions: %+v", evs)
	}

	// A regular file where the socket goes.
	other := opStateDir(t)
	sock := filepath.Join(other, "control.sock")
	if err := os.WriteFile(sock, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = run(t, runOpts{env: append(slices.Clone(opEnv), "PUB=[]")}, "run", "--agents", g.agents, "--state", other)
	if r.code != 1 || !strings.Contains(r.stderr, sock+" exists and is not a socket") || !strings.Contains(r.stderr, "move it away") {
		t.Errorf("bcpgw run with a file at control.sock: want exit 1 and a clear refusal\n%s", r)
	}
	if b, err := os.ReadFile(sock); err != nil || string(b) != "keep me" {
		t.Errorf("the file at control.sock was touched: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(other, "bcpgw.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused run created its state: %v", err)
	}
	if r := run(t, runOpts{env: opEnv}, "status", "--state", other); r.code != 3 {
		t.Errorf("status with a file at control.sock: %s", r)
	}
	// The first gateway still answers.
	g.ok("status")
}

// Two gateways started at the same moment on one state directory: exactly
// one runs, the other exits 1, and the survivor keeps its socket.
func TestCLIConcurrentRunsOneWins(t *testing.T) {
	t.Parallel()
	for round := range 4 {
		g := newOpEnv(t)
		if round%2 == 1 {
			g.start("[]") // an existing state directory
			g.stop()
		}
		var procs [2]*exec.Cmd
		var errs [2]testproc.Buffer
		exited := make(chan int, 2)
		for i := range procs {
			cmd := exec.Command(bin, "run", "--agents", g.agents, "--state", g.state)
			cmd.Env = append(baseEnv(), "PUB=[]", "BCPGW_STATE=")
			cmd.Stderr = &errs[i]
			procs[i] = cmd
		}
		for i, cmd := range procs {
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { _ = cmd.Wait(); exited <- i }()
		}
		loser := -1
		select {
		case loser = <-exited:
		case <-time.After(opTimeout):
			t.Fatalf("round %d: neither run exited", round)
		}
		winner := procs[1-loser]
		if code := procs[loser].ProcessState.ExitCode(); code != 1 || !strings.Contains(errs[loser].String(), "another bcpgw is running") {
			t.Errorf("round %d: the losing run exited %d:\n%s", round, code, errs[loser].String())
		}
		opWait(t, "the winner to answer", func() (bool, string) {
			r := g.bcpgw("status", "--json")
			if r.code != 0 {
				return false, r.String()
			}
			var st control.Status
			opJSON(t, r.stdout, &st)
			return st.PID == winner.Process.Pid, r.stdout
		})
		_ = winner.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(opTimeout):
			t.Fatalf("round %d: the winner did not stop", round)
		}
	}
}
