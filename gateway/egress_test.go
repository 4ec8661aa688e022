package gateway

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/internal/fakert"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// echoServer answers each line on a loopback port with "pong" and counts
// connections; it stands in for an allowed (or not) destination.
func echoServer(t *testing.T) (addr string, conns func() int) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := make(chan struct{}, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n <- struct{}{}
			go func() {
				defer c.Close()
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					fmt.Fprint(c, "pong\n")
				}
			}()
		}
	}()
	return ln.Addr().String(), func() int { return len(n) }
}

// An agent whose network is a list reaches a listed loopback destination
// through the gateway's egress proxy, and is refused another, which is
// never connected to; each connection is an event with its bytes. The
// runtime reaches the proxy only through 127.0.0.1:3128 of its own
// network namespace.
func TestEgressAllowsListedDestinationOnly(t *testing.T) {
	allowed, allowedConns := echoServer(t)
	other, otherConns := echoServer(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	def := fmt.Sprintf("---\nname: fetcher\nruntime: [%q, -test.run=^$]\nenv: {%s: sdk, EGRESS_TRY: %q}\nsandbox: {network: [%q]}\n---\nFetch.\n",
		exe, fakert.Env, allowed+","+other, allowed)
	if err := os.WriteFile(filepath.Join(dir, "fetcher.md"), []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	e := runE2E(t, state, set, map[string]string{"PATH": os.Getenv("PATH")}, nil)
	e.prompt("fetcher", "egress")
	ok := e.waitEvent("egress_ok", "")
	refused := e.waitEvent("egress_refused", "")
	if !strings.Contains(ok[0].Detail, "CONNECT "+allowed) || !strings.Contains(ok[0].Detail, "5 bytes up, 5 down") || ok[0].Agent != "fetcher" {
		t.Errorf("egress_ok = %+v", ok[0])
	}
	if !strings.Contains(refused[0].Detail, "CONNECT "+other) || !strings.Contains(refused[0].Detail, "status 403") {
		t.Errorf("egress_refused = %+v", refused[0])
	}
	// The runtime's stderr is relayed apart from the proxy's events: its
	// last line may come after egress_refused.
	wants := []string{"egress " + allowed + ": HTTP/1.1 200", "/ pong", "egress " + other + ": HTTP/1.1 403"}
	testproc.CheckFor(testWait, pollStep, func() bool {
		logs := e.logs.String()
		for _, want := range wants {
			if !strings.Contains(logs, want) {
				return false
			}
		}
		return true
	})
	logs := e.logs.String()
	for _, want := range wants {
		if !strings.Contains(logs, want) {
			t.Errorf("runtime log lacks %q", want)
		}
	}
	if allowedConns() != 1 || otherConns() != 0 {
		t.Errorf("connections: allowed %d, other %d; want 1 and 0", allowedConns(), otherConns())
	}

	// A reload that takes the list away closes the agent's proxy.
	sock := filepath.Join(state, "egress", "fetcher.sock")
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the proxy's socket: %v", err)
	}
	def = strings.Replace(def, fmt.Sprintf("sandbox: {network: [%q]}", allowed), "sandbox: {network: none}", 1)
	if err := os.WriteFile(filepath.Join(dir, "fetcher.md"), []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.gw.Reload(t.Context(), "test"); err != nil {
		t.Fatal(err)
	}
	if !testproc.CheckFor(testWait, pollStep, func() bool { _, err := os.Stat(sock); return os.IsNotExist(err) }) {
		t.Error("the proxy's socket is still there after its list was taken away")
	}
}
