package tui

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// manyItems are n pending items, oldest first, named ap-0000 on.
func manyItems(n int) []control.Approval {
	items := make([]control.Approval, n)
	for i := range items {
		items[i] = item(fmt.Sprintf("ap-%04d", i), time.Duration(n-i)*time.Second, 3, "scout", "planner", `{"summary":"x"}`)
		items[i].SubscriptionID = fmt.Sprintf("sub-%04d", i)
	}
	return items
}

// wantPages checks the approvals.list calls made so far: pending items,
// a page at most, from these cursors.
func wantPages(t *testing.T, gw *fakeGateway, cursors ...int64) {
	t.Helper()
	calls := gw.pageCalls()
	var got []int64
	for _, p := range calls {
		got = append(got, p.Cursor)
		if p.Status != "pending" || p.Limit != pageSize {
			t.Errorf("approvals.list %+v: want pending items, %d at most", p, pageSize)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(cursors) {
		t.Errorf("approvals.list cursors %v, want %v", got, cursors)
	}
}

// The queue reads the first page only, says more follow, and reads the
// next page as the cursor nears the end of what is loaded, until the
// last.
func TestListLoadsPagesAsTheCursorNearsTheEnd(t *testing.T) {
	gw := newGateway(manyItems(250)...)
	q := startQueue(t, gw, Config{})
	q.waitFor("100+ pending", "sub-0000")
	q.settle()
	wantPages(t, gw, 0)

	for range 100 - prefetch - 1 { // just short of the prefetch margin
		q.key("down")
	}
	q.settle()
	wantPages(t, gw, 0)
	q.key("down")
	q.waitFor("200+ pending")
	wantPages(t, gw, 0, 100)

	for range 100 {
		q.key("down")
	}
	q.waitFor("250 pending")
	q.settle()
	wantPages(t, gw, 0, 100, 200)
	for range 80 { // past the last
		q.key("down")
	}
	sc := q.waitFor("> ap-0249")
	if !strings.Contains(sc, "250 pending") {
		t.Errorf("want every item loaded:\n%s", sc)
	}
	q.settle()
	wantPages(t, gw, 0, 100, 200) // nothing more to read
}

// A new item is read from the end of the queue when everything before it
// is loaded, and not at all while pages remain to be read (it comes with
// them). Decided items leave the list without a read.
func TestNewItemsReadFromTheEnd(t *testing.T) {
	gw := newGateway(manyItems(3)...)
	q := startQueue(t, gw, Config{})
	q.waitFor("3 pending")
	n := item("ap-0100", time.Second, 1, "sensor", "planner", `{"door_open":true}`)
	gw.add(n)
	q.waitFor("4 pending", "sensor → planner")
	wantPages(t, gw, 0, 3)
	gw.remove("ap-0001", "approval_rejected")
	q.waitFor("3 pending")
	q.settle()
	wantPages(t, gw, 0, 3)

	big := newGateway(manyItems(150)...)
	q = startQueue(t, big, Config{})
	q.waitFor("100+ pending")
	big.add(n)
	big.remove("ap-0000", "approval_approved")
	q.waitFor("99+ pending")
	q.settle()
	wantPages(t, big, 0)
}

// An item decided while a page was being read does not come back with
// that page, although the page was read before the decision.
func TestDecidedDuringAFetchStaysGone(t *testing.T) {
	gw := newGateway(manyItems(3)...)
	q := startQueue(t, gw, Config{})
	q.waitFor("3 pending")

	read, release := gw.holdPages()
	gw.add(item("ap-0100", time.Second, 1, "sensor", "planner", `{"door_open":true}`))
	<-read // the page with ap-0100 is read, not yet answered
	gw.remove("ap-0100", "approval_expired")
	// The notification is handled before the answer.
	testproc.Eventually(t, "the notification handled", func() bool {
		q.s.mu.Lock()
		defer q.s.mu.Unlock()
		return q.s.m.gone["ap-0100"]
	})
	release()
	testproc.Eventually(t, "the answer handled", func() bool {
		q.s.mu.Lock()
		defer q.s.mu.Unlock()
		return !q.s.m.fetching
	})
	if m := q.s.model(); len(m.items) != 3 || m.indexOf("ap-0100") >= 0 {
		t.Errorf("the item decided during the read is listed: %d items", len(m.items))
	}
	q.waitFor("3 pending")
}

// After a reconnection the list is read again as far as it reached, so
// the reviewer keeps their place.
func TestReconnectReadsAsFarAsLoaded(t *testing.T) {
	gw := newGateway(manyItems(350)...)
	q := startQueue(t, gw, Config{Retry: 10 * time.Millisecond})
	q.waitFor("100+ pending")
	for range 150 {
		q.key("down")
	}
	q.waitFor("> ap-0150", "200+ pending")

	gw.setDown(errors.New("connect: connection refused"))
	gw.drop()
	q.waitFor("gateway not running")
	gw.setDown(nil)
	q.waitFor("200+ pending · live")
	sc := q.waitFor("> ap-0150")
	// The header says live once connected, before the list is read
	// again: wait for the reads.
	testproc.Eventually(t, "the list read again", func() bool { return len(gw.pageCalls()) >= 4 })
	q.settle()
	wantPages(t, gw, 0, 100, 0, 100)
	if !strings.Contains(sc, "sub-0150") {
		t.Errorf("the cursor left its item:\n%s", sc)
	}
}
