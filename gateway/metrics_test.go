package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/egress"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// withMetrics returns a tune for startE2E that records metrics in a
// fresh registry, and the registry.
func withMetrics() (func(*Config), *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	return func(c *Config) { c.Metrics = m }, reg
}

// metricValue gathers reg and returns the value of the sample of name
// whose labels include want (a counter's or gauge's value, a histogram's
// count), and whether there is one.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue samples
				}
			}
			return sampleValue(f.GetType(), m), true
		}
	}
	return 0, false
}

func sampleValue(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

// waitMetric waits until the sample of name with labels has value want.
func waitMetric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string, want float64) {
	t.Helper()
	var got float64
	var ok bool
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		got, ok = metricValue(t, reg, name, labels)
		return ok && got == want
	}) {
		t.Fatalf("%s%v = %v (present %v), want %v", name, labels, got, ok, want)
	}
}

func TestMetricsCountPushesBitsAndDeliveries(t *testing.T) {
	tune, reg := withMetrics()
	e := startE2E(t, pair(100000, 100000, "review", nil, map[string]string{
		"PUBLISH": publishes(
			pub("research-alerts", "main", `{"has_breaking_news": "yes"}`, 1), // refused
			pub("research-alerts", "main", alert, 2)),
	}), tune)
	e.prompt("researcher", "hello")
	e.waitRecords("main", "applied", 2)

	waitMetric(t, reg, "bcpgw_publishes_total", map[string]string{"outcome": "delivered"}, 2)
	waitMetric(t, reg, "bcpgw_publishes_total", map[string]string{"outcome": "refused", "code": "validation_failed"}, 1)
	waitMetric(t, reg, "bcpgw_refusals_total", map[string]string{"code": "validation_failed"}, 1)
	waitMetric(t, reg, "bcpgw_deliveries_total", map[string]string{"outcome": "acked"}, 2)
	waitMetric(t, reg, "bcpgw_delivery_latency_seconds", nil, 2)
	waitMetric(t, reg, "bcpgw_deliveries_pending", nil, 0)
	waitMetric(t, reg, "bcpgw_sessions", map[string]string{"state": "running"}, 2)
	waitMetric(t, reg, "bcpgw_sessions", map[string]string{"state": "failed"}, 0)

	// Each accepted alert is charged its subscription's bits.
	bits := e.gw.set.Load().Subscription("main", "researcher", "research-alerts").Bits
	got, ok := metricValue(t, reg, "bcpgw_bits_charged_total", map[string]string{"controller": "main", "reader": "researcher", "category": "1"})
	if !ok || got != 2*bits {
		t.Errorf("bits charged = %v (present %v), want %v", got, ok, 2*bits)
	}
}

func TestMetricsApprovalQueueAndDecisions(t *testing.T) {
	tune, reg := withMetrics()
	e := startE2E(t, digests(2), tune)
	e.prompt("researcher", "go")
	seen := map[string]bool{}
	first := e.nextPending(seen)
	waitMetric(t, reg, "bcpgw_approval_queue_depth", nil, 1)
	waitMetric(t, reg, "bcpgw_publishes_total", map[string]string{"outcome": "held"}, 1)

	if _, err := e.gw.Approve(testCtx(t), first.ID, first.SHA256, tester, "ok"); err != nil {
		t.Fatal(err)
	}
	second := e.nextPending(seen)
	if _, err := e.gw.Reject(testCtx(t), second.ID, second.SHA256, tester, "no"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, reg, "bcpgw_approval_decision_seconds", map[string]string{"decision": "approved"}, 1)
	waitMetric(t, reg, "bcpgw_approval_decision_seconds", map[string]string{"decision": "rejected"}, 1)
	waitMetric(t, reg, "bcpgw_approval_queue_depth", nil, 0)
	waitMetric(t, reg, "bcpgw_deliveries_total", map[string]string{"outcome": "acked"}, 1)
}

