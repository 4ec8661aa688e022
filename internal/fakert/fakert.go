// Package fakert holds the fake runtimes of the gateway's tests: a test
// binary started with Env in its environment plays the runtime that Env
// names instead of running tests (the helper-process pattern), so that
// the tests of package gateway and of package session script the same
// runtimes. The variable reaches it through the definition's env, like
// any runtime setting. Imported by tests only.
package fakert

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/bcpgw/bcpgw/runtime"
)

// Env names the fake runtime a test binary is to play.
const Env = "BCPGW_TEST_RUNTIME"

// Run plays the fake runtime mode on stdin and stdout, and returns the
// exit code.
func Run(mode string) int {
	out := bufio.NewWriter(os.Stdout)
	line := func(s string) { out.WriteString(s + "\n"); out.Flush() }
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 4<<20)
	readStart := func() { in.Scan() }
	switch mode {
	case "sdk":
		// A well-behaved runtime built with the SDK.
		fmt.Fprintln(os.Stderr, "[DEBUG] fake runtime up")
		err := runtime.Run(context.Background(), os.Stdin, os.Stdout, runtime.Handler{
			Subscriptions: func(_ context.Context, _ *runtime.Client, subs []runtime.ActiveSubscription) {
				ids := make([]string, 0, len(subs))
				for _, s := range subs {
					ids = append(ids, s.SubscriptionID)
				}
				fmt.Fprintf(os.Stderr, "[INFO] subscriptions %d %s\n", len(subs), strings.Join(ids, ","))
			},
			Prompt: func(ctx context.Context, c *runtime.Client, p runtime.Prompt) error {
				switch p.Content {
				case "publish":
					r, err := c.Publish(ctx, "research-alerts", "main", []byte(`{"has_breaking_news": true}`))
					if err != nil {
						return err
					}
					fmt.Fprintf(os.Stderr, "[INFO] verdict %s\n", r.Detail)
				case "env":
					env := os.Environ()
					sort.Strings(env)
					fmt.Fprintf(os.Stderr, "[INFO] ENV %s\n", strings.Join(env, ";"))
					wd, _ := os.Getwd()
					fmt.Fprintf(os.Stderr, "[INFO] CWD %s\n", wd)
				case "crash":
					fmt.Fprintln(os.Stderr, "[ERROR] about to crash")
					os.Exit(3)
				case "egress":
					// Each destination of EGRESS_TRY through the proxy
					// the sandbox announces.
					for _, dest := range strings.Split(os.Getenv("EGRESS_TRY"), ",") {
						fmt.Fprintf(os.Stderr, "[INFO] egress %s: %s\n", dest, tryProxy(os.Getenv("HTTPS_PROXY"), dest))
					}
				default:
					fmt.Fprintf(os.Stderr, "[INFO] prompt %s\n", p.Content)
				}
				return nil
			},
		})
		fmt.Fprintln(os.Stderr, "[INFO] runtime got shutdown, exiting")
		if err != nil {
			return 1
		}
		return 0
	case "ready-then-exit":
		readStart()
		line(`{"type":"ready"}`)
		fmt.Fprintln(os.Stderr, "[ERROR] crashing on purpose")
		return 1
	case "no-ready":
		readStart()
		time.Sleep(time.Hour)
	case "garbage":
		readStart()
		line("Loading model weights...")
		time.Sleep(time.Hour)
	case "exit-early":
		fmt.Fprintln(os.Stderr, "fatal: missing API key")
		return 7
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		readStart()
		line(`{"type":"ready"}`)
		for in.Scan() { // ignores shutdown; keeps running after stdin closes
		}
		time.Sleep(time.Hour)
	case "hostile":
		readStart()
		line(`{"type":"ready"}`)
		line("this is not json")
		line(`{"type":"text","text":"` + strings.Repeat("x", 2<<20) + `"}`)
		out.Write([]byte("{\"type\":\"text\",\"text\":\"\xff\"}\n"))
		line(`[1,2,3]`)
		line(`{"type":"launch_missiles"}`)
		line(`{"type":"bcp_query_request","request_id":"r1","to":"main","category":1,"spec":{}}`)
		line(`{"type":"bcp_response","subscription_id":"s","controller":"main","response":{}}`)
		line(`{"type":"bcp_response","query_id":"q","subscription_id":"s","response":{}}`)
		line(`{"type":"result"}`)
		line(`{"type":"ready"}`)
		out.Flush()
		// Still alive and still speaking the protocol afterwards.
		for in.Scan() {
			if strings.Contains(in.Text(), `"type":"prompt"`) {
				line(`{"type":"result","duration_ms":1,"num_turns":1,"cost_usd":0,"is_error":false}`)
			}
		}
		return 0
	case "trionyx":
		// TriOnyx's runtime: on each prompt, a request bcpgw does not
		// implement, the reply it waits for, and a result with the token
		// counts at the top level.
		readStart()
		line(`{"type":"ready"}`)
		for in.Scan() {
			fmt.Fprintf(os.Stderr, "[INFO] got %s\n", in.Text())
			if !strings.Contains(in.Text(), `"type":"prompt"`) {
				continue
			}
			line(`{"type":"send_message_request","request_id":"m-1","to":"main","message_type":"note","payload":{"text":"hi"}}`)
			for in.Scan() {
				fmt.Fprintf(os.Stderr, "[INFO] got %s\n", in.Text())
				if strings.Contains(in.Text(), `"send_message_response"`) {
					break
				}
			}
			line(`{"type":"restart_agent_request","request_id":"bad id!","agent_name":"main","force":true}`)
			line(`{"type":"result","duration_ms":1500,"num_turns":3,"cost_usd":0.0125,"is_error":false,"input_tokens":120,"output_tokens":30,"cache_creation_input_tokens":7,"cache_read_input_tokens":900}`)
		}
		return 0
	case "echo":
		// Logs each line it is sent; on a prompt, publishes once and
		// ends the turn.
		readStart()
		line(`{"type":"ready"}`)
		for in.Scan() {
			fmt.Fprintf(os.Stderr, "[INFO] got %s\n", in.Text())
			if strings.Contains(in.Text(), `"type":"prompt"`) {
				line(`{"type":"bcp_response","subscription_id":"research-alerts","controller":"main","response":{"has_breaking_news":true}}`)
				line(`{"type":"result","duration_ms":1,"num_turns":1,"cost_usd":0,"is_error":false}`)
			}
		}
		return 0
	case "trionyx-controller":
		return triOnyxController(in, line)
	case "asked":
		return askedRuntime(in, line)
	case "flood":
		readStart()
		line(`{"type":"ready"}`)
		for i := 0; i < 100000; i++ {
			out.WriteString(`{"type":"text","text":"spam"}` + "\n")
		}
		out.Flush()
		time.Sleep(time.Hour)
	}
	return 0
}

