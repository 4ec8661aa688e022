package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/egress"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/netpolicy"
)

// egressProxies runs one egress proxy per agent whose network is a list
// of destinations, on STATE/egress/NAME.sock, started when the agent's
// first sandbox needs it and replaced when its list changes. Identity
// comes from the socket: only that agent's sandbox is handed it.
type egressProxies struct {
	g   *Gateway
	dir string

	mu      sync.Mutex
	proxies map[string]*agentProxy
}

type agentProxy struct {
	p     *egress.Proxy
	allow []netpolicy.Destination
	path  string
}

// socket returns the proxy socket of def, starting (or replacing) its
// proxy as needed.
func (e *egressProxies) socket(def *agents.Definition) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dir == "" {
		return "", fmt.Errorf("the gateway has no state directory for the egress proxies' sockets")
	}
	if ap := e.proxies[def.Name]; ap != nil {
		if slices.Equal(ap.allow, def.Sandbox.Network.Allow) {
			return ap.path, nil
		}
		_ = ap.p.Close() // its list changed: the new session gets a new proxy
		delete(e.proxies, def.Name)
	}
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", e.dir, err)
	}
	path := filepath.Join(e.dir, def.Name+".sock")
	p, err := egress.Listen(path, egress.Config{
		Agent: def.Name, Allow: def.Sandbox.Network.Allow,
		Logger: e.g.log.Named("egress").Named(def.Name),
		OnConn: e.g.egressRecord,
	})
	if err != nil {
		return "", err
	}
	if !e.g.spawn(func() {
		if err := p.Serve(e.g.ctx); err != nil && e.g.ctx.Err() == nil {
			e.g.log.Error("egress proxy stopped", "agent", def.Name, "error", err)
		}
	}) {
		_ = p.Close()
		return "", fmt.Errorf("the gateway is stopping")
	}
	e.proxies[def.Name] = &agentProxy{p: p, allow: def.Sandbox.Network.Allow, path: path}
	return path, nil
}

// prune closes the proxies of agents that the definitions in force no
// longer give a list of destinations (removed, or now none or host).
func (e *egressProxies) prune(set *agents.Set) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, ap := range e.proxies {
		if d := set.Agent(name); d == nil || d.Sandbox.None || d.Sandbox.Network.Mode != agents.NetworkProxy {
			_ = ap.p.Close()
			delete(e.proxies, name)
		}
	}
}

// egressRecord makes each egress connection an event (egress_ok,
// egress_refused, egress_failed, ...) and a metric.
func (g *Gateway) egressRecord(r egress.Record) {
	g.metrics.Egress(r)
	dest := r.Destination
	if dest == "" {
		dest = "(none)"
	}
	detail := fmt.Sprintf("%s %s", r.Method, dest)
	if r.Addr.IsValid() {
		detail += fmt.Sprintf(" (%s)", r.Addr)
	}
	detail += fmt.Sprintf(": status %d, %d bytes up, %d down, %s", r.Status, r.BytesUp, r.BytesDown, r.Duration.Round(time.Millisecond))
	if r.Reason != "" {
		detail += ": " + r.Reason
	}
	g.event(store.Event{Time: r.Started, Agent: r.Agent, Kind: "egress_" + string(r.Outcome), Detail: detail})
}