func TestMetricsQueriesReloadsAndCrashes(t *testing.T) {
	tune, reg := withMetrics()
	e := startE2E(t, pair(100000, 100000, "review",
		queriesOf(cat1Query("req-1", "researcher"), cat1Query("req-2", "nobody")),
		map[string]string{"SILENT": "1"}), tune)
	e.prompt("main", "query")
	e.waitRecords("main", "query_sent", 1)
	waitMetric(t, reg, "bcpgw_queries_total", map[string]string{"outcome": "sent"}, 1)
	waitMetric(t, reg, "bcpgw_queries_total", map[string]string{"outcome": "refused", "code": "no_channel"}, 1)
	waitMetric(t, reg, "bcpgw_bits_charged_total", map[string]string{"controller": "main", "reader": "researcher", "category": "1"}, 1)

	// An invalid edit, then the channel removed: one failed and one good
	// reload, and the open query cancelled.
	e.edit("main", replace(t, "max_category: 3", "max_category: 0"))
	if _, err := e.gw.Reload(testCtx(t), "test"); err == nil {
		t.Fatal("reload of an invalid set succeeded")
	}
	e.edit("main", func(s string) string { return s[:strings.Index(s, "bcp_channels:")] + "---\nYou are main.\n" })
	e.edit("researcher", func(s string) string { return s[:strings.Index(s, "bcp_channels:")] + "---\nYou are researcher.\n" })
	e.reload()
	waitMetric(t, reg, "bcpgw_reloads_total", map[string]string{"outcome": "failed"}, 1)
	waitMetric(t, reg, "bcpgw_reloads_total", map[string]string{"outcome": "ok"}, 1)
	waitMetric(t, reg, "bcpgw_queries_total", map[string]string{"outcome": "cancelled", "code": "no_channel"}, 1)

	// A crash is counted, and the restart that follows it.
	s := e.sessionOf("researcher")
	s.Kill()
	if !testproc.CheckFor(testWait, pollStep, s.Ended) {
		t.Fatal("session did not end")
	}
	waitMetric(t, reg, "bcpgw_session_crashes_total", map[string]string{"agent": "researcher"}, 1)
}

// BenchmarkMetricsPerPush is what one accepted and delivered push records
// (publish, bits, delivery and its latency), with metrics on and, as the
// baseline, off (a nil *Metrics).
func BenchmarkMetricsPerPush(b *testing.B) {
	d := store.Delivery{CreatedAt: time.Now()}
	for _, tc := range []struct {
		name string
		m    *Metrics
	}{{"off", nil}, {"on", NewMetrics(prometheus.NewRegistry())}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				tc.m.publish("delivered", nil)
				tc.m.charged("main", "researcher", bcp.Cat2, 671)
				tc.m.delivered(d, d.CreatedAt.Add(time.Millisecond))
			}
		})
	}
}

func TestMetricsEgress(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	for _, r := range []egress.Record{
		{Agent: "researcher", Outcome: egress.OutcomeOK, BytesUp: 100, BytesDown: 5000},
		{Agent: "researcher", Outcome: egress.OutcomeOK, BytesUp: 20, BytesDown: 30},
		{Agent: "researcher", Outcome: egress.OutcomeRefused},
		{Agent: "fetcher", Outcome: egress.OutcomeFailed},
	} {
		m.Egress(r)
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bcpgw_egress_connections_total", map[string]string{"agent": "researcher", "outcome": "ok"}, 2},
		{"bcpgw_egress_connections_total", map[string]string{"agent": "researcher", "outcome": "refused"}, 1},
		{"bcpgw_egress_connections_total", map[string]string{"agent": "fetcher", "outcome": "failed"}, 1},
		{"bcpgw_egress_bytes_total", map[string]string{"agent": "researcher", "direction": "up"}, 120},
		{"bcpgw_egress_bytes_total", map[string]string{"agent": "researcher", "direction": "down"}, 5030},
	}
	for _, tt := range tests {
		if got, ok := metricValue(t, reg, tt.name, tt.labels); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.name, tt.labels, got, ok, tt.want)
		}
	}
	if _, ok := metricValue(t, reg, "bcpgw_egress_bytes_total", map[string]string{"agent": "fetcher"}); ok {
		t.Error("bytes of an agent that moved none")
	}
	var off *Metrics
	off.Egress(egress.Record{Agent: "x", Outcome: egress.OutcomeOK, BytesUp: 1}) // records nothing, and does not panic
}

// Each throttle episode is counted in bcpgw_session_throttles_total.
func TestFloodThrottleMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := countingAuditor{next: LogAuditor{Logger: hclog.NewNullLogger()}, m: NewMetrics(reg)}
	a.Audit(store.Event{Kind: "session_throttled", Agent: "main"})
	a.Audit(store.Event{Kind: "session_throttled", Agent: "main"})
	a.Audit(store.Event{Kind: "session_started", Agent: "main"})
	if v, ok := metricValue(t, reg, "bcpgw_session_throttles_total", map[string]string{"agent": "main"}); !ok || v != 2 {
		t.Errorf("bcpgw_session_throttles_total{agent=main} = %v (%v), want 2", v, ok)
	}
}