// tryProxy opens a CONNECT tunnel to dest through the proxy at proxyURL,
// sends "ping\n" and returns the proxy's status line and the first line
// that came back, or what failed.
func tryProxy(proxyURL, dest string) string {
	addr := strings.TrimPrefix(proxyURL, "http://")
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "dial proxy: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
	r := bufio.NewReader(c)
	status, err := r.ReadString('\n')
	if err != nil {
		return "read status: " + err.Error()
	}
	for { // the rest of the head
		l, err := r.ReadString('\n')
		if err != nil || l == "\r\n" {
			break
		}
	}
	status = strings.TrimSpace(status)
	if !strings.Contains(status, " 200 ") {
		return status
	}
	fmt.Fprint(c, "ping\n")
	reply, _ := r.ReadString('\n')
	return status + " / " + strings.TrimSpace(reply)
}

// askedRuntime is the fake runtime "asked": it answers every prompt with
// result, and every query with bcp_response (twice when its query_id
// starts with q-twice) and then result. A prompt "unsolicited" is
// followed, after its result, by five results nobody asked for.
func askedRuntime(in *bufio.Scanner, line func(string)) int {
	const result = `{"type":"result","duration_ms":1,"num_turns":1,"cost_usd":0,"is_error":false}`
	in.Scan() // start
	line(`{"type":"ready"}`)
	for in.Scan() {
		var m struct {
			Type    string `json:"type"`
			Content string `json:"content"`
			QueryID string `json:"query_id"`
		}
		if json.Unmarshal(in.Bytes(), &m) != nil {
			continue
		}
		switch m.Type {
		case runtime.TypePrompt:
			line(result)
			if m.Content == "unsolicited" {
				for range 5 {
					line(result)
				}
			}
		case runtime.TypeQuery:
			answer := `{"type":"bcp_response","query_id":"` + m.QueryID + `","response":{"answer":"yes"}}`
			line(answer)
			if strings.HasPrefix(m.QueryID, "q-twice") {
				line(answer)
			}
			line(result)
		}
	}
	return 0
}

// triOnyxController plays a Controller the way TriOnyx's runtime is one
// (runtime/agent_runner.py): it sends the queries of TRIONYX_QUERIES
// ({request_id, to, category, spec}, as written) on the prompt "query",
// ignores bcp_query_sent, takes bcp_response_delivery and bcp_query_error
// each for a prompt of its own, answered with a result carrying the token
// counts at the top level, and appends what it got to TRIONYX_LOG.
func triOnyxController(in *bufio.Scanner, line func(string)) int {
	logf, err := os.OpenFile(os.Getenv("TRIONYX_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trionyx-controller:", err)
		return 2
	}
	defer logf.Close()
	record := func(raw []byte) { logf.Write(append(append([]byte(nil), raw...), '\n')) }
	var queries []json.RawMessage
	if err := json.Unmarshal([]byte(os.Getenv("TRIONYX_QUERIES")), &queries); err != nil {
		fmt.Fprintln(os.Stderr, "trionyx-controller: TRIONYX_QUERIES:", err)
		return 2
	}
	result := `{"type":"result","duration_ms":7,"num_turns":1,"cost_usd":0.001,"is_error":false,"input_tokens":50,"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":40}`
	for in.Scan() {
		var m struct {
			Type    string `json:"type"`
			Content string `json:"content"`
		}
		if json.Unmarshal(in.Bytes(), &m) != nil {
			continue
		}
		switch m.Type {
		case "start":
			line(`{"type":"ready"}`)
		case "prompt":
			if m.Content == "query" {
				for _, q := range queries {
					var body map[string]any
					_ = json.Unmarshal(q, &body)
					body["type"] = "bcp_query_request"
					b, _ := json.Marshal(body)
					line(string(b))
				}
			}
			line(result)
		case "bcp_response_delivery", "bcp_query_error":
			record(in.Bytes())
			line(result)
		case "shutdown":
			return 0
		default:
			record(in.Bytes()) // bcp_query_sent and the like: ignored, but kept
		}
	}
	return 0
}
