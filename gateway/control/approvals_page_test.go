package control

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// approvalsOf makes n items numbered from seq first, each with a
// directive of size bytes of c.
func approvalsOf(first, n, size int, c string) []Approval {
	out := make([]Approval, n)
	for i := range out {
		a := cannedApproval
		a.Seq, a.ID = int64(first+i), fmt.Sprintf("ap-%d", first+i)
		a.Directive = strings.Repeat(c, size)
		out[i] = a
	}
	return out
}

// A page is cut by size as well as by count: items whose JSON is large
// (a directive of "<", six bytes each once escaped) come a few per page,
// no answer line reaches the client's limit, and the pages hold them
// all.
func TestApprovalsListCutBySize(t *testing.T) {
	fb := newFakeBackend()
	// About 9 MiB of JSON (over the budget alone), then two of about 6
	// MiB (one per page), then small ones packed after the last big one.
	big := append(approvalsOf(1, 1, 3<<19, "<"), approvalsOf(2, 2, 1<<20, "<")...)
	small := approvalsOf(4, 30, 100, "a")
	fb.approvals = append(big, small...)
	ts := startServer(t, fb, ServerConfig{})

	// On the wire: every line under the bound, every page's items within
	// maxApprovalsPageBytes unless it holds one item.
	rc := dialRaw(t, ts.path)
	var ids []string
	var cursor int64
	for id := 1; ; id++ {
		rc.writeLine(reqLine(id, MethodApprovalsList, ApprovalsParams{Cursor: cursor}))
		line := rc.readLine()
		if len(line) >= maxResponseLine {
			t.Fatalf("an answer of %d bytes, past the client's limit of %d", len(line), maxResponseLine)
		}
		var resp struct {
			Result wireApprovalsPage `json:"result"`
			Error  *Error            `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &resp); err != nil || resp.Error != nil {
			t.Fatalf("answer: %v %v", err, resp.Error)
		}
		size := 0
		for _, raw := range resp.Result.Items {
			size += len(raw)
			var a Approval
			if err := json.Unmarshal(raw, &a); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, a.ID)
		}
		if n := len(resp.Result.Items); n == 0 || (n > 1 && size > maxApprovalsPageBytes) {
			t.Fatalf("a page of %d items and %d bytes", n, size)
		}
		if len(line) > 2*maxApprovalsPageBytes {
			t.Fatalf("an answer of %d bytes", len(line))
		}
		if resp.Result.Next == 0 {
			break
		}
		if resp.Result.Next != int64(len(ids)) {
			t.Fatalf("next = %d after %d items", resp.Result.Next, len(ids))
		}
		cursor = resp.Result.Next
	}
	if len(ids) != len(fb.approvals) || ids[0] != "ap-1" || ids[len(ids)-1] != "ap-33" {
		t.Fatalf("paged through %d items (%v ... ), want %d", len(ids), ids[:min(len(ids), 3)], len(fb.approvals))
	}
	if pages := len(fb.callsOf("Approvals")); pages != 3 {
		t.Errorf("%d pages; want 3 (each big item alone, the last with the small ones)", pages)
	}

}

// The limit's default and cap, the lookahead that sets Next, refused
// params; Client.Approvals reads every page.
func TestApprovalsListLimits(t *testing.T) {
	fb := newFakeBackend()
	fb.approvals = approvalsOf(1, 2500, 10, "a")
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)
	for _, tt := range []struct {
		p        ApprovalsParams
		wantLen  int
		wantNext int64
	}{
		{ApprovalsParams{}, DefaultApprovalsPage, DefaultApprovalsPage},
		{ApprovalsParams{Limit: 5000}, MaxApprovalsPage, MaxApprovalsPage},
		{ApprovalsParams{Limit: 7, Cursor: 10}, 7, 17},
		{ApprovalsParams{Limit: 10, Cursor: 2490}, 10, 0}, // exactly the rest: no next
		{ApprovalsParams{Limit: 10, Cursor: 2495}, 5, 0},
		{ApprovalsParams{Cursor: 2500}, 0, 0},
	} {
		page, err := cl.ApprovalsPage(ctx, tt.p)
		if err != nil {
			t.Fatalf("%+v: %v", tt.p, err)
		}
		if len(page.Items) != tt.wantLen || page.Next != tt.wantNext || page.Items == nil {
			t.Errorf("%+v: %d items, next %d; want %d, next %d", tt.p, len(page.Items), page.Next, tt.wantLen, tt.wantNext)
		}
	}
	all, err := cl.Approvals(ctx, "all")
	if err != nil || len(all) != len(fb.approvals) || all[2499].ID != "ap-2500" {
		t.Fatalf("Client.Approvals: %d items, %v; want %d", len(all), err, len(fb.approvals))
	}
	for _, p := range []ApprovalsParams{{Limit: -1}, {Cursor: -5}} {
		_, err := cl.ApprovalsPage(ctx, p)
		wantCode(t, err, CodeInvalidParams)
	}
	_, err = cl.Events(ctx, EventsParams{Agent: strings.Repeat("x", 300)})
	wantCode(t, err, CodeInvalidParams)
}

// A subscription with an agent is notified of that agent's events only:
// the filter reaches the backend's query, which the store runs in SQL.
func TestSubscribeAgent(t *testing.T) {
	fb := newFakeBackend()
	ts := startServer(t, fb, ServerConfig{})
	cl := dial(t, ts.path)
	ctx := callCtx(t)
	since := int64(0)
	res, err := cl.Subscribe(ctx, SubscribeParams{Since: &since, Agent: "agent-approval_queued", Types: []string{"approval_*"}})
	if err != nil {
		t.Fatal(err)
	}
	fb.addEvents("agent_started", "approval_queued", "approval_expired", "approval_queued") // agents are "agent-" + kind
	evs := notesFor(t, cl, res.Subscription, 2)
	if evs[0].Seq != 2 || evs[1].Seq != 4 {
		t.Errorf("notified of %s, want seqs 2 and 4", seqs(evs))
	}
	calls := fb.callsOf("Events")
	if p := calls[len(calls)-1].Params.(EventsParams); p.Agent != "agent-approval_queued" || len(p.Types) != 1 {
		t.Errorf("the backend was asked %+v, want the agent and the types", p)
	}
	if _, err := cl.Subscribe(ctx, SubscribeParams{Agent: strings.Repeat("x", 300)}); CodeOf(err) != CodeInvalidParams {
		t.Errorf("an agent of 300 bytes: %v, want invalid_params", err)
	}
}
