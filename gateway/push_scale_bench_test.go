package gateway

import (
	"fmt"
	"testing"

	"github.com/bcpgw/bcpgw/gateway/session"
)

// BenchmarkPushManyAgents is the flat-out push of BenchmarkPushVsRelay
// (the same runtime pair, main and researcher) through a gateway whose
// definitions hold 2 agents, then 10,000: the other 9,998 are idle
// controller-reader pairs, each with a channel and three subscriptions,
// whose names sort both before and after the pair's. Every push looks
// its channel and subscription up several times, so this measures what
// the size of the set costs the push path. It reports both rates and
// their ratio (the goal is >= 0.9), the best of rounds runs each, the two
// sizes taking turns so that drift on the machine hits both alike.
//
//	go test ./gateway -run '^$' -bench PushManyAgents -benchtime 1x
func BenchmarkPushManyAgents(b *testing.B) {
	const (
		burst  = 5000
		rounds = 3
	)
	var small, large float64
	for range b.N {
		for range rounds {
			small = max(small, throughput(runPushes(b, viaGatewayExtra(0), burst, 0)))
			large = max(large, throughput(runPushes(b, viaGatewayExtra(9998), burst, 0)))
		}
	}
	b.ReportMetric(small, "push/s-2-agents")
	b.ReportMetric(large, "push/s-10000-agents")
	b.ReportMetric(large/small, "ratio")
	b.ReportMetric(0, "ns/op") // one op is a whole scenario: not meaningful
}

// viaGatewayExtra is viaGateway with extra idle agents defined beside
// the pair.
func viaGatewayExtra(extra int) pushPath {
	return func(b *testing.B, dir string, reader, controller []string) {
		b.Helper()
		// The controller writes its timings into dir, so dir is its
		// read_write path; the definitions and the state directory may
		// not lie inside it.
		stateDir := b.TempDir() // the definitions go in stateDir/agents
		defs := map[string]string{
			"main.md": fmt.Sprintf(`---
name: main
runtime: [%s]
autostart: true
sandbox: {read_write: [%q]}
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 1000000000
    subscriptions:
      - {id: load, category: 2, questions: [{id: t, question: "When?", max_words: 1}]}
---
`, quoteArgs(controller), dir),
			"researcher.md": fmt.Sprintf(`---
name: researcher
runtime: [%s]
autostart: true
tools: [BCPPublish]
bcp_channels:
  - {peer: main, role: reader, max_category: 2, budget_bits: 1000000000}
---
`, quoteArgs(reader)),
		}
		for i := range extra / 2 {
			// "a-" and "z-" sort around main and researcher: half the
			// links before the pair's, half after.
			c, r := fmt.Sprintf("a-ctl-%05d", i), fmt.Sprintf("z-rdr-%05d", i)
			defs[c+".md"] = fmt.Sprintf(`---
name: %s
runtime: [%q]
bcp_channels:
  - peer: %s
    role: controller
    max_category: 3
    budget_bits: 4000
    max_cat2_queries: 5
    subscriptions:
      - {id: alerts, category: 1, fields: [{name: urgent, type: boolean}]}
      - {id: findings, category: 2, questions: [{id: topic, question: "Topic?", max_words: 10}]}
      - {id: digest, category: 3, directive: Summarize., max_words: 100}
---
`, c, benchrtPath, r)
			defs[r+".md"] = fmt.Sprintf(`---
name: %s
runtime: [%q]
tools: [BCPRespond, BCPPublish]
bcp_channels:
  - {peer: %s, role: reader, max_category: 3, budget_bits: 4000}
---
`, r, benchrtPath, c)
		}
		rg := startGateway(b, stateDir, defs, func(c *Config) {
			if len(c.Set.Agents) != 2+extra {
				b.Fatalf("%d agents, want %d", len(c.Set.Agents), 2+extra)
			}
			c.Session = session.Config{FloodRate: 1e9, FloodBurst: 1e9}
			c.MaxBacklog = 1 << 30 // the reader never retries a refused push
		})
		waitFile(b, controller[3])
		if err := rg.stop(); err != nil {
			b.Fatal(err)
		}
	}
}
