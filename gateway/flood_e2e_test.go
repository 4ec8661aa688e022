package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// TestSixReadersReachTheirController is issue 15's case: six Readers
// publishing about 142 pushes a second each (852 in all, each Reader well
// under the default limit of 200 lines a second) to one Controller, which
// answers every delivery with result. The Controller writes 852 lines a
// second because the gateway sends it 852 deliveries a second; those
// results were asked for and must not count as flooding. Every accepted
// push must be delivered and the Controller never slowed or stopped.
//
// It runs the real gateway, sandboxed, with the default flood limits and
// the benchmark runtimes (internal/benchrt), for about four seconds of
// pushes: long enough to use up the default burst of 1,000 lines several
// times over. It checks counts and events only, never how long anything
// took: the machine may be slow and shared.
func TestSixReadersReachTheirController(t *testing.T) {
	const (
		readers = 6
		rate    = 142 // pushes a second per Reader
		each    = 4 * rate
		total   = readers * each
	)
	dir := t.TempDir()
	// In the controller's default workdir: the only place of dir its
	// sandbox can write.
	out := filepath.Join(agents.DefaultWorkdir(dir, "main"), "timings")
	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		t.Fatal(err)
	}
	defs := map[string]string{}
	var main strings.Builder
	fmt.Fprintf(&main, "---\nname: main\nruntime: [%s]\nautostart: true\nbcp_channels:\n",
		quoteArgs([]string{benchrtPath, "controller", fmt.Sprint(total), out}))
	for i := 1; i <= readers; i++ {
		fmt.Fprintf(&main, `  - peer: r%d
    role: controller
    max_category: 2
    budget_bits: 1000000000
    subscriptions:
      - {id: load, category: 2, questions: [{id: t, question: "When?", max_words: 1}]}
`, i)
		reader := fmt.Sprintf(`---
name: r%d
runtime: [%s]
autostart: true
tools: [BCPPublish]
bcp_channels:
  - {peer: main, role: reader, max_category: 2, budget_bits: 1000000000}
---
`, i, quoteArgs([]string{benchrtPath, "reader", fmt.Sprint(each), fmt.Sprint(rate)}))
		defs[fmt.Sprintf("r%d.md", i)] = reader
	}
	main.WriteString("---\n")
	defs["main.md"] = main.String()
	logs := &testproc.Buffer{}
	rg := startGateway(t, dir, defs, func(c *Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "gw", Output: logs, Level: hclog.Info})
	})
	st := rg.store
	defer func() {
		if err := rg.stop(); err != nil {
			t.Errorf("gateway Run: %v", err)
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs)
		}
	}()

	// The Controller writes its file once it has received every push.
	// Generous: this is about counts, not speed.
	if !testproc.CheckFor(3*time.Minute, 20*time.Millisecond, func() bool {
		_, err := os.Stat(out)
		return err == nil
	}) {
		t.Errorf("the Controller did not receive all %d pushes", total)
	}
	var delivered, pending int
	if !testproc.CheckFor(30*time.Second, 20*time.Millisecond, func() bool {
		ds, err := st.Deliveries(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		delivered, pending = 0, 0
		for _, d := range ds {
			switch d.State {
			case store.DeliveryDelivered:
				delivered++
			case store.DeliveryPending:
				pending++
			}
		}
		return delivered+pending == total && pending == 0
	}) {
		t.Errorf("accepted %d pushes, delivered %d, pending %d; want all %d delivered", delivered+pending, delivered, pending, total)
	}
	t.Logf("accepted %d pushes, delivered %d", delivered+pending, delivered)
	evs, err := st.Events(context.Background(), 0, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, e := range evs {
		switch e.Kind {
		case "session_started":
			if e.Agent == "main" {
				started++
			}
		case "session_throttled", "session_killed", "session_crashed":
			t.Errorf("%s was %s: %s", e.Agent, strings.TrimPrefix(e.Kind, "session_"), e.Detail)
		}
	}
	if started != 1 {
		t.Errorf("the Controller's session started %d times, want once", started)
	}
}
