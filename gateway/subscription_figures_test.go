package gateway

import (
	"reflect"
	"testing"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// Each subscription's figures, in the report (over the control socket)
// and in the metrics: pushes by outcome, refusals by code, bits charged.
// A refusal naming a subscription that does not exist counts nowhere
// per subscription: a Reader cannot grow the figures or the labels with
// ids of its own.
func TestSubscriptionFiguresInReportAndMetrics(t *testing.T) {
	tune, reg := withMetrics()
	e := startE2E(t, pair(100000, 100000, "review", nil, map[string]string{
		"PUBLISH": publishes(
			pub("research-alerts", "main", `{"has_breaking_news": "yes"}`, 1), // validation_failed
			pub("research-alerts", "main", alert, 3),
			pub("made-up-1", "main", alert, 1), // no such subscription
			pub("made-up-2", "main", alert, 1),
			pub("research-alerts", "nobody", alert, 1)), // no such controller
	}), tune)
	op := serveControl(t, e, controlSocket(t))
	e.prompt("researcher", "hello")
	// Every push has its verdict, so every refusal event is queued for
	// the store (before its verdict); the Flush below commits them.
	e.waitRecords("researcher", "verdict", 7)
	e.waitRecords("main", "applied", 3)
	e.waitAllDelivered(3)

	bits := e.gw.set.Load().Subscription("main", "researcher", "research-alerts").Bits
	want := []control.SubscriptionFigures{{
		Controller: "main", Reader: "researcher", ID: "research-alerts", Accepted: 3, Refused: 1, Delivered: 3, Bits: 3 * bits,
		RefusedBy: map[string]int64{"validation_failed": 1},
	}}
	var got []control.SubscriptionFigures
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		if err := e.gw.cfg.Store.Flush(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		r, err := op.cl.Report(testCtx(t), control.ReportParams{})
		if err != nil {
			t.Fatal(err)
		}
		got = r.Subscriptions
		return reflect.DeepEqual(got, want)
	}) {
		t.Fatalf("report's subscriptions =\n%+v\nwant\n%+v", got, want)
	}
	if refused := e.events("refused", ""); len(refused) != 4 {
		t.Errorf("%d refusals audited, want 4 (the made-up ids are refused, just not counted per subscription)", len(refused))
	}

	labels := map[string]string{"controller": "main", "reader": "researcher", "subscription": "research-alerts"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for k, v := range labels {
			m[k] = v
		}
		return m
	}
	waitMetric(t, reg, "bcpgw_subscription_pushes_total", with("outcome", "accepted"), 3)
	waitMetric(t, reg, "bcpgw_subscription_pushes_total", with("outcome", "delivered"), 3)
	waitMetric(t, reg, "bcpgw_subscription_pushes_total", with("outcome", "refused"), 1)
	waitMetric(t, reg, "bcpgw_subscription_refusals_total", with("code", "validation_failed"), 1)
	waitMetric(t, reg, "bcpgw_subscription_bits_total", labels, 3*bits)
	for _, id := range []string{"made-up-1", "made-up-2"} {
		if _, ok := metricValue(t, reg, "bcpgw_subscription_pushes_total", map[string]string{"subscription": id}); ok {
			t.Errorf("a label for the Reader's made-up subscription %q", id)
		}
	}
	if _, ok := metricValue(t, reg, "bcpgw_subscription_pushes_total", map[string]string{"controller": "nobody"}); ok {
		t.Error("a label for the Reader's made-up controller")
	}
}
