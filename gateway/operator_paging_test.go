package gateway

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// clientLineLimit is control.Client's line limit (maxResponseLine in
// gateway/control/client.go): an answer longer than that ends the
// client's connection.
const clientLineLimit = 64 << 20

// writePendingItems stores n pending items of main's digest subscription
// in the state file at path, before a gateway opens it, each with the
// same response of about size bytes, and returns their ids in queue
// order. One statement: item by item, even in one transaction, it takes
// half a minute under -race.
func writePendingItems(t *testing.T, path string, n, size int) []string {
	t.Helper()
	st, err := store.Open(path) // creates the file and its schema
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	response := fmt.Sprintf(`{"summary":"%s"}`, strings.Repeat("x", size))
	now := time.Now()
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
		INSERT INTO approvals (id, controller, reader, subscription_id, category, directive, response, sha256, bits, created_at, expires_at)
		SELECT printf('ap-%07d', i), 'main', 'researcher', 'digest', 3, 'Summarize what changed today.', ?, ?, 1100, ?, ? FROM n`,
		n, response, store.ContentHash([]byte(response)), now.UnixMilli(), now.Add(24*time.Hour).UnixMilli()); err != nil {
		t.Fatalf("store %d items: %v", n, err)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("ap-%07d", i)
	}
	return ids
}

// 70,000 pending items hold about 70 MiB of JSON: as one answer, past the
// client's 64 MiB line limit (bufio.Scanner: token too long). Over a
// real socket, from a real store, approvals.list pages them: a call
// without a limit gets the first DefaultApprovalsPage items and a
// cursor, no answer line comes near the limit, and following the
// cursors yields every item once, in queue order. (Under -race this test
// takes about a minute: SQLite reads 70 MiB through the race detector.)
func TestOperatorApprovalsListPages70k(t *testing.T) {
	if testing.Short() {
		t.Skip("stores 70,000 items")
	}
	const n = 70000
	dir := t.TempDir()
	set, vars := writeAgents(t, dir, digests(1))
	ids := writePendingItems(t, filepath.Join(dir, "bcpgw.db"), n, 700)
	e := runE2E(t, dir, set, vars, nil)
	op := serveControl(t, e, controlSocket(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The JSON of all the items is past the client's limit: unpaged, the
	// answer could not be read.
	first, err := op.cl.ApprovalsPage(ctx, control.ApprovalsParams{})
	if err != nil {
		t.Fatalf("approvals.list without a limit: %v", err)
	}
	if len(first.Items) != control.DefaultApprovalsPage || first.Next != first.Items[len(first.Items)-1].Seq {
		t.Fatalf("first page: %d items, next %d; want %d and the last one's seq", len(first.Items), first.Next, control.DefaultApprovalsPage)
	}
	one, err := json.Marshal(first.Items[0])
	if err != nil {
		t.Fatal(err)
	}
	if total := n * len(one); total <= clientLineLimit {
		t.Fatalf("the items take about %d bytes of JSON, within the client's limit: the test proves nothing", total)
	}

	// On the wire, the largest pages (MaxApprovalsPage items) stay far
	// below the limit, and together hold every item once, in order.
	c, err := net.Dial("unix", op.path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 1<<20)
	longest, pages, got := 0, 0, 0
	var cursor int64
	for id := 1; ; id++ {
		req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": control.MethodApprovalsList,
			"params": control.ApprovalsParams{Limit: 100000, Cursor: cursor}})
		if _, err := c.Write(append(req, '\n')); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(testWait))
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read page %d: %v", pages+1, err)
		}
		longest, pages = max(longest, len(line)), pages+1
		var resp struct {
			Result control.ApprovalsPage `json:"result"`
			Error  *control.Error        `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &resp); err != nil || resp.Error != nil {
			t.Fatalf("page %d: %v %v", pages, err, resp.Error)
		}
		if len(resp.Result.Items) > control.MaxApprovalsPage {
			t.Fatalf("page %d holds %d items, over MaxApprovalsPage", pages, len(resp.Result.Items))
		}
		for _, a := range resp.Result.Items {
			if got >= n || a.ID != ids[got] || a.Status != "pending" {
				t.Fatalf("item %d is %s (%s), want %s", got, a.ID, a.Status, ids[min(got, n-1)])
			}
			got++
		}
		if resp.Result.Next == 0 {
			break
		}
		cursor = resp.Result.Next
	}
	if want := n / control.MaxApprovalsPage; pages != want {
		t.Errorf("%d pages of at most %d items, want %d", pages, control.MaxApprovalsPage, want)
	}
	if longest > clientLineLimit/16 {
		t.Errorf("the longest answer is %d bytes; want it far below the client's %d", longest, clientLineLimit)
	}
	if got != n {
		t.Errorf("%d items in all the pages, want %d", got, n)
	}
	t.Logf("%d items in %d pages, the longest answer %d bytes", n, pages, longest)
}
