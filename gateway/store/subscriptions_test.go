package store

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// Tagged events add to their subscription's figures in the transaction
// that stores them; untagged ones (a refusal naming an id the gateway did
// not recognize) do not; and the figures outlive the events when
// retention prunes them.
func TestSubscriptionFiguresFollowTaggedEvents(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	push := func(kind, code string, bits float64, sub string) {
		s.Append(Event{Time: t0, Kind: kind, Agent: "researcher", Peer: "main", Code: code, Bits: bits, Ref: sub, Subscription: sub})
	}
	push("publish_accepted", "", 3, "alerts")
	push("publish_accepted", "", 3, "alerts")
	push("publish_accepted", "", 3, "alerts")
	push("push_superseded", "", 3, "alerts") // the third replaced one of them: its bits come off
	push("approval_queued", "", 120.5, "digest")
	push("push_filtered", "", 0, "alerts")
	push("refused", "rate_limited", 0, "alerts")
	push("refused", "rate_limited", 0, "alerts")
	push("refused", "validation_failed", 0, "alerts")
	push("refused", "no_subscription", 0, "") // an id of the Reader's own: not counted
	s.Append(Event{Time: t0, Kind: "delivery_acked", Agent: "main", Peer: "researcher", Subscription: "alerts"})
	s.Append(Event{Time: t0, Kind: "delivery_sent", Agent: "main", Peer: "researcher", Bits: 3, Subscription: "alerts"}) // not a figure
	s.Append(Event{Time: t0, Kind: "publish_accepted", Agent: "scout", Peer: "boss", Bits: 1, Subscription: "alerts"})
	barrier(t, s)

	got, err := s.SubscriptionFigures(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	want := []SubscriptionFigures{
		{Controller: "main", Reader: "researcher", ID: "alerts", Accepted: 3, Filtered: 1, Superseded: 1, Refused: 3, Delivered: 1, Bits: 6,
			RefusedBy: map[string]int64{"rate_limited": 2, "validation_failed": 1}},
		{Controller: "main", Reader: "researcher", ID: "digest", Accepted: 1, Held: 1, Bits: 120.5, RefusedBy: map[string]int64{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("figures of main =\n%+v\nwant\n%+v", got, want)
	}
	all, err := s.SubscriptionFigures(ctx, "")
	if err != nil || len(all) != 3 || all[0].Controller != "boss" {
		t.Fatalf("all figures = %+v, %v; want boss's, then main's two", all, err)
	}

	// Retention takes the events, not the figures.
	if _, err := s.Prune(ctx, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := len(allEvents(t, s)); n != 0 {
		t.Fatalf("%d events left after pruning, want 0", n)
	}
	after, err := s.SubscriptionFigures(ctx, "main")
	if err != nil || !reflect.DeepEqual(after, want) {
		t.Errorf("figures after pruning = %+v, %v; want them unchanged", after, err)
	}
}
