package gateway

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// runningGateway is a Gateway started by startGateway, for the benchmarks
// and the load tests that run real runtime processes at full speed.
type runningGateway struct {
	gw    *Gateway
	store *store.Store
	stop  func() error // stops Run, closes the store, returns Run's error
}

// startGateway writes defs (file name -> content) to dir/agents, loads
// them, opens dir/bcpgw.db and runs a Gateway on them with dir as its
// state directory, logging errors to stderr. tune may change the Config
// before New (and seed the store). The gateway is stopped at the end of
// the test if stop was not called.
func startGateway(tb testing.TB, dir string, defs map[string]string, tune func(*Config)) *runningGateway {
	tb.Helper()
	agentsDir := filepath.Join(dir, "agents")
	if err := os.Mkdir(agentsDir, 0o700); err != nil {
		tb.Fatal(err)
	}
	for name, body := range defs {
		if err := os.WriteFile(filepath.Join(agentsDir, name), []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	set, err := agents.LoadDir(agentsDir)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "bcpgw.db"))
	if err != nil {
		tb.Fatal(err)
	}
	cfg := Config{Set: set, Store: st, StateDir: dir, Logger: hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Error})}
	if tune != nil {
		tune(&cfg)
	}
	gw, err := New(cfg)
	if err != nil {
		st.Close()
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Run(ctx) }()
	stopped := false
	var runErr error
	rg := &runningGateway{gw: gw, store: st}
	rg.stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
			if err := st.Close(); err != nil && runErr == nil {
				runErr = err
			}
		}
		return runErr
	}
	tb.Cleanup(func() {
		if err := rg.stop(); err != nil {
			tb.Errorf("gateway: %v", err)
		}
	})
	return rg
}
