package gateway

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/egress"
	"github.com/bcpgw/bcpgw/gateway/notify"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// Metrics are the gateway's Prometheus metrics, all named bcpgw_*. Counters
// and histograms are updated where things happen; the backlog and the
// agents' states are read when scraped, from the store and the
// supervisor, so they cannot drift from the truth after a restart.
//
// A nil *Metrics is valid and records nothing.
type Metrics struct {
	publishes  *prometheus.CounterVec
	queries    *prometheus.CounterVec
	answers    *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	bits       *prometheus.CounterVec
	decisions  *prometheus.HistogramVec
	deliveries *prometheus.CounterVec
	latency    prometheus.Histogram
	crashes    *prometheus.CounterVec
	restarts   *prometheus.CounterVec
	throttles  *prometheus.CounterVec
	subPushes  *prometheus.CounterVec
	subBits    *prometheus.CounterVec
	subRefused *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	egressConn *prometheus.CounterVec
	egressData *prometheus.CounterVec
	notify     *notify.Metrics // the notifier's (notify_wiring.go)
	policy     *policyMetrics  // debounce and batching (debounce_batch.go)

	// Read at scrape time.
	approvalsPending  *prometheus.Desc
	deliveriesPending *prometheus.Desc
	deliveriesParked  *prometheus.Desc
	walHighWater      *prometheus.Desc
	walCheckpoints    *prometheus.Desc
	sessions          *prometheus.Desc
	g                 *Gateway // set by New
}

// NewMetrics creates the gateway's metrics and registers them with reg.
// Pass the result to New in Config.Metrics; only then do the scrape-time
// metrics (backlog, agent states) have a gateway to read.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_publishes_total",
			Help: "Pushes (BCPPublish) from Readers by outcome: delivered (stored for its Controller), held (for an operator), filtered (accepted, but kept from the Controller by its subscription's filter), refused (with its error code).",
		}, []string{"outcome", "code"}),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_queries_total",
			Help: "Queries from Controllers by outcome: sent, refused, timed_out, cancelled (by a reload), with the error code.",
		}, []string{"outcome", "code"}),
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_answers_total",
			Help: "Readers' answers to queries by outcome: delivered, held, refused (with its error code).",
		}, []string{"outcome", "code"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_refusals_total",
			Help: "Every refused runtime message (publishes, answers, queries, protocol errors), by error code.",
		}, []string{"code"}),
		bits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_bits_charged_total",
			Help: "Bits charged to channel budgets (accepted pushes and sent queries), by channel and category.",
		}, []string{"controller", "reader", "category"}),
		decisions: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bcpgw_approval_decision_seconds",
			Help:    "Time from an approval item's creation to its decision, by decision (approved, rejected, expired, dropped).",
			Buckets: []float64{10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 48 * 3600},
		}, []string{"decision"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_deliveries_total",
			Help: "Deliveries that left the outbox, by outcome: acked (the Controller answered result), dropped_revoked, delivery_parked (set aside for an operator after repeated failures).",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bcpgw_delivery_latency_seconds",
			Help:    "Time from a delivery's acceptance (or approval) to its acknowledgment by the Controller.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10), // 5ms to about 22min
		}),
		crashes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_session_crashes_total",
			Help: "Sessions that crashed or failed to start, by agent.",
		}, []string{"agent"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_session_restarts_total",
			Help: "Sessions started again by the supervisor, by agent and reason: crash (after backoff) or reload (changed definition).",
		}, []string{"agent", "reason"}),
		throttles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_session_throttles_total",
			Help: "Times a runtime was slowed for writing more lines than its flood limit (one per throttle episode), by agent.",
		}, []string{"agent"}),
		subPushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_subscription_pushes_total",
			Help: "Pushes on each subscription by outcome: accepted (stored for delivery), held (for an operator), filtered (kept from the Controller by the subscription's filter), superseded (replaced by a newer push before delivery), refused, delivered (deliveries acknowledged by the Controller; a batch is one). Only subscriptions of the definitions in force (or approved at run time) are labels.",
		}, []string{"controller", "reader", "subscription", "outcome"}),
		subBits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_subscription_bits_total",
			Help: "Bits charged for the pushes accepted on each subscription.",
		}, []string{"controller", "reader", "subscription"}),
		subRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_subscription_refusals_total",
			Help: "Pushes refused on each subscription, by error code.",
		}, []string{"controller", "reader", "subscription", "code"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_reloads_total",
			Help: "Definition reloads by outcome: ok, or failed (the running set stayed in force).",
		}, []string{"outcome"}),
		egressConn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_egress_connections_total",
			Help: "Connections of sandboxed agents through the egress proxy, by agent and outcome: ok, refused (not listed, or a name leading to a forbidden address), failed (unreachable), malformed, busy (over the cap).",
		}, []string{"agent", "outcome"}),
		egressData: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_egress_bytes_total",
			Help: "Bytes through the egress proxy, by agent and direction: up (sent to destinations, what left the sandbox) or down (received).",
		}, []string{"agent", "direction"}),
		approvalsPending: prometheus.NewDesc("bcpgw_approval_queue_depth",
			"Approval items waiting for an operator's decision.", nil, nil),
		deliveriesPending: prometheus.NewDesc("bcpgw_deliveries_pending",
			"Deliveries accepted and not yet acknowledged by their Controller.", nil, nil),
		deliveriesParked: prometheus.NewDesc("bcpgw_deliveries_parked",
			"Deliveries set aside after repeated failures, waiting for an operator (bcpgw deliveries).", nil, nil),
		walHighWater: prometheus.NewDesc("bcpgw_store_wal_high_water_bytes",
			"The largest size the state file's write-ahead log reached since the gateway started.", nil, nil),
		walCheckpoints: prometheus.NewDesc("bcpgw_store_wal_checkpoints_total",
			"Checkpoints that truncated the write-ahead log after it passed its limit.", nil, nil),
		sessions: prometheus.NewDesc("bcpgw_sessions",
			"Agents by the state of their session (stopped, starting, running, backoff, failed).", []string{"state"}, nil),
	}
	// Known outcomes start at zero, so that rates exist before the first event.
	for _, o := range []string{"delivered", "held"} {
		m.publishes.WithLabelValues(o, "")
		m.answers.WithLabelValues(o, "")
	}
	m.queries.WithLabelValues("sent", "")
	for _, o := range []string{"acked", "dropped_revoked", "delivery_parked"} {
		m.deliveries.WithLabelValues(o)
	}
	for _, o := range []string{"ok", "failed"} {
		m.reloads.WithLabelValues(o)
	}
	m.notify = notify.NewMetrics(reg)
	m.policy = newPolicyMetrics(reg)
	reg.MustRegister(m.publishes, m.queries, m.answers, m.refusals, m.bits, m.decisions, m.deliveries, m.latency,
		m.crashes, m.restarts, m.throttles, m.subPushes, m.subBits, m.subRefused, m.reloads, m.egressConn, m.egressData, scrapeCollector{m})
	return m
}

