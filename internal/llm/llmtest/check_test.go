package llmtest

import (
	"net/http"
	"strings"
	"testing"
)

func TestCheckAnthropic(t *testing.T) {
	const tools = `,"tools":[{"name":"T","input_schema":{"type":"object"}}]`
	use := func(ids ...string) string {
		var b []string
		for _, id := range ids {
			b = append(b, `{"type":"tool_use","id":"`+id+`","name":"T","input":{}}`)
		}
		return `{"role":"assistant","content":[` + strings.Join(b, ",") + `]}`
	}
	result := func(id string) string { return `{"type":"tool_result","tool_use_id":"` + id + `","content":"ok"}` }
	text := func(s string) string { return `{"type":"text","text":"` + s + `"}` }
	user := func(blocks ...string) string { return `{"role":"user","content":[` + strings.Join(blocks, ",") + `]}` }
	body := func(extra string, msgs ...string) string {
		return `{"messages":[` + strings.Join(msgs, ",") + `]` + extra + `}`
	}
	tests := []struct {
		body string
		want string // "" when valid
	}{
		{body("", user(text("hi"))), ""},
		{body("", `{"role":"user","content":"hi"}`), ""},
		{body(tools, user(text("hi")), use("a", "b"), user(result("a"), result("b"), text("more"))), ""},
		{body("", `{"role":"assistant","content":"hi"}`), "first message must use the \"user\" role"},
		{body("", user(text("a")), user(text("b"))), "roles must alternate"},
		{body("", user(text(""))), "non-whitespace text"},
		{body("", user(text("  "))), "non-whitespace text"},
		{body("", user(text("hi")), use("a"), user(result("a"))), "must define tools"},
		{body(tools, user(text("hi")), use("a", "b"), user(result("a"), text("x"), result("b"))), "must come FIRST"},
		{body(tools, user(text("hi")), use("a", "b"), user(result("a"))), "without `tool_result` blocks immediately after: b"},
		{body(tools, user(text("hi")), use("a"), user(result("z"))), "unexpected `tool_use_id` found in `tool_result` blocks: z"},
		{body(tools, user(text("hi")), use("a"), user(result("a"), result("a"))), "unexpected `tool_use_id`"},
		{body(tools, user(text("hi")), use("a"), user(result("a")), use("a"), user(result("a"))), "ids must be unique"},
		{body(tools, user(text("hi")), use("a")), "without `tool_result` blocks"},
		{body(tools, user(result("a"))), "unexpected `tool_use_id`"},
	}
	for _, tt := range tests {
		got := checkAnthropic([]byte(tt.body))
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.body, got, tt.want)
		}
	}
}

func TestCheckOpenAI(t *testing.T) {
	calls := func(ids ...string) string {
		var b []string
		for _, id := range ids {
			b = append(b, `{"id":"`+id+`","type":"function","function":{"name":"T","arguments":"{}"}}`)
		}
		return `{"role":"assistant","content":null,"tool_calls":[` + strings.Join(b, ",") + `]}`
	}
	tool := func(id string) string { return `{"role":"tool","tool_call_id":"` + id + `","content":"ok"}` }
	const user = `{"role":"user","content":"hi"}`
	body := func(msgs ...string) string { return `{"messages":[` + strings.Join(msgs, ",") + `]}` }
	tests := []struct {
		body string
		want string
	}{
		{body(`{"role":"system","content":"s"}`, user), ""},
		{body(user, calls("a", "b"), tool("b"), tool("a"), user), ""},
		{body(user, tool("a")), "must be a response to a preceeding message with 'tool_calls'"},
		{body(user, calls("a"), tool("a"), user, tool("a")), "must be a response to a preceeding message"},
		{body(user, calls("a", "b"), tool("a"), user), "did not have response messages: b"},
		{body(user, calls("a", "b"), tool("a")), "did not have response messages: b"},
		{body(user, calls("a"), tool("a"), tool("a")), "duplicate response"},
		{body(user, calls("a"), tool("a"), calls("a"), tool("a")), "duplicate or empty id"},
	}
	for _, tt := range tests {
		got := checkOpenAI([]byte(tt.body))
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.body, got, tt.want)
		}
	}
}

// A request the real API would refuse is answered 400 without asking the
// script, and recorded with the reason.
func TestServerRefusesWhatTheAPIWould(t *testing.T) {
	asked := 0
	s := New(t, Anthropic, func(Request) Reply { asked++; return Text(Anthropic, "hi") })
	resp, err := http.Post(s.BaseURL()+"/v1/messages", "application/json", strings.NewReader(`{"messages":[{"role":"assistant","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || asked != 0 {
		t.Errorf("status %d, script asked %d times", resp.StatusCode, asked)
	}
	if r := s.Requests()[0]; !strings.Contains(r.Refused, "first message") {
		t.Errorf("refusal %q", r.Refused)
	}
}
