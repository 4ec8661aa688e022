package main

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestListenMetricsDefaultsToLoopback(t *testing.T) {
	for _, addr := range []string{"0", ":0", "127.0.0.1:0"} {
		ln, err := listenMetrics(addr)
		if err != nil {
			t.Fatalf("listenMetrics(%q): %v", addr, err)
		}
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		ln.Close()
		if host != "127.0.0.1" {
			t.Errorf("listenMetrics(%q) listens on %s, want loopback", addr, ln.Addr())
		}
	}
	if _, err := listenMetrics("256.1.1.1:0"); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Errorf("bad address: err = %v, want one naming --metrics-addr", err)
	}
}

func TestCLIRunServesMetrics(t *testing.T) {
	g := newOpEnv(t)
	g.runArgs = []string{"--metrics-addr", "0"}
	g.start(opPublishes(true, 1, "m"))
	var url string
	opWait(t, "the metrics address in the log", func() (bool, string) {
		m := regexp.MustCompile(`serving metrics: url=(http://\S+/metrics)`).FindStringSubmatch(g.stderr.String())
		if m != nil {
			url = m[1]
		}
		return m != nil, g.stderr.String()
	})
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("metrics url %s is not on loopback", url)
	}
	g.nextPending(map[string]bool{}) // a digest waits for an operator
	var body string
	opWait(t, "the metrics to show the pushes and the queue", func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false, resp.Status
		}
		body = string(b)
		return strings.Contains(body, "bcpgw_approval_queue_depth 1") &&
			strings.Contains(body, `bcpgw_publishes_total{code="",outcome="delivered"} 2`), body
	})
	for _, want := range []string{
		`bcpgw_publishes_total{code="",outcome="held"} 1`,
		`bcpgw_sessions{state="running"}`,
		`bcpgw_reloads_total{outcome="ok"} 0`,
		`bcpgw_delivery_latency_seconds_bucket`,
		`go_goroutines`,
		`process_open_fds`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	g.stop()
}