// scrapeCollector reads the backlog and the agents' states at scrape time.
type scrapeCollector struct{ m *Metrics }

// scrapeTimeout bounds what one scrape waits for the store and the
// supervisor.
const scrapeTimeout = 5 * time.Second

func (c scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.approvalsPending
	ch <- c.m.deliveriesPending
	ch <- c.m.deliveriesParked
	ch <- c.m.walHighWater
	ch <- c.m.walCheckpoints
	ch <- c.m.sessions
}

func (c scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.m.g
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if b, err := g.cfg.Store.BacklogCounts(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.m.approvalsPending, prometheus.GaugeValue, float64(b.Approvals))
		ch <- prometheus.MustNewConstMetric(c.m.deliveriesPending, prometheus.GaugeValue, float64(b.Deliveries))
		ch <- prometheus.MustNewConstMetric(c.m.deliveriesParked, prometheus.GaugeValue, float64(b.Parked))
	} else {
		ch <- prometheus.NewInvalidMetric(c.m.approvalsPending, err)
	}
	wal := g.cfg.Store.WALStats()
	ch <- prometheus.MustNewConstMetric(c.m.walHighWater, prometheus.GaugeValue, float64(wal.HighWater))
	ch <- prometheus.MustNewConstMetric(c.m.walCheckpoints, prometheus.CounterValue, float64(wal.Checkpoints))
	// The supervisor answers only while the gateway runs.
	select {
	case <-g.running:
	default:
		return
	}
	all, err := g.sv.Agents(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.m.sessions, err)
		return
	}
	counts := map[session.AgentState]int{session.StateStopped: 0, session.StateStarting: 0, session.StateRunning: 0, session.StateBackoff: 0, session.StateFailed: 0}
	for _, a := range all {
		counts[a.State]++
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.m.sessions, prometheus.GaugeValue, float64(n), string(state))
	}
}

