// Command testrt is a scriptable runtime for bcpgw's end-to-end tests. It
// is built by the tests that use it and never installed. It is configured
// by environment variables, which the test's agent definitions pass
// through their env:
//
//	TESTRT_LOG       required: a file to which it appends one JSON object
//	                 per thing that happened (see record)
//	TESTRT_PUBLISH   a JSON array of {subscription_id, controller, response,
//	                 repeat}: published in order once subscriptions are
//	                 first announced (each announcement is logged as
//	                 "subscriptions", controller/id joined by commas, and
//	                 in subs with each one's rate limit), and again as the turn of every prompt
//	                 "publish" (so an agent that is announced nothing can
//	                 try too), each waiting for its verdict; "{i}" in a
//	                 response is replaced by the publish's number
//	TESTRT_ANSWERS   a JSON array of responses: each query is answered with
//	                 the first, then the next after a refusal, and so on
//	TESTRT_ANSWER_ALL "1": each query is answered with every response of
//	                 TESTRT_ANSWERS in turn, whatever the verdicts
//	TESTRT_SILENT    "1": queries are received but never answered
//	TESTRT_QUERIES   a JSON array of bcp_query_request bodies {request_id,
//	                 to, category, spec}, each spec sent exactly as written:
//	                 sent, in order, on every prompt
//	                 "query"; each is logged as query_sent or query_error
//	                 with its index in the array and its request_id
//	TESTRT_SUBSCRIBE a JSON array of bcp_subscribe_request bodies {request_id,
//	                 to, category, spec}, each spec sent exactly as written:
//	                 sent, in order, on every prompt "subscribe"; each first
//	                 answer, and every later bcp_subscribe_result, is logged
//	                 as "subscribe_result" (index, request_id,
//	                 subscription_id, detail "STATUS: REASON")
//	TESTRT_PUBLISH_NEW a JSON object {response, repeat}: published to each
//	                 subscription whose id starts with "rt-" (one a
//	                 Controller asked for at run time) when it is first
//	                 announced, each waiting for its verdict, and again to
//	                 every such id ever announced on a prompt "publish-rt"
//	TESTRT_DELAY     a Go duration: how long each delivery takes to apply
//	TESTRT_CRASH_AT  N: exit with status 3 on the Nth delivery in the log
//	                 (counting those of earlier processes), before
//	                 acknowledging it
//
// Deliveries are applied (logged as "applied") once per delivery_id, across
// processes too: the ids already applied are read back from the log.
//
// A prompt "hold" is logged and then not answered until its turn is
// interrupted or the runtime is shut down: it stays in flight, and the
// turns the gateway queues behind it wait, until the test ends the
// session.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/runtime"
)

// record is one line of the log.
type record struct {
	Event          string          `json:"event"` // verdict, query, query_sent, query_error, query_failed, delivery, applied, prompt
	Pid            int             `json:"pid"`
	Index          int             `json:"index,omitempty"`
	SubscriptionID string          `json:"subscription_id,omitempty"`
	QueryID        string          `json:"query_id,omitempty"`
	RequestID      string          `json:"request_id,omitempty"`
	DeliveryID     string          `json:"delivery_id,omitempty"`
	Redelivered    bool            `json:"redelivered,omitempty"`
	Success        bool            `json:"success,omitempty"`
	Detail         string          `json:"detail,omitempty"`
	Category       int             `json:"category,omitempty"`
	Bits           float64         `json:"bits,omitempty"`
	Response       json.RawMessage `json:"response,omitempty"`
	Prompt         string          `json:"prompt,omitempty"`
	Anomalies      int             `json:"anomalies,omitempty"`
	Filtered       bool            `json:"filtered,omitempty"`   // a verdict's
	Superseded     string          `json:"superseded,omitempty"` // a verdict's
	Items          int             `json:"items,omitempty"`      // a batch delivery's
	// Subs are the subscriptions of a "subscriptions" record, each with
	// what was announced of its rate limit.
	Subs []announced `json:"subs,omitempty"`
}

// announced is one subscription of an announcement, as logged.
type announced struct {
	Controller     string             `json:"controller"`
	SubscriptionID string             `json:"subscription_id"`
	RateLimit      *runtime.RateLimit `json:"rate_limit,omitempty"`
}

type publish struct {
	SubscriptionID string          `json:"subscription_id"`
	Controller     string          `json:"controller"`
	Response       json.RawMessage `json:"response"`
	Repeat         int             `json:"repeat"`
}

type logger struct {
	mu sync.Mutex
	f  *os.File
}

// write appends r as one line with one write call, so that lines of
// several processes never interleave.
func (l *logger) write(r record) {
	r.Pid = sessionKey()
	b, _ := json.Marshal(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "testrt: write log:", err)
	}
}

// sessionKey identifies this runtime's session: the inode of its pid
// namespace, which is the sandbox's own. (Its pid inside the sandbox is
// the same small number in every session.) The tests read the same number
// from /proc/PID/ns/pid of the session's process. Without a pid
// namespace of its own (sandbox: none), it is the pid.
func sessionKey() int {
	if os.Getppid() == 1 {
		if k, err := procKey("/proc/self/ns/pid", "/proc/1/stat"); err == nil {
			return k
		}
	}
	return os.Getpid()
}

