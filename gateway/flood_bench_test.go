package gateway

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/session"
)

// BenchmarkFlood is one Reader publishing flat out for 30 seconds to a
// Controller that answers every delivery at once (internal/benchrt flood
// and controller-log), with the default backlog limit. It reports the
// deliveries the Controller received during the flood divided by the
// pushes accepted during it (the goal is 0.9 or more: delivery is not
// starved), the pushes refused with backlog_full, any accepted push never
// delivered (lost: must be 0), and the gateway's heap at the end of the
// flood. BCPGW_FLOOD_SECONDS shortens it.
func BenchmarkFlood(b *testing.B) {
	secs := 30
	if v := os.Getenv("BCPGW_FLOOD_SECONDS"); v != "" {
		fmt.Sscan(v, &secs)
	}
	var r floodResult
	for range b.N {
		r = runFlood(b, secs)
	}
	b.ReportMetric(float64(r.deliveredDuring)/float64(r.accepted), "delivered/accepted")
	b.ReportMetric(float64(r.accepted), "accepted")
	b.ReportMetric(float64(r.full), "backlog_full")
	b.ReportMetric(float64(r.other), "other-refusals")
	b.ReportMetric(float64(r.accepted-r.delivered), "lost")
	b.ReportMetric(float64(r.heap)/(1<<20), "heap-MiB")
	b.ReportMetric(0, "ns/op")
}

type floodResult struct {
	accepted, full, other, deliveredDuring, delivered int64
	heap                                              uint64
}

func runFlood(b *testing.B, secs int) floodResult {
	b.Helper()
	dir := b.TempDir()
	defs, readerOut, controllerOut := floodAgents(b, dir, secs, "")
	// The flooding Reader is the point: no line limit slows it.
	startGateway(b, dir, defs, func(c *Config) { c.Session = session.Config{FloodRate: 1e9, FloodBurst: 1e9} })
	waitFile(b, readerOut) // every verdict is in
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var r floodResult
	var ended, sent int64
	data, err := os.ReadFile(readerOut)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Sscan(string(data), &ended, &sent, &r.accepted, &r.full, &r.other); err != nil {
		b.Fatal(err)
	}
	r.heap = ms.HeapInuse
	// Then every accepted push reaches the Controller.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r.delivered, r.deliveredDuring = 0, 0
		f, err := os.Open(controllerOut)
		if err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var sentAt, recv int64
				if _, err := fmt.Sscan(strings.TrimSpace(sc.Text()), &sentAt, &recv); err != nil {
					continue
				}
				r.delivered++
				if recv <= ended {
					r.deliveredDuring++
				}
			}
			f.Close()
		}
		if r.delivered >= r.accepted || time.Now().After(deadline) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// floodAgents returns the definitions of the flood benchmarks in dir: a
// Reader flooding the Cat-2 subscription load of main for secs (benchrt
// flood), with policy added to the subscription (e.g. ", batch: {...}"),
// and the files where the Reader's verdicts and what main received are
// written.
func floodAgents(b *testing.B, dir string, secs int, policy string) (defs map[string]string, readerOut, controllerOut string) {
	b.Helper()
	readerOut = filepath.Join(agents.DefaultWorkdir(dir, "researcher"), "flood")
	controllerOut = filepath.Join(agents.DefaultWorkdir(dir, "main"), "received")
	for _, p := range []string{readerOut, controllerOut} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			b.Fatal(err)
		}
	}
	defs = map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
runtime: [%q, "controller-log", "-", %q]
autostart: true
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 1000000000
    subscriptions:
      - {id: load, category: 2, questions: [{id: t, question: "When?", max_words: 1}]%s}
---
`, benchrtPath, controllerOut, policy),
		"researcher.md": fmt.Sprintf(`---
name: researcher
runtime: [%q, "flood", "%d", %q]
autostart: true
tools: [BCPPublish]
bcp_channels:
  - {peer: main, role: reader, max_category: 2, budget_bits: 1000000000}
---
`, benchrtPath, secs, readerOut),
	}
	return defs, readerOut, controllerOut
}
