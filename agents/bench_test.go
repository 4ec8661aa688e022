package agents

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchSet writes n definitions (n/2 controller-reader pairs, each
// controller declaring a Cat-1, a Cat-2 and a Cat-3 subscription) into a
// temporary directory.
func benchSet(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	for i := 0; i < n/2; i++ {
		c, r := fmt.Sprintf("ctl-%05d", i), fmt.Sprintf("rdr-%05d", i)
		files := map[string]string{
			c: fmt.Sprintf(`---
name: %s
runtime: [bin/demo-agent, --role, controller]
tools: Read, BCPQuery
bcp_channels:
  - peer: %s
    role: controller
    max_category: 3
    budget_bits: 4000
    max_cat2_queries: 5
    subscriptions:
      - id: alerts
        category: 1
        fields:
          - {name: urgent, type: boolean}
          - {name: level, type: enum, values: [low, high]}
          - {name: score, type: integer, min: 1, max: 5}
      - id: findings
        category: 2
        questions:
          - {id: topic, question: "Topic?", max_words: 10}
          - {id: when, question: "When?", max_words: 1, expected_format: date}
      - id: digest
        category: 3
        directive: Summarize.
        max_words: 100
cron_schedules:
  - {schedule: "*/5 * * * *", message: "Poll."}
---
You are controller %d.
`, c, r, i),
			r: fmt.Sprintf(`---
name: %s
runtime: bin/demo-agent --role reader
tools: [Read, BCPRespond, BCPPublish]
bcp_channels:
  - {peer: %s, role: reader, max_category: 3, budget_bits: 4000}
---
You are reader %d.
`, r, c, i),
		}
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(text), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	return dir
}

// BenchmarkLoadDir1000 loads a directory of 1,000 definitions.
// BenchmarkReadDir1000 only reads the same files: the I/O baseline that
// LoadDir's cost is compared with.
func BenchmarkLoadDir1000(b *testing.B) {
	dir := benchSet(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		set, err := LoadDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		if len(set.Agents) != 1000 {
			b.Fatalf("loaded %d agents", len(set.Agents))
		}
	}
}

func BenchmarkReadDir1000(b *testing.B) {
	dir := benchSet(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		entries, err := os.ReadDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range entries {
			if _, err := os.ReadFile(filepath.Join(dir, e.Name())); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkParse parses one controller definition from memory.
func BenchmarkParse(b *testing.B) {
	dir := benchSet(b, 2)
	data, err := os.ReadFile(filepath.Join(dir, "ctl-00000.md"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("ctl-00000.md", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadScaling loads sets of 2,000 and 20,000 definitions and
// reports the time per agent of each: Load is linear when the two are
// alike. (bcpgw validate and a reload are this load plus output.)
//
//	go test ./agents -run '^$' -bench LoadScaling -benchtime 3x
func BenchmarkLoadScaling(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			dir := benchSet(b, n)
			for b.Loop() {
				if _, err := LoadDir(dir); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/agent")
		})
	}
}

// BenchmarkPushLookups does what the gateway asks of the set for one push
// (the channel and the subscription, as the router, the rate limiter and
// the publisher each look them up) in a set of 2 agents and of 10,000,
// for the pair whose channel sorts last.
func BenchmarkPushLookups(b *testing.B) {
	for _, n := range []int{2, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			set, err := LoadDir(benchSet(b, n))
			if err != nil {
				b.Fatal(err)
			}
			c, r := fmt.Sprintf("ctl-%05d", n/2-1), fmt.Sprintf("rdr-%05d", n/2-1)
			b.ReportAllocs()
			for b.Loop() {
				if set.Link(c, r) == nil || set.Link(c, r) == nil ||
					set.Subscription(c, r, "digest") == nil || set.Subscription(c, r, "digest") == nil {
					b.Fatal("not found")
				}
			}
		})
	}
}
