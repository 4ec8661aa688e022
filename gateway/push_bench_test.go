package gateway

import (
	"bufio"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// BenchmarkPushVsRelay sends the same pushes between the same two runtime
// processes (internal/benchrt) three ways: through the gateway, with
// validation, budgets and the durable store; through a raw relay that
// only copies lines; and through an acknowledging relay that copies lines
// but, like the protocol (PROTOCOL.md section 5, Delivery), sends the
// next delivery only after the controller's result for the one before.
// It reports, side by side, the pushes a second each sustains (the reader
// publishes as fast as it can) and SQLite alone storing one row per push
// with group commit (rawGroupCommit), the latency from publish to
// delivery at a steady 1,000 pushes a second, and the ratios of the
// throughputs, flat out and at that steady rate.
func BenchmarkPushVsRelay(b *testing.B) {
	const (
		burst = 5000 // pushes of the throughput run
		rate  = 1000 // pushes a second of the latency run
		paced = 3000 // pushes of the latency run
	)
	var gwRate, metricsRate, relayRate, ackedRate, sqliteRate, gwPaced, relayPaced float64
	var gwLat, relayLat []time.Duration
	for range b.N {
		gwRate = throughput(runPushes(b, viaGateway, burst, 0))
		metricsRate = throughput(runPushes(b, viaGatewayWithMetrics, burst, 0))
		relayRate = throughput(runPushes(b, viaRelay(false), burst, 0))
		ackedRate = throughput(runPushes(b, viaRelay(true), burst, 0))
		sqliteRate = rawGroupCommit(b, burst)
		gw := runPushes(b, viaGateway, paced, rate)
		relay := runPushes(b, viaRelay(false), paced, rate)
		gwPaced, relayPaced = throughput(gw), throughput(relay)
		gwLat, relayLat = latencies(gw), latencies(relay)
	}
	b.ReportMetric(gwPaced/relayPaced, "ratio-at-1000/s")
	b.ReportMetric(gwRate, "gw-push/s")
	b.ReportMetric(metricsRate, "gw-metrics-push/s")
	b.ReportMetric(metricsRate/gwRate, "ratio-metrics")
	b.ReportMetric(relayRate, "relay-push/s")
	b.ReportMetric(ackedRate, "acked-relay-push/s")
	b.ReportMetric(gwRate/relayRate, "ratio")
	b.ReportMetric(gwRate/ackedRate, "ratio-acked")
	b.ReportMetric(sqliteRate, "sqlite-push/s")
	b.ReportMetric(gwRate/sqliteRate, "ratio-sqlite")
	b.ReportMetric(micros(percentile(gwLat, 50)), "gw-p50-µs")
	b.ReportMetric(micros(percentile(gwLat, 99)), "gw-p99-µs")
	b.ReportMetric(micros(percentile(relayLat, 50)), "relay-p50-µs")
	b.ReportMetric(micros(percentile(relayLat, 99)), "relay-p99-µs")
	b.ReportMetric(0, "ns/op") // one op is a whole scenario: not meaningful
}

// rawGroupCommit is the floor of durable storage: SQLite alone, with the
// store's pragmas (WAL, synchronous=FULL), inserting n deliveries one row
// per push, up to 512 rows a commit as the store's group commit would
// under load. It returns the rows a second.
func rawGroupCommit(b *testing.B, n int) float64 {
	b.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.TempDir(), "raw.db")+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE deliveries (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
		controller TEXT NOT NULL, reader TEXT NOT NULL, subscription_id TEXT NOT NULL, category INTEGER NOT NULL,
		response TEXT NOT NULL, bits REAL NOT NULL, state TEXT NOT NULL DEFAULT 'pending', created_at INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		for end := min(i+512, n); i < end; i++ {
			if _, err := tx.Exec(`INSERT INTO deliveries (id, controller, reader, subscription_id, category, response, bits, created_at)
				VALUES (?,?,?,?,?,?,?,?)`, store.NewID("dl-", 16), "main", "researcher", "load", 2,
				fmt.Sprintf(`{"t":"%d"}`, time.Now().UnixNano()), 3.0, time.Now().UnixMilli()); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// timing is one push: when the reader sent it and the controller got it.
type timing struct{ sent, recv int64 }

type pushPath func(b *testing.B, dir string, reader, controller []string)

// runPushes runs n pushes at rate (0: flat out) over path and returns
// their timings.
func runPushes(b *testing.B, path pushPath, n, rate int) []timing {
	b.Helper()
	dir := b.TempDir()
	// In the controller's default workdir (the gateway's state is dir):
	// the only place of dir its sandbox can write.
	out := filepath.Join(agents.DefaultWorkdir(dir, "main"), "timings")
	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		b.Fatal(err)
	}
	path(b, dir,
		[]string{benchrtPath, "reader", fmt.Sprint(n), fmt.Sprint(rate)},
		[]string{benchrtPath, "controller", fmt.Sprint(n), out})
	f, err := os.Open(out)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var ts []timing
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var t timing
		if _, err := fmt.Sscan(sc.Text(), &t.sent, &t.recv); err != nil {
			b.Fatal(err)
		}
		ts = append(ts, t)
	}
	if len(ts) != n {
		b.Fatalf("%d timings, want %d", len(ts), n)
	}
	return ts
}

// waitFile waits until path exists (the controller has all pushes).
func waitFile(b *testing.B, path string) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never written", path)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// viaGateway runs the pair as agents of a Gateway with a store.
func viaGateway(b *testing.B, dir string, reader, controller []string) {
	b.Helper()
	runGateway(b, dir, reader, controller, nil)
}

// viaGatewayWithMetrics is viaGateway recording Prometheus metrics, to
// weigh what they cost on the push path.
func viaGatewayWithMetrics(b *testing.B, dir string, reader, controller []string) {
	b.Helper()
	runGateway(b, dir, reader, controller, NewMetrics(prometheus.NewRegistry()))
}

func runGateway(b *testing.B, dir string, reader, controller []string, m *Metrics) {
	b.Helper()
	defs := map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
runtime: [%s]
autostart: true
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 2
    budget_bits: 1000000000
    subscriptions:
      - {id: load, category: 2, questions: [{id: t, question: "When?", max_words: 1}]}
---
`, quoteArgs(controller)),
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
	rg := startGateway(b, dir, defs, func(c *Config) {
		c.Metrics = m
		// The default flood limit (200 lines/s) is for model-driven
		// agents; the benchmark reader publishes thousands a second.
		c.Session = session.Config{FloodRate: 1e9, FloodBurst: 1e9}
		// The reader publishes without retrying: nothing may be refused
		// for a backlog (the flood benchmark measures that).
		c.MaxBacklog = 1 << 30
	})
	waitFile(b, controller[3])
	if err := rg.stop(); err != nil {
		b.Fatal(err)
	}
}

// viaRelay runs the pair with a minimal relay between them: the start and
// ready handshake, the subscription announcement, then every line of each
// copied as is to the other. An acked relay waits for the controller's
// result line after each line it gives the controller.
func viaRelay(acked bool) pushPath {
	return func(b *testing.B, dir string, reader, controller []string) { relay(b, acked, reader, controller) }
}

func relay(b *testing.B, acked bool, reader, controller []string) {
	b.Helper()
	type proc struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}
	start := func(argv []string) proc {
		cmd := exec.Command(argv[0], argv[1:]...)
		in, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		p := proc{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 64<<10)}
		io.WriteString(in, `{"type":"start","agent":{"name":"x"}}`+"\n")
		if line, err := p.out.ReadString('\n'); err != nil || !strings.Contains(line, "ready") {
			b.Fatalf("no ready: %q %v", line, err)
		}
		return p
	}
	r, c := start(reader), start(controller)
	defer func() {
		for _, p := range []proc{r, c} {
			p.in.Close()
			p.cmd.Wait()
		}
	}()
	copyLines := func(dst io.Writer, src *bufio.Reader) {
		w := bufio.NewWriterSize(dst, 64<<10)
		for {
			line, err := src.ReadSlice('\n')
			if len(line) > 0 {
				w.Write(line)
				if src.Buffered() == 0 {
					w.Flush()
				}
			}
			if err != nil && err != bufio.ErrBufferFull {
				w.Flush()
				return
			}
		}
	}
	if acked {
		go func() {
			w := bufio.NewWriter(c.in)
			for {
				line, err := r.out.ReadSlice('\n')
				if err != nil {
					return
				}
				w.Write(line)
				w.Flush()
				if _, err := c.out.ReadSlice('\n'); err != nil { // its result
					return
				}
			}
		}()
	} else {
		go copyLines(c.in, r.out)
		go copyLines(r.in, c.out)
	}
	io.WriteString(r.in, `{"type":"bcp_subscriptions_active","subscriptions":[{"subscription_id":"load","controller":"main","category":2}]}`+"\n")
	waitFile(b, controller[3])
}

func quoteArgs(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, ", ")
}

// throughput is pushes a second from the first send to the last receipt.
func throughput(ts []timing) float64 {
	first, last := ts[0].sent, ts[0].recv
	for _, t := range ts {
		first, last = min(first, t.sent), max(last, t.recv)
	}
	return float64(len(ts)) / (float64(last-first) / 1e9)
}

func latencies(ts []timing) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = time.Duration(t.recv - t.sent)
	}
	slices.Sort(out)
	return out
}

func percentile(sorted []time.Duration, p int) time.Duration {
	return sorted[(len(sorted)-1)*p/100]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
