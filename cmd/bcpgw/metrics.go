package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bcpgw/bcpgw/gateway"
)

// metricsServer serves /metrics for run --metrics-addr.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// listenMetrics resolves --metrics-addr and listens on it. A bare port
// ("9464") or one with an empty host (":9464") listens on loopback only:
// the metrics name agents and channels, so exposing them further is for
// the operator to ask for, with an explicit host such as 0.0.0.0.
func listenMetrics(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		// A bare port has no colon.
		host, port = "", addr
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	return ln, nil
}

// newMetrics creates the registry and the gateway's metrics, with the Go
// runtime's and the process's own, and the HTTP server that exposes them.
func newMetrics(ln net.Listener, logger hclog.Logger) (*metricsServer, *gateway.Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := gateway.NewMetrics(reg)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		Registry:          reg,
		Timeout:           10 * time.Second,
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "bcpgw: metrics are at /metrics")
	})
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	return &metricsServer{ln: ln, srv: srv}, m
}

// serve serves until ctx ends, then shuts the server down.
func (s *metricsServer) serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics server: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(shut)
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}
