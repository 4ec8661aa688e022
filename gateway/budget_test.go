package gateway

import (
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// alert is a valid push on research-alerts: 1 + log2(3) + log2(5) + 2 =
// 6.9 bits, the BCP document's Cat-1 example.
const alert = `{"has_breaking_news": true, "priority": "high", "score": 4, "source": "web"}`

func TestBudgetControllerPoolExhaustsAfterExactlyTheExpectedPushes(t *testing.T) {
	// 20 bits fit two 6.9-bit pushes (13.8) but not a third (20.7).
	e := startE2E(t, pair(20, 100000, "review", nil, map[string]string{
		"PUBLISH": publishes(pub("research-alerts", "main", alert, 5)),
	}), nil)
	e.prompt("researcher", "go")
	verdicts := e.waitRecords("researcher", "verdict", 5)
	for i, v := range verdicts {
		if i < 2 {
			if !v.Success || v.Detail != "Published to controller main (Cat-1, 6.9 bits)" {
				t.Errorf("push %d: %+v, want accepted", i, v)
			}
			continue
		}
		if v.Success || !strings.HasPrefix(v.Detail, "budget_exhausted: Bandwidth budget exhausted for channel to 'main'") ||
			!strings.Contains(v.Detail, "main's session pool has 6.2 bits left") {
			t.Errorf("push %d: %+v, want budget_exhausted on main's pool", i, v)
		}
	}
	e.waitRecords("main", "applied", 2)
	// Refusals are recorded in the background: wait for the third.
	testproc.CheckFor(testWait, pollStep, func() bool { return len(e.events("refused", "budget_exhausted")) >= 3 })
	if n := len(e.events("refused", "budget_exhausted")); n != 3 {
		t.Errorf("%d budget_exhausted events, want 3", n)
	}
}

func TestBudgetReaderCapExhaustsAfterExactlyTheExpectedPushes(t *testing.T) {
	e := startE2E(t, pair(100000, 14, "review", nil, map[string]string{
		"PUBLISH": publishes(pub("research-alerts", "main", alert, 3)),
	}), nil)
	e.prompt("researcher", "go")
	v := e.waitRecords("researcher", "verdict", 3)
	if !v[0].Success || !v[1].Success {
		t.Fatalf("first two pushes refused: %+v", v)
	}
	if v[2].Success || !strings.Contains(v[2].Detail, "this researcher session has 0.2 bits left") {
		t.Errorf("third push: %+v, want the reader's cap exhausted", v[2])
	}
}

func TestBudgetRefusedPushesChargeNothing(t *testing.T) {
	// Invalid pushes first: they must not eat into the 13.8 bits that two
	// valid pushes need.
	e := startE2E(t, pair(14, 14, "review", nil, map[string]string{
		"PUBLISH": publishes(pub("research-alerts", "main", `{"has_breaking_news": 1}`, 3), pub("research-alerts", "main", alert, 2)),
	}), nil)
	e.prompt("researcher", "go")
	v := e.waitRecords("researcher", "verdict", 5)
	for i := range 3 {
		if v[i].Success {
			t.Errorf("invalid push %d accepted", i)
		}
	}
	if !v[3].Success || !v[4].Success {
		t.Errorf("valid pushes after refusals: %+v %+v", v[3], v[4])
	}
}

// The ledger rules of PROTOCOL.md section 6, without processes: a
// Controller's pool is charged before its session exists, belongs to the
// session that starts next, and is fresh for the one after; a Reader's cap
// belongs to the publishing session.
func TestBudgetLedgersFollowSessions(t *testing.T) {
	set := loadPair(t, 20, 100)
	link := set.Link("main", "researcher")
	b := newBudgets()
	reader1 := newFakeSession("researcher")

	// main has no session: the push is charged to the next one.
	b.chargePush(link, reader1, 6.9)
	if got := b.remaining(link, reader1).Controller; got != 13.1 {
		t.Fatalf("pool before main starts = %v, want 13.1", got)
	}
	main1 := newFakeSession("main")
	b.started(main1)
	b.chargePush(link, reader1, 6.9)
	if got := b.remaining(link, reader1); !near(got.Controller, 6.2) || !near(got.Reader, 86.2) {
		t.Fatalf("remaining in main's first session = %+v, want 6.2 and 86.2", got)
	}
	// main's session ends: the next one gets a full pool; the reader's cap
	// stays with its session.
	close(main1.done)
	if got := b.remaining(link, reader1); got.Controller != 20 || !near(got.Reader, 86.2) {
		t.Fatalf("after main's session ended = %+v, want 20 and 86.2", got)
	}
	// A new reader session has a fresh cap.
	if got := b.remaining(link, newFakeSession("researcher")).Reader; got != 100 {
		t.Fatalf("new reader session cap = %v, want 100", got)
	}
}

// A refund goes back to the ledgers that were charged: a push superseded
// (or not kept) after its Controller's session was replaced gives nothing
// to the new session, which never paid for it.
func TestBudgetRefundGoesToWhoPaid(t *testing.T) {
	set := loadPair(t, 20, 100)
	link := set.Link("main", "researcher")
	b := newBudgets()
	reader1, main1 := newFakeSession("researcher"), newFakeSession("main")
	b.started(main1)
	paid := b.chargePush(link, reader1, 6.9)
	close(main1.done)
	b.started(newFakeSession("main"))
	b.chargePush(link, reader1, 3)
	paid.refund()
	if got := b.remaining(link, reader1); got.Controller != 17 || !near(got.Reader, 97) {
		t.Fatalf("after the refund of a push main's first session paid = %+v, want 17 (the new session's own 3) and 97", got)
	}
	var refused Verdict
	refused.Err = bcp.Errorf(bcp.ValidationFailed, "no")
	if p := b.admitPush(link, reader1, &refused); p.controller != nil {
		t.Fatalf("a refused push paid %+v", p)
	}
	payment{}.refund() // a refused push's refund is nothing
}

func TestBudgetQueryLimitsAndPool(t *testing.T) {
	set := loadPair(t, 1000, 1000)
	link := set.Link("main", "researcher")
	b := newBudgets()
	main := newFakeSession("main")
	for i := range 2 {
		if e := b.admitQuery(link, main, bcp.Cat2, 11); e != nil {
			t.Fatalf("Cat-2 query %d refused: %v", i, e)
		}
	}
	if e := b.admitQuery(link, main, bcp.Cat2, 11); e == nil || e.Code != bcp.QueryLimit {
		t.Fatalf("third Cat-2 query: %v, want query_limit", e)
	}
	if e := b.admitQuery(link, main, bcp.Cat3, 1100); e == nil || e.Code != bcp.BudgetExhausted {
		t.Fatalf("Cat-3 query over the pool: %v, want budget_exhausted", e)
	}
	if e := b.admitQuery(link, main, bcp.Cat3, 100); e != nil {
		t.Fatalf("Cat-3 query within the pool: %v", e)
	}
	if e := b.admitQuery(link, main, bcp.Cat3, 100); e == nil || e.Code != bcp.QueryLimit {
		t.Fatalf("second Cat-3 query: %v, want query_limit (max 1)", e)
	}
	// Cat-1 queries are not counted, only charged.
	if e := b.admitQuery(link, main, bcp.Cat1, 7); e != nil {
		t.Fatalf("Cat-1 query: %v", e)
	}
	if got := b.remaining(link, newFakeSession("researcher")).Controller; got != 1000-22-100-7 {
		t.Errorf("pool = %v, want %v", got, 1000-22-100-7)
	}
}

func loadPair(t *testing.T, mainBudget, readerBudget int) *agents.Set {
	t.Helper()
	set, _ := writeAgents(t, t.TempDir(), pair(mainBudget, readerBudget, "review", nil, nil))
	return set
}

// fakeSession is a session with no process, for ledger tests: it ends
// when done is closed.
type fakeSession struct {
	name string
	done chan struct{}
}

func newFakeSession(name string) *fakeSession {
	return &fakeSession{name: name, done: make(chan struct{})}
}

func (s *fakeSession) Name() string { return s.name }

func (s *fakeSession) Ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
