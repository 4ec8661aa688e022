package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/runtime"
)

// TestBatchDeliveryFitsTheControllersLine: a hostile Reader fills a
// batched Cat-2 subscription with answers of backslashes, which JSON
// doubles, and the prompt doubles again; or of 4-byte characters, which
// the store counted as one each. The batch must still reach main as one
// line its runtime can read (runtime.DefaultMaxLine), not stall or crash
// it until the batch is parked.
func TestBatchDeliveryFitsTheControllersLine(t *testing.T) {
	for name, word := range map[string]string{"backslashes": strings.Repeat(`\`, 48), "emoji": strings.Repeat("\U0001F600", 48)} {
		t.Run(name, func(t *testing.T) { batchLine(t, word) })
	}
}

func batchLine(t *testing.T, word string) {
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	const mainFront = `tools: [BCPQuery]
idle_timeout: 0
turn_timeout: 24h
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 10000000
    subscriptions:
      - id: big
        category: 2
        on_anomaly: deliver
        batch: {window: 5m, max: 40}
        questions:
          - {id: q, question: "What?", max_words: 200, expected_format: short_text}`
	const readerFront = `tools: [BCPPublish]
idle_timeout: 0
turn_timeout: 24h
bcp_channels:
  - peer: main
    role: reader
    max_category: 2
    budget_bits: 10000000`
	words := make([]string, 200)
	for i := range words {
		words[i] = word
	}
	resp, _ := json.Marshal(map[string]string{"q": strings.Join(words, " ")})
	publish := publishes(pub("big", "main", string(resp), 40))
	e := startE2E(t, []agentSpec{
		{name: "main", front: mainFront},
		{name: "researcher", front: readerFront, env: map[string]string{"PUBLISH": publish}},
	}, func(c *Config) { c.Clock = clk })
	e.prompt("researcher", "go")
	e.waitEvent("batch_closed", "")
	var batch *store.Delivery
	for _, d := range e.deliveries() {
		if len(d.Items) > 0 {
			batch = &d
			break
		}
	}
	if batch == nil {
		t.Fatal("no batch stored")
	}
	line, err := json.Marshal(deliveryMessage(nil, batch))
	if err != nil {
		t.Fatal(err)
	}
	if len(line) > runtime.DefaultMaxLine {
		t.Errorf("the batch of %d pushes is a %d-byte line, over the runtime's limit of %d", len(batch.Items), len(line), runtime.DefaultMaxLine)
	}
	e.waitCount("delivery_acked", "", 1)
	if p := e.events("delivery_parked", ""); len(p) > 0 {
		t.Errorf("parked: %+v", p[0])
	}
}

// TestBatchedPushesCountedInSubscriptionMetrics: pushes of a batched
// subscription are accepted like any other, and the per-subscription
// metrics say so, with their bits, as the report does.
func TestBatchedPushesCountedInSubscriptionMetrics(t *testing.T) {
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	tune, reg := withMetrics()
	e := startE2E(t, debounceBatchPair("", batchedPushes(5)), func(c *Config) { tune(c); c.Clock = clk })
	e.prompt("researcher", "go")
	e.waitRecords("researcher", "verdict", 5)
	e.waitCount("delivery_acked", "", 1)
	labels := map[string]string{"controller": "main", "reader": "researcher", "subscription": "batched"}
	waitMetric(t, reg, "bcpgw_subscription_pushes_total", map[string]string{"controller": "main", "reader": "researcher",
		"subscription": "batched", "outcome": "accepted"}, 5)
	waitMetric(t, reg, "bcpgw_subscription_bits_total", labels, 5*10)
}
