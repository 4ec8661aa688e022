package notify

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the notifier's Prometheus metrics. Target names come from
// the operator's notify file, so their labels are bounded. A nil
// *Metrics records nothing.
type Metrics struct {
	attempts *prometheus.CounterVec
	given    *prometheus.CounterVec
	sent     *prometheus.CounterVec
	lag      *prometheus.Desc
	disabled *prometheus.Desc
	down     *prometheus.Desc

	mu     sync.Mutex
	states map[string]*targetState // by target, while its loop runs
}

// targetState is what a target's loop publishes for scrapes.
type targetState struct {
	now      func() time.Time
	since    atomic.Int64 // unix nanoseconds of the event being sent; 0 when caught up
	disabled atomic.Bool
	down     atomic.Bool // MaxAttempts failed in a row; waiting for the endpoint
}

// NewMetrics creates the notifier's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_notify_attempts_total",
			Help: "Webhook requests by target and outcome: ok (2xx), error (network error, timeout, 408, 429 or 5xx: tried again), refused (another 4xx or a redirect: given up), gone (410: target disabled).",
		}, []string{"target", "outcome"}),
		given: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_notify_failures_total",
			Help: "Notifications given up, by target: refused by the endpoint (a 4xx other than 408, 410 and 429).",
		}, []string{"target"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bcpgw_notify_sent_total",
			Help: "Notifications delivered (answered 2xx), by target.",
		}, []string{"target"}),
		lag: prometheus.NewDesc("bcpgw_notify_lag_seconds",
			"Age of the event a target is being sent (retries included); 0 when it is caught up.", []string{"target"}, nil),
		disabled: prometheus.NewDesc("bcpgw_notify_disabled",
			"1 for a target whose endpoint answered 410 Gone (nothing is sent to it until its URL changes).", []string{"target"}, nil),
		down: prometheus.NewDesc("bcpgw_notify_down",
			"1 for a target whose endpoint failed 10 attempts in a row: it is tried every 300s and catches up once it answers.", []string{"target"}, nil),
		states: map[string]*targetState{},
	}
	reg.MustRegister(m.attempts, m.given, m.sent, collector{m})
	return m
}

type collector struct{ m *Metrics }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.lag
	ch <- c.m.disabled
	ch <- c.m.down
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for name, st := range c.m.states {
		lag := 0.0
		if since := st.since.Load(); since != 0 {
			lag = max(0, st.now().Sub(time.Unix(0, since)).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(c.m.lag, prometheus.GaugeValue, lag, name)
		d := 0.0
		if st.disabled.Load() {
			d = 1
		}
		ch <- prometheus.MustNewConstMetric(c.m.disabled, prometheus.GaugeValue, d, name)
		down := 0.0
		if st.down.Load() {
			down = 1
		}
		ch <- prometheus.MustNewConstMetric(c.m.down, prometheus.GaugeValue, down, name)
	}
}

// state registers a target's loop; the returned state is valid (and
// records nothing) on a nil *Metrics.
func (m *Metrics) state(target string, now func() time.Time) *targetState {
	st := &targetState{now: now}
	if m == nil {
		return st
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states[target] = st
	for _, o := range []Outcome{OutcomeOK, OutcomeRetry, OutcomeRefused, OutcomeGone} {
		m.attempts.WithLabelValues(target, string(o))
	}
	m.given.WithLabelValues(target)
	m.sent.WithLabelValues(target)
	return st
}

// forget drops a removed target's series.
func (m *Metrics) forget(target string, st *targetState) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.states[target] == st {
		delete(m.states, target)
		m.attempts.DeletePartialMatch(prometheus.Labels{"target": target})
		m.given.DeleteLabelValues(target)
		m.sent.DeleteLabelValues(target)
	}
}

func (m *Metrics) attempt(target string, o Outcome) {
	if m != nil {
		m.attempts.WithLabelValues(target, string(o)).Inc()
	}
}

func (m *Metrics) failed(target string) {
	if m != nil {
		m.given.WithLabelValues(target).Inc()
	}
}

func (m *Metrics) delivered(target string) {
	if m != nil {
		m.sent.WithLabelValues(target).Inc()
	}
}
