package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// BenchmarkHeapWithPendingBacklog starts a gateway on a state file that
// holds 1,000, then 1,000,000 pending deliveries for one Controller
// (accepted by an earlier run), lets the Controller acknowledge the first
// 1,000, and reports the gateway's heap in use then, for both, and their
// ratio: the outbox reads the backlog a page at a time, so the heap
// should not grow with it (goal: a ratio near 1).
func BenchmarkHeapWithPendingBacklog(b *testing.B) {
	var small, large uint64
	for range b.N {
		small = heapWithBacklog(b, 1_000)
		large = heapWithBacklog(b, 1_000_000)
	}
	b.ReportMetric(float64(small)/(1<<20), "heap-MiB-1k")
	b.ReportMetric(float64(large)/(1<<20), "heap-MiB-1M")
	b.ReportMetric(float64(large)/float64(small), "ratio")
	b.ReportMetric(0, "ns/op")
}

func heapWithBacklog(b *testing.B, pending int) uint64 {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	dir := b.TempDir()
	received := filepath.Join(agents.DefaultWorkdir(dir, "main"), "received")
	if err := os.MkdirAll(filepath.Dir(received), 0o700); err != nil {
		b.Fatal(err)
	}
	defs := map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
runtime: [%q, "controller-log", "-", %q]
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 1000000000
    subscriptions:
      - {id: load, category: 2, questions: [{id: t, question: "When?", max_words: 1}]}
---
`, benchrtPath, received),
		"researcher.md": "---\nname: researcher\nruntime: [\"true\"]\ntools: [BCPPublish]\nbcp_channels:\n  - {peer: main, role: reader, max_category: 2, budget_bits: 1000000000}\n---\n",
	}
	startGateway(b, dir, defs, func(c *Config) { seedBacklog(b, c.Store, pending) })
	deadline := time.Now().Add(2 * time.Minute)
	for countLines(received) < 1000 {
		if time.Now().After(deadline) {
			b.Fatalf("the controller got %d deliveries in 2 minutes, want 1000", countLines(received))
		}
		time.Sleep(20 * time.Millisecond)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// seedBacklog stores n pending deliveries from researcher to main, as an
// earlier run would have left them, written flat out.
func seedBacklog(b *testing.B, st *store.Store, n int) {
	b.Helper()
	errs := make(chan error, 1)
	for range n {
		d := store.Delivery{Controller: "main", Reader: "researcher", SubscriptionID: "load", Category: 2,
			Response: json.RawMessage(fmt.Sprintf(`{"t":"%d"}`, time.Now().UnixNano())), Bits: 3, CreatedAt: time.Now()}
		st.AddDeliveryThen(d, nil, func(_ store.Delivery, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := st.AppendSync(context.Background(), store.Event{Time: time.Now(), Kind: "bench_barrier"}); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	runtime.GC()
}

func countLines(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
	}
	return n
}