func codeOf(e *bcp.Error) string {
	if e == nil {
		return ""
	}
	return string(e.Code)
}

func (m *Metrics) publish(outcome string, e *bcp.Error) {
	if m != nil {
		m.publishes.WithLabelValues(outcome, codeOf(e)).Inc()
	}
}

func (m *Metrics) query(outcome string, e *bcp.Error) {
	if m != nil {
		m.queries.WithLabelValues(outcome, codeOf(e)).Inc()
	}
}

func (m *Metrics) answer(outcome string, e *bcp.Error) {
	if m != nil {
		m.answers.WithLabelValues(outcome, codeOf(e)).Inc()
	}
}

func (m *Metrics) charged(controller, reader string, cat bcp.Category, bits float64) {
	if m != nil {
		m.bits.WithLabelValues(controller, reader, strconv.Itoa(int(cat))).Add(bits)
	}
}

func (m *Metrics) decided(a *store.Approval, now time.Time) {
	if m != nil {
		m.decisions.WithLabelValues(string(a.Status)).Observe(max(0, now.Sub(a.CreatedAt).Seconds()))
	}
}

func (m *Metrics) delivered(d store.Delivery, now time.Time) {
	if m != nil {
		m.deliveries.WithLabelValues("acked").Inc()
		m.latency.Observe(max(0, now.Sub(d.CreatedAt).Seconds()))
	}
}

func (m *Metrics) deliveryDropped(kind string) {
	if m != nil {
		m.deliveries.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) crashed(agent string) {
	if m != nil {
		m.crashes.WithLabelValues(agent).Inc()
	}
}

func (m *Metrics) restarted(agent, reason string) {
	if m != nil {
		m.restarts.WithLabelValues(agent, reason).Inc()
	}
}

func (m *Metrics) reloaded(outcome string) {
	if m != nil {
		m.reloads.WithLabelValues(outcome).Inc()
	}
}

// Egress counts one connection of the egress proxy (pass it, or call it
// from, egress.Config.OnConn). Bytes are counted when a connection ends,
// since a Record is made then: a long tunnel shows its bytes at its end.
func (m *Metrics) Egress(r egress.Record) {
	if m == nil {
		return
	}
	m.egressConn.WithLabelValues(r.Agent, string(r.Outcome)).Inc()
	if r.BytesUp > 0 {
		m.egressData.WithLabelValues(r.Agent, "up").Add(float64(r.BytesUp))
	}
	if r.BytesDown > 0 {
		m.egressData.WithLabelValues(r.Agent, "down").Add(float64(r.BytesDown))
	}
}

// countingAuditor counts refusals on their way to the audit log (the
// sessions' own, tool_not_allowed and protocol_error, as well as the
// router's), and the sessions' throttle episodes.
type countingAuditor struct {
	next Auditor
	m    *Metrics
}

// subscriptionFigure counts a tagged event (store.FigureOf) for its
// subscription, as the store counts it in the figures of bcpgw report.
// The gateway tags only subscriptions that exist, so the labels are
// bounded by the definitions (and approved requests).
func (m *Metrics) subscriptionFigure(e store.Event) {
	if m == nil {
		return
	}
	controller, reader, outcome, ok := store.FigureOf(e)
	if !ok {
		return
	}
	m.subPushes.WithLabelValues(controller, reader, e.Subscription, outcome).Inc()
	switch outcome {
	case "accepted", "held":
		m.subBits.WithLabelValues(controller, reader, e.Subscription).Add(e.Bits)
	case "refused":
		m.subRefused.WithLabelValues(controller, reader, e.Subscription, e.Code).Inc()
	}
}

func (a countingAuditor) Audit(e store.Event) {
	if a.m != nil {
		switch e.Kind {
		case "refused":
			a.m.refusals.WithLabelValues(e.Code).Inc()
		case "session_throttled":
			a.m.throttles.WithLabelValues(e.Agent).Inc()
		}
	}
	a.next.Audit(e)
}
