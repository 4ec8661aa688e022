package gateway

import (
	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
)

// budgets tracks what each session has spent (PROTOCOL.md section 6). It
// is not safe for concurrent use: the router guards it with its mutex.
//
// A Controller's pool belongs to its current session, and a push that
// arrives while the Controller has no session is charged to the session
// that will be started for it. So a Controller's ledger is opened unbound,
// binds to the next session that starts, and is replaced by a fresh one
// once that session has ended. A Reader's ledger binds to the session that
// publishes, since only a live session can.
type budgets struct {
	controllers map[string]*ledger
	readers     map[string]*ledger
}

// lifetime is what a ledger needs of the session it belongs to: its
// agent, and whether it has ended. A *session.Session is one; the ledger
// tests use sessions with no process.
type lifetime interface {
	Name() string
	Ended() bool
}

// ledger is one session's spending, by peer.
type ledger struct {
	sess lifetime // nil until bound
	bits map[string]float64
	cat2 map[string]int // queries sent, by reader
	cat3 map[string]int
}

func newBudgets() *budgets {
	return &budgets{controllers: map[string]*ledger{}, readers: map[string]*ledger{}}
}

func newLedger(s lifetime) *ledger {
	return &ledger{sess: s, bits: map[string]float64{}, cat2: map[string]int{}, cat3: map[string]int{}}
}

// started binds the agent's unbound Controller ledger to its new session.
func (b *budgets) started(s lifetime) {
	l := b.controller(s.Name())
	if l.sess == nil {
		l.sess = s
	}
}

// controller returns the ledger of the Controller's current or next
// session.
func (b *budgets) controller(name string) *ledger {
	l := b.controllers[name]
	if l == nil || (l.sess != nil && l.sess.Ended()) {
		l = newLedger(nil)
		b.controllers[name] = l
	}
	return l
}

// reader returns the ledger of the Reader session s.
func (b *budgets) reader(s lifetime) *ledger {
	l := b.readers[s.Name()]
	if l == nil || l.sess != s {
		l = newLedger(s)
		b.readers[s.Name()] = l
	}
	return l
}

// remaining returns what is left on both sides of a push over link from
// the Reader session s.
func (b *budgets) remaining(link *agents.Link, s lifetime) Remaining {
	c, r := b.controller(link.Controller.Name), b.reader(s)
	return Remaining{
		Controller: float64(link.ControllerSide.BudgetBits) - c.bits[link.Reader.Name],
		Reader:     float64(link.ReaderSide.BudgetBits) - r.bits[link.Controller.Name],
	}
}

// admitPush checks a validated push against both budgets of link and, if
// they afford it, charges it, in one step: the caller holds the gateway's
// lock across both, so two pushes cannot both spend the last bits. A push
// they cannot afford is refused in v (budget_exhausted). It returns who
// paid for an accepted push (zero for a refused one).
func (b *budgets) admitPush(link *agents.Link, s lifetime, v *Verdict) payment {
	v.Afford(b.remaining(link, s))
	if !v.Accepted() {
		return payment{}
	}
	return b.chargePush(link, s, v.Charged())
}

// chargePush charges an accepted push to both sides.
func (b *budgets) chargePush(link *agents.Link, s lifetime, bits float64) payment {
	c, r := b.controller(link.Controller.Name), b.reader(s)
	c.bits[link.Reader.Name] += bits
	r.bits[link.Controller.Name] += bits
	return payment{controller: c, reader: r, peerC: link.Reader.Name, peerR: link.Controller.Name, bits: bits}
}

// payment is who paid for a push: the ledgers it was charged to, kept so
// that a refund goes back to them. Looked up again later, the ledgers
// could be those of sessions started since, which never paid.
type payment struct {
	controller, reader *ledger
	peerC, peerR       string // the ledgers' keys: the Reader's name, the Controller's
	bits               float64
}

// refund gives back what p charged: the push was not kept by the store,
// or a newer one superseded it before it was delivered. The caller holds
// the lock that guards the budgets. A ledger whose session has ended
// takes the refund too, where nobody reads it again.
func (p payment) refund() {
	if p.controller == nil {
		return
	}
	p.controller.bits[p.peerC] -= p.bits
	p.reader.bits[p.peerR] -= p.bits
}

// admitQuery checks a query of spec's category and bits from the
// Controller session s over link, and charges it if admitted.
func (b *budgets) admitQuery(link *agents.Link, s lifetime, cat bcp.Category, bits float64) *bcp.Error {
	c := b.controller(s.Name())
	if c.sess == nil {
		c.sess = s
	}
	reader := link.Reader.Name
	side := link.ControllerSide
	switch {
	case cat == bcp.Cat2 && c.cat2[reader] >= side.MaxCat2Queries:
		return bcp.Errorf(bcp.QueryLimit, "Cat-2 query limit reached for channel to '%s': %d of %d used this session", reader, c.cat2[reader], side.MaxCat2Queries)
	case cat == bcp.Cat3 && c.cat3[reader] >= side.MaxCat3Queries:
		return bcp.Errorf(bcp.QueryLimit, "Cat-3 query limit reached for channel to '%s': %d of %d used this session", reader, c.cat3[reader], side.MaxCat3Queries)
	}
	if left := float64(side.BudgetBits) - c.bits[reader]; bits > left {
		return bcp.Errorf(bcp.BudgetExhausted, "Bandwidth budget exhausted for channel to '%s': the query costs %s, this session has %s left",
			reader, bcp.FormatBits(bits), bcp.FormatBits(left))
	}
	c.bits[reader] += bits
	switch cat {
	case bcp.Cat2:
		c.cat2[reader]++
	case bcp.Cat3:
		c.cat3[reader]++
	}
	return nil
}
