// Command benchrt is the runtime pair of bcpgw's push benchmark. It speaks
// the wire protocol directly, without the SDK, so that the same two
// programs run behind the gateway and behind a raw relay that only copies
// lines (BenchmarkPushVsRelay in package gateway).
//
//	benchrt reader N RATE    after start and bcp_subscriptions_active,
//	                         publishes N pushes to subscription "load" of
//	                         controller "main", RATE a second (0: as fast
//	                         as the pipe takes them), without waiting for
//	                         verdicts; each carries its send time
//	benchrt controller N OUT answers every delivery with result at once;
//	                         after N, writes to OUT one line per push: the
//	                         send and receive times in unix nanoseconds
//	benchrt flood SECS OUT   a reader that publishes as fast as the pipe
//	                         takes them for SECS seconds, then, once every
//	                         verdict is in, writes to OUT: the end of the
//	                         flood (unix ns), pushes sent, accepted,
//	                         refused with backlog_full, refused otherwise
//	benchrt controller-log - OUT answers every delivery with result at
//	                         once and appends its send and receive times
//	                         to OUT as it goes (BenchmarkFlood)
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: benchrt reader N RATE | benchrt controller N OUT")
		os.Exit(2)
	}
	if os.Args[1] == "controller-log" && len(os.Args) == 4 {
		in := bufio.NewScanner(os.Stdin)
		in.Buffer(make([]byte, 1<<20), 1<<20)
		controllerLog(in, bufio.NewWriter(os.Stdout), os.Args[3])
		return
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil || len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "benchrt: bad arguments")
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	switch os.Args[1] {
	case "reader":
		rate, _ := strconv.Atoi(os.Args[3])
		reader(in, out, n, rate)
	case "controller":
		controller(in, out, n, os.Args[3])
	case "flood":
		flood(in, out, time.Duration(n)*time.Second, os.Args[3])
	}
}

var (
	typeStart = []byte(`"type":"start"`)
	typeSubs  = []byte(`"type":"bcp_subscriptions_active"`)
	sentAt    = []byte(`"t":"`)
)

func reader(in *bufio.Scanner, out *bufio.Writer, n, rate int) {
	for in.Scan() {
		line := in.Bytes()
		switch {
		case bytes.Contains(line, typeStart):
			out.WriteString(`{"type":"ready"}` + "\n")
			out.Flush()
		case bytes.Contains(line, typeSubs):
			go publish(out, n, rate)
		}
		// Verdicts and everything else are read and dropped.
	}
}

func publish(out *bufio.Writer, n, rate int) {
	var tick *time.Ticker
	if rate > 0 {
		tick = time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
	}
	for i := 0; i < n; i++ {
		if tick != nil {
			<-tick.C
		}
		fmt.Fprintf(out, `{"type":"bcp_response","subscription_id":"load","controller":"main","response":{"t":"%d"}}`+"\n", time.Now().UnixNano())
		if tick != nil || i%64 == 63 || i == n-1 {
			out.Flush()
		}
	}
}

func controller(in *bufio.Scanner, out *bufio.Writer, n int, path string) {
	sent := make([]int64, 0, n)
	recv := make([]int64, 0, n)
	serveDeliveries(in, out, func(t, now int64) {
		if len(sent) < n {
			sent, recv = append(sent, t), append(recv, now)
			if len(sent) == n {
				write(path, sent, recv)
			}
		}
	})
}

// serveDeliveries answers start with ready and every delivery with
// result, after passing record its send time and when it was received.
func serveDeliveries(in *bufio.Scanner, out *bufio.Writer, record func(sent, recv int64)) {
	for in.Scan() {
		line := in.Bytes()
		if bytes.Contains(line, typeStart) {
			out.WriteString(`{"type":"ready"}` + "\n")
			out.Flush()
			continue
		}
		now := time.Now().UnixNano()
		t, ok := sendTime(line)
		if !ok {
			continue
		}
		record(t, now)
		out.WriteString(`{"type":"result","duration_ms":0,"num_turns":1,"cost_usd":0,"is_error":false}` + "\n")
		out.Flush()
	}
}

// sendTime reads the send time a pushed line carries ("t":"unix ns").
func sendTime(line []byte) (int64, bool) {
	i := bytes.Index(line, sentAt)
	if i < 0 {
		return 0, false
	}
	rest := line[i+len(sentAt):]
	end := bytes.IndexByte(rest, '"')
	t, err := strconv.ParseInt(string(rest[:max(end, 0)]), 10, 64)
	return t, err == nil
}

func write(path string, sent, recv []int64) {
	var b bytes.Buffer
	for i := range sent {
		fmt.Fprintf(&b, "%d %d\n", sent[i], recv[i])
	}
	// Written whole, then renamed, so the benchmark never reads half.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err == nil {
		_ = os.Rename(tmp, path) // the benchmark waits for the file: a failure shows there
	}
}

var (
	typeVerdict = []byte(`"type":"bcp_validation_result"`)
	success     = []byte(`"success":true`)
	backlogFull = []byte(`"detail":"backlog_full:`)
)

// flood publishes flat out for d, then waits for every verdict and writes
// its counts to path.
func flood(in *bufio.Scanner, out *bufio.Writer, d time.Duration, path string) {
	var sent, ended, verdicts, accepted, full, other atomic.Int64
	sent.Store(-1) // not done sending
	var once sync.Once
	// report writes the counts once every verdict is in; both the sender
	// (done sending) and the reader of verdicts (one more) check.
	report := func() {
		if verdicts.Load() != sent.Load() {
			return
		}
		once.Do(func() {
			data := fmt.Sprintf("%d %d %d %d %d\n", ended.Load(), sent.Load(), accepted.Load(), full.Load(), other.Load())
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte(data), 0o600); err == nil {
				_ = os.Rename(tmp, path)
			}
		})
	}
	for in.Scan() {
		line := in.Bytes()
		switch {
		case bytes.Contains(line, typeStart):
			out.WriteString(`{"type":"ready"}` + "\n")
			out.Flush()
		case bytes.Contains(line, typeSubs):
			go func() {
				stop := time.Now().Add(d)
				n := int64(0)
				for time.Now().Before(stop) {
					for range 64 {
						fmt.Fprintf(out, `{"type":"bcp_response","subscription_id":"load","controller":"main","response":{"t":"%d"}}`+"\n", time.Now().UnixNano())
						n++
					}
					out.Flush()
				}
				ended.Store(time.Now().UnixNano())
				sent.Store(n)
				report()
			}()
		case bytes.Contains(line, typeVerdict):
			switch {
			case bytes.Contains(line, success):
				accepted.Add(1)
			case bytes.Contains(line, backlogFull):
				full.Add(1)
			default:
				other.Add(1)
			}
			verdicts.Add(1)
			report()
		}
	}
}

// controllerLog answers every delivery at once and appends its send and
// receive times to path.
func controllerLog(in *bufio.Scanner, out *bufio.Writer, path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrt:", err)
		os.Exit(1)
	}
	log := bufio.NewWriter(f)
	serveDeliveries(in, out, func(t, now int64) {
		fmt.Fprintf(log, "%d %d\n", t, now)
		log.Flush()
	})
}
