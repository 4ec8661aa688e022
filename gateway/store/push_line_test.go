package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestBatchClosedBeforeItsLineIsTooLong: a push that would take the open
// batch's delivery line past BatchMaxLine closes the batch without it and
// opens the next; sizes are bytes, so 4-byte characters count as four.
func TestBatchClosedBeforeItsLineIsTooLong(t *testing.T) {
	s := newStore(t)
	big := strings.Repeat("\U0001F600", 10<<10) // 40 KiB, 10 Ki characters
	w := BatchLineWeight(push("dl-x", big, 0, 1))
	policy := func(at time.Duration) PushPolicy {
		p := batched(1000, 1<<20, at)
		p.BatchMaxLine = 2*w + w/2
		return p
	}
	var outs []PushOutcome
	for i, id := range []string{"dl-0", "dl-1", "dl-2"} {
		at := time.Duration(i) * time.Second
		outs = append(outs, addPush(t, s, push(id, big, at, 1), policy(at)))
	}
	if outs[0].ClosedBefore != nil || outs[1].ClosedBefore != nil || outs[1].Opened {
		t.Fatalf("the first two pushes: %+v, %+v, want one batch", outs[0], outs[1])
	}
	b := outs[2].ClosedBefore
	if b == nil || len(b.Items) != 2 || b.ID != outs[0].Delivery.BatchID || outs[2].Closed != nil {
		t.Fatalf("the third push closed %+v, want the batch of 2 before it", b)
	}
	if !outs[2].Opened || outs[2].Delivery.BatchID == b.ID {
		t.Errorf("the third push: %+v, want it in a new batch", outs[2])
	}
	if bs := mustOpenBatches(t, s); len(bs) != 1 || bs[0].Items != 1 {
		t.Errorf("OpenBatches = %+v, want the third push's", bs)
	}
}

// TestDebounceLeavesAPushAlreadySent: a pending push that was sent to
// the Controller's runtime before (its session ended before the
// acknowledgment, or a previous run of the gateway was killed) may have
// been acted on: a newer push with its key is delivered after it, it is
// never superseded, whatever the courier of this run says.
func TestDebounceLeavesAPushAlreadySent(t *testing.T) {
	s := newStore(t)
	addPush(t, s, push("dl-0", "a", 0, 1), debounced("a", 0, claimAll))
	s.MarkAttempted("dl-0", Event{Time: t0, Kind: "delivery_sent", Agent: "main", Peer: "researcher"})
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := addPush(t, s, push("dl-1", "a", time.Second, 1), debounced("a", time.Second, claimAll))
	if out.Superseded != nil {
		t.Errorf("the push already sent was superseded: %+v", out.Superseded)
	}
	if got := pendingIDs(t, s); len(got) != 2 {
		t.Errorf("pending %v, want both", got)
	}
}
