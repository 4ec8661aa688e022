package tui

import (
	"slices"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/gateway/control"
)

// withApprover is a with one more approval counted.
func withApprover(a control.Approval, ap control.Approver) control.Approval {
	a.Approvals = append(slices.Clone(a.Approvals), ap)
	return a
}

// approveElsewhere counts an approval by another operator, as the gateway
// does when one approves from another terminal: the item stays pending
// and an approval_partial event follows.
func (g *fakeGateway) approveElsewhere(id, user string, uid int) {
	g.mu.Lock()
	for i, a := range g.items {
		if a.ID == id {
			g.items[i] = withApprover(a, control.Approver{User: user, UID: uid, PID: 7, At: now})
		}
	}
	g.mu.Unlock()
	g.notify("approval_partial", id)
}

// An item that needs several approvals shows how far it is, follows the
// approvals of other operators live, and stays in the queue when this
// reviewer's approval is not the last one needed.
func TestQuorumProgress(t *testing.T) {
	items := threeItems()
	items[1].Required = 3 // ap-0003
	gw := newGateway(items...)
	q := startQueue(t, gw, Config{})
	sc := q.waitFor("3 pending", "news-feed (0/3)")
	if l := lineWith(t, sc, "ap-0007"); strings.Contains(l, "/") {
		t.Errorf("an item that needs one approval shows a count: %q", l)
	}

	q.key("enter")
	q.waitFor("ap-0003  Cat-3 subscription news-feed", "0 of 3 approvals")
	gw.approveElsewhere("ap-0003", "alice", 1001)
	q.waitFor("1 of 3 approvals (alice)")

	q.key("G") // to the end of the item, so that it may be approved
	q.key("a")
	q.waitFor("Deliver ap-0003 to planner?")
	q.key("y")
	q.waitFor("Approved ap-0003: 2 of 3 approvals, waits for another operator.", "3 pending", "news-feed (2/3)")
	if ap, _ := gw.calls(); len(ap) != 1 || ap[0].ID != "ap-0003" {
		t.Errorf("approve calls: %+v", ap)
	}

	// The last approval, elsewhere, releases it: it leaves the queue.
	gw.remove("ap-0003", "approval_approved")
	q.waitFor("2 pending")
	q.waitGone("news-feed")
}

// A second approval by the same operator is refused by the gateway; the
// queue says why and keeps the item.
func TestQuorumAlreadyApproved(t *testing.T) {
	items := threeItems()
	items[1].Required = 2
	items[1] = withApprover(items[1], control.Approver{User: "tester", UID: 1000, PID: 1, At: now})
	gw := newGateway(items...)
	gw.setDecideErr(control.Errorf(control.CodeAlreadyApproved, "approval item ap-0003 already has your approval (tester, uid 1000): 1 of 2 approvals; the next must come from another operator (another uid); nothing was changed"))
	q := startQueue(t, gw, Config{})
	q.waitFor("news-feed (1/2)")
	q.key("enter")
	q.waitFor("1 of 2 approvals (tester)")
	q.key("G")
	q.key("a")
	q.waitFor("Deliver ap-0003 to planner?")
	q.key("y")
	q.waitFor("already has your approval")
	q.key("esc")
	q.waitFor("3 pending", "news-feed (1/2)")
}
