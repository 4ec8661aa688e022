package gateway

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

func TestDeliveryIsRedeliveredAfterControllerCrash(t *testing.T) {
	// main's first process dies on its first delivery, before result.
	e := startE2E(t, pair(100000, 100000, "review", map[string]string{"CRASH_AT": "1"}, map[string]string{
		"PUBLISH": publishes(pub("research-alerts", "main", alert, 2)),
	}), nil)
	e.prompt("researcher", "go")
	applied := e.waitRecords("main", "applied", 2)
	deliveries := e.records("main", "delivery")
	if len(deliveries) < 3 {
		t.Fatalf("deliveries = %+v, want the first one twice", deliveries)
	}
	first, again := deliveries[0], deliveries[1]
	if first.Redelivered || !again.Redelivered || again.DeliveryID != first.DeliveryID || again.Pid == first.Pid {
		t.Errorf("first %+v, then %+v: want the same delivery_id again, marked redelivered, in a new process", first, again)
	}
	if applied[0].DeliveryID != first.DeliveryID || applied[1].DeliveryID == first.DeliveryID {
		t.Errorf("applied %+v, want the first delivery then the second, once each", applied)
	}
	e.waitEvent("delivery_retried", "")
	e.waitEvent("session_crashed", "")
}

func TestDeliveriesPendingFromAnEarlierRunAreSentAndRevokedOnesDropped(t *testing.T) {
	var kept, revoked store.Delivery
	e := startE2E(t, pair(100000, 100000, "review", nil, nil), func(c *Config) {
		ctx := context.Background()
		kept = store.Delivery{Controller: "main", Reader: "researcher", SubscriptionID: "research-alerts", Category: 1,
			Response: json.RawMessage(`{"has_breaking_news":true,"priority":"low","score":1,"source":"web"}`), Bits: 6.9, CreatedAt: time.Now()}
		revoked = kept
		revoked.SubscriptionID = "gone"
		for _, d := range []*store.Delivery{&revoked, &kept} {
			if err := c.Store.AddDelivery(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		c.Store.MarkAttempted(kept.ID) // sent once before the "crash"
		// Writes commit in order: once this one is durable, so is the mark.
		if err := c.Store.AppendSync(ctx, store.Event{Time: time.Now(), Kind: "test_barrier"}); err != nil {
			t.Fatal(err)
		}
	})
	applied := e.waitRecords("main", "applied", 1)
	d := e.records("main", "delivery")
	if len(d) != 1 || d[0].DeliveryID != kept.ID || !d[0].Redelivered || applied[0].DeliveryID != kept.ID {
		t.Fatalf("deliveries = %+v, want only %s, redelivered", d, kept.ID)
	}
	ev := e.waitEvent("dropped_revoked", "")
	if ev[0].Ref != revoked.ID {
		t.Errorf("dropped_revoked event = %+v, want ref %s", ev[0], revoked.ID)
	}
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		got, err := e.store.Delivery(context.Background(), revoked.ID)
		return err == nil && got.State == store.DeliveryDropped
	}) {
		t.Error("revoked delivery not marked dropped")
	}
}
