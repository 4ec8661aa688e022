package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// pushPolicies are the variants the debounce and batch benchmarks
// compare: the same Cat-2 subscription (one one-word answer, t, which
// internal/benchrt fills with its send time, so no two pushes share a
// key) without a policy, debounced by t, batched, and both.
var pushPolicies = []struct{ name, yaml string }{
	{"plain", ""},
	{"debounce", ", debounce: {key: t, window: 1m}"},
	{"batch", ", batch: {window: 100ms, max: 100}"},
	{"debounce+batch", ", debounce: {key: t, window: 1m}, batch: {window: 100ms, max: 100}"},
}

// BenchmarkPushPolicyFlood is BenchmarkFlood's Reader (internal/benchrt
// flood: publishing flat out) and Controller (answering every delivery
// at once) on each of pushPolicies, through a real Gateway with its
// store: it reports the pushes accepted a second (from the flood's start
// to its last verdict) of each, and each policy's ratio to plain. The
// backlog limit is lifted so that no push is refused. A push is judged
// the same way in all four; what differs is how it is stored (one
// AddDeliveryThen, or AddPushThen's lookups of the key and the open
// batch) and how many turns the Controller takes (one a push, or one a
// batch). BCPGW_POLICY_FLOOD_SECONDS sets the flood's length (default 5).
//
//	go test -run '^$' -bench PushPolicyFlood -benchtime 1x ./gateway
func BenchmarkPushPolicyFlood(b *testing.B) {
	secs := 5
	if v := os.Getenv("BCPGW_POLICY_FLOOD_SECONDS"); v != "" {
		fmt.Sscan(v, &secs)
	}
	rates := map[string]float64{}
	for range b.N {
		for _, p := range pushPolicies {
			rates[p.name] = policyFlood(b, secs, p.yaml)
		}
	}
	for _, p := range pushPolicies {
		b.ReportMetric(rates[p.name], p.name+"-push/s")
		if p.name != "plain" {
			b.ReportMetric(rates[p.name]/rates["plain"], "ratio-"+p.name)
		}
	}
	b.ReportMetric(0, "ns/op") // one op is four floods: not meaningful
}

// policyFlood floods the subscription load, with policy, for secs and
// returns the pushes accepted a second.
func policyFlood(b *testing.B, secs int, policy string) float64 {
	b.Helper()
	dir := b.TempDir()
	defs, readerOut, _ := floodAgents(b, dir, secs, policy)
	gw := startGateway(b, dir, defs, func(c *Config) {
		c.Session = session.Config{FloodRate: 1e9, FloodBurst: 1e9}
		c.MaxBacklog = 1 << 30
	})
	defer gw.stop()
	waitFile(b, readerOut) // every verdict is in
	st, err := os.Stat(readerOut)
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(readerOut)
	if err != nil {
		b.Fatal(err)
	}
	var ended, sent, accepted, full, other int64
	if _, err := fmt.Sscan(string(data), &ended, &sent, &accepted, &full, &other); err != nil {
		b.Fatal(err)
	}
	if full+other != 0 || accepted != sent || accepted == 0 {
		b.Fatalf("policy %q: %d sent, %d accepted, %d backlog_full, %d other refusals; want all accepted", policy, sent, accepted, full, other)
	}
	began := time.Unix(0, ended).Add(-time.Duration(secs) * time.Second)
	return float64(accepted) / st.ModTime().Sub(began).Seconds()
}

// BenchmarkPushPolicyStore is the store's part of admitting a push, on
// its own: 512 pushes submitted at once (as a flooding Reader's do, so
// that the writer commits them in groups) stored as a plain push
// (AddDeliveryThen) or under each policy (AddPushThen: the debounce
// key's lookup, the open batch's and its line's, as the gateway sets
// them, and a batch closed every 100 pushes),
// with the gateway's events. One op is one push, timed until it is
// durable; each policy's ns/op against plain's is the ratio.
//
//	go test -run '^$' -bench PushPolicyStore ./gateway
func BenchmarkPushPolicyStore(b *testing.B) {
	const group = 512
	for _, p := range pushPolicies {
		b.Run(p.name, func(b *testing.B) {
			st, err := store.Open(filepath.Join(b.TempDir(), "bcpgw.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			debounce, batch := p.name != "plain" && p.name != "batch", p.name != "plain" && p.name != "debounce"
			var wg sync.WaitGroup
			var failed error
			var mu sync.Mutex
			fail := func(err error) {
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
				wg.Done()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				now := time.Now()
				t := fmt.Sprint(now.UnixNano() + int64(i))
				d := store.Delivery{Controller: "main", Reader: "researcher", SubscriptionID: "load", Category: bcp.Cat2,
					Response: []byte(`{"t":"` + t + `"}`), Bits: 20, CreatedAt: now}
				ev := store.Event{Time: now, Kind: "publish_accepted", Agent: "researcher", Peer: "main", Category: 2, Bits: 20}
				wg.Add(1)
				if !debounce && !batch {
					st.AddDeliveryThen(d, []store.Event{ev}, func(_ store.Delivery, err error) { fail(err) })
				} else {
					pp := store.PushPolicy{Supersede: store.Event{Time: now, Kind: "push_superseded", Agent: "researcher", Peer: "main"}}
					if debounce {
						pp.Entity, pp.Since, pp.Claim = `"`+t+`"`, now.Add(-time.Minute), func(string, int64) bool { return true }
					}
					if batch {
						pp.Batch, pp.BatchMax, pp.BatchMaxBytes, pp.BatchMaxLine = true, 100, MaxBatchBytes, MaxBatchLine
						pp.Close = store.Event{Time: now, Kind: "batch_closed"}
					}
					st.AddPushThen(d, pp, []store.Event{ev}, func(_ store.PushOutcome, err error) { fail(err) })
				}
				if (i+1)%group == 0 {
					wg.Wait()
				}
			}
			wg.Wait() // timed: the last pushes are durable
			b.StopTimer()
			if failed != nil {
				b.Fatal(failed)
			}
		})
	}
}