// procKey combines the inode of a pid namespace with the start time of
// its init (namespace inodes are reused once freed).
func procKey(nsPath, statPath string) (int, error) {
	fi, err := os.Stat(nsPath)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(statPath)
	if err != nil {
		return 0, err
	}
	// Field 22, counted after the command name's closing parenthesis.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 20 {
		return 0, fmt.Errorf("short stat")
	}
	start, err := strconv.Atoi(f[19])
	if err != nil {
		return 0, err
	}
	return start<<32 | int(fi.Sys().(*syscall.Stat_t).Ino&0xffffffff), nil
}

func main() {
	path := os.Getenv("TESTRT_LOG")
	if path == "" {
		fmt.Fprintln(os.Stderr, "testrt: TESTRT_LOG is required")
		os.Exit(2)
	}
	applied, deliveries := readLog(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrt:", err)
		os.Exit(2)
	}
	log := &logger{f: f}
	var publishes []publish
	var answers []json.RawMessage
	// Each query's spec is sent exactly as written, so a test can send one
	// the gateway must refuse (a misspelled key).
	var rawQueries []struct {
		RequestID string          `json:"request_id"`
		To        string          `json:"to"`
		Category  int             `json:"category"`
		Spec      json.RawMessage `json:"spec"`
	}
	rawSubscribes := rawQueries[:0:0]
	var publishNew *publish
	for name, v := range map[string]any{"TESTRT_PUBLISH": &publishes, "TESTRT_ANSWERS": &answers, "TESTRT_QUERIES": &rawQueries,
		"TESTRT_SUBSCRIBE": &rawSubscribes, "TESTRT_PUBLISH_NEW": &publishNew} {
		if s := os.Getenv(name); s != "" {
			if err := json.Unmarshal([]byte(s), v); err != nil {
				fmt.Fprintf(os.Stderr, "testrt: %s: %v\n", name, err)
				os.Exit(2)
			}
		}
	}
	queries := make([]runtime.QueryRequest, len(rawQueries))
	for i, q := range rawQueries {
		queries[i] = runtime.QueryRequest{RequestID: q.RequestID, To: q.To, Category: bcp.Category(q.Category), Spec: runtime.QuerySpec{Raw: q.Spec}}
	}
	subscribes := make([]runtime.SubscribeRequest, len(rawSubscribes))
	for i, q := range rawSubscribes {
		subscribes[i] = runtime.SubscribeRequest{RequestID: q.RequestID, To: q.To, Category: bcp.Category(q.Category), Spec: runtime.QuerySpec{Raw: q.Spec}}
	}
	crashAt, _ := strconv.Atoi(os.Getenv("TESTRT_CRASH_AT"))
	silent := os.Getenv("TESTRT_SILENT") == "1"
	delay, _ := time.ParseDuration(os.Getenv("TESTRT_DELAY"))
	answerAll := os.Getenv("TESTRT_ANSWER_ALL") == "1"
	var appliedMu sync.Mutex
	announcements := 0 // Subscriptions calls; the SDK makes them one at a time

	// publishAll publishes TESTRT_PUBLISH in order, each after the verdict
	// on the one before.
	publishAll := func(ctx context.Context, c *runtime.Client) {
		n := 0
		for _, p := range publishes {
			for range max(p.Repeat, 1) {
				resp := strings.ReplaceAll(string(p.Response), "{i}", strconv.Itoa(n))
				r, err := c.Publish(ctx, p.SubscriptionID, p.Controller, json.RawMessage(resp))
				if err != nil {
					return
				}
				log.write(record{Event: "verdict", Index: n, SubscriptionID: r.SubscriptionID, Success: r.Success, Detail: r.Detail, Filtered: r.Filtered, Superseded: r.Superseded})
				n++
			}
		}
	}

	// The subscriptions asked for at run time ever announced, in order.
	var rtMu sync.Mutex
	var rtSubs []runtime.ActiveSubscription
	pushed := 0
	publishTo := func(ctx context.Context, c *runtime.Client, subs []runtime.ActiveSubscription) {
		for _, s := range subs {
			for range max(publishNew.Repeat, 1) {
				rtMu.Lock()
				n := pushed
				pushed++
				rtMu.Unlock()
				resp := strings.ReplaceAll(string(publishNew.Response), "{i}", strconv.Itoa(n))
				r, err := c.Publish(ctx, s.SubscriptionID, s.Controller, json.RawMessage(resp))
				if err != nil {
					return
				}
				log.write(record{Event: "verdict", Index: n, SubscriptionID: r.SubscriptionID, Success: r.Success, Detail: r.Detail, Filtered: r.Filtered, Superseded: r.Superseded})
			}
		}
	}
	logSubscribe := func(i int, r runtime.SubscribeResult) {
		log.write(record{Event: "subscribe_result", Index: i, RequestID: r.RequestID, SubscriptionID: r.SubscriptionID,
			Category: int(r.Category), Bits: r.BandwidthBits, Detail: strings.TrimSuffix(r.Status+": "+r.Reason, ": ")})
	}

	runtime.Main(runtime.Handler{
		Subscriptions: func(ctx context.Context, c *runtime.Client, subs []runtime.ActiveSubscription) {
			ids := make([]string, 0, len(subs))
			logged := make([]announced, 0, len(subs))
			var fresh []runtime.ActiveSubscription
			rtMu.Lock()
			for _, s := range subs {
				ids = append(ids, s.Controller+"/"+s.SubscriptionID)
				logged = append(logged, announced{Controller: s.Controller, SubscriptionID: s.SubscriptionID, RateLimit: s.RateLimit})
				known := false
				for _, o := range rtSubs {
					known = known || (o.SubscriptionID == s.SubscriptionID && o.Controller == s.Controller)
				}
				if strings.HasPrefix(s.SubscriptionID, "rt-") && !known {
					rtSubs = append(rtSubs, s)
					fresh = append(fresh, s)
				}
			}
			rtMu.Unlock()
			log.write(record{Event: "subscriptions", Detail: strings.Join(ids, ","), Subs: logged})
			if announcements++; announcements == 1 {
				go publishAll(ctx, c)
			}
			if publishNew != nil && len(fresh) > 0 {
				go publishTo(ctx, c, fresh)
			}
		},
		SubscribeResult: func(_ *runtime.Client, r runtime.SubscribeResult) { logSubscribe(-1, r) },
		Prompt: func(ctx context.Context, c *runtime.Client, p runtime.Prompt) error {
			log.write(record{Event: "prompt", Prompt: p.Content})
			switch p.Content {
			case "hold":
				<-ctx.Done()
			case "publish":
				publishAll(ctx, c)
			case "subscribe":
				for i, q := range subscribes {
					r, err := c.Subscribe(ctx, q)
					if err != nil && r.Status == "" {
						log.write(record{Event: "subscribe_result", Index: i, RequestID: q.RequestID, Detail: "error: " + err.Error()})
						continue
					}
					logSubscribe(i, r)
				}
			case "publish-rt":
				if publishNew != nil {
					rtMu.Lock()
					subs := append([]runtime.ActiveSubscription(nil), rtSubs...)
					rtMu.Unlock()
					publishTo(ctx, c, subs)
				}
			case "query":
				for i, q := range queries {
					sent, err := c.Query(ctx, q)
					if err != nil {
						log.write(record{Event: "query_error", Index: i, RequestID: q.RequestID, Detail: err.Error()})
						continue
					}
					log.write(record{Event: "query_sent", Index: i, QueryID: sent.QueryID, RequestID: sent.RequestID, Bits: sent.BandwidthBits})
				}
			}
			return nil
		},
		Query: func(ctx context.Context, c *runtime.Client, q runtime.Query) error {
			log.write(record{Event: "query", QueryID: q.QueryID, Category: int(q.Category), Detail: q.FromAgent})
			if silent {
				return nil
			}
			for _, a := range answers {
				r, err := c.Respond(ctx, q.QueryID, a)
				if err != nil {
					return err
				}
				log.write(record{Event: "verdict", QueryID: r.QueryID, Success: r.Success, Detail: r.Detail})
				if !answerAll && (r.Success || strings.HasPrefix(r.Detail, "query_not_found")) {
					return nil
				}
			}
			return nil
		},
		QueryFailed: func(_ *runtime.Client, e runtime.QueryError) {
			log.write(record{Event: "query_failed", RequestID: e.RequestID, QueryID: e.QueryID, Detail: e.Reason})
		},
		Delivery: func(_ context.Context, _ *runtime.Client, d runtime.ResponseDelivery) error {
			deliveries++
			log.write(record{Event: "delivery", DeliveryID: d.DeliveryID, Redelivered: d.Redelivered, SubscriptionID: d.SubscriptionID,
				QueryID: d.QueryID, RequestID: d.RequestID, Category: int(d.Category), Bits: d.BandwidthBits, Response: d.Response,
				Prompt: d.Prompt, Anomalies: len(d.Anomalies), Detail: d.FromAgent, Items: len(d.Items)})
			if deliveries == crashAt {
				os.Exit(3)
			}
			time.Sleep(delay)
			appliedMu.Lock()
			applied[d.DeliveryID] = true
			appliedMu.Unlock()
			log.write(record{Event: "applied", DeliveryID: d.DeliveryID, Response: d.Response})
			return nil
		},
		Applied: func(id string) bool {
			appliedMu.Lock()
			defer appliedMu.Unlock()
			return applied[id]
		},
	})
}

// readLog returns the delivery ids already applied according to the log
// (the runtime's durable record of what it has done), and how many
// deliveries it has received.
func readLog(path string) (applied map[string]bool, deliveries int) {
	applied = map[string]bool{}
	f, err := os.Open(path)
	if err != nil {
		return applied, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r record
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		switch r.Event {
		case "applied":
			applied[r.DeliveryID] = true
		case "delivery":
			deliveries++
		}
	}
	return applied, deliveries
}
