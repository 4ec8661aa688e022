package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

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
