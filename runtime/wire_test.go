package runtime

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
)

// TestQueryWireBothSpellings: a bcp_query carries each question and enum
// in both spellings, complete, and reads back from either.
func TestQueryWireBothSpellings(t *testing.T) {
	q := Query{Type: TypeQuery, QueryID: "q-1", Category: bcp.Cat2, FromAgent: "main", MaxWords: 7,
		Questions: []bcp.Question{{ID: "who", Question: "Who?", Format: bcp.PersonName}, {ID: "n", Question: "How many?", MaxWords: 1, Format: bcp.IntegerFmt, Min: i64(0), Max: i64(9)}, {ID: "t"}}}
	b, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"bcp_query","query_id":"q-1","category":2,"from_agent":"main","max_words":7,"questions":[` +
		`{"id":"who","name":"who","question":"Who?","max_words":7,"expected_format":"person_name","format":"person_name"},` +
		`{"id":"n","name":"n","question":"How many?","max_words":1,"expected_format":"integer","format":"integer","min":0,"max":9},` +
		`{"id":"t","name":"t","question":"","max_words":7,"expected_format":"short_text","format":"short_text"}]}`
	if string(b) != want {
		t.Errorf("bcp_query =\n%s\nwant\n%s", b, want)
	}
	var back Query
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Questions[0].ID != "who" || back.Questions[0].Format != bcp.PersonName || back.Questions[1].Max == nil || *back.Questions[1].Max != 9 {
		t.Errorf("read back %+v", back.Questions)
	}
	// What a TriOnyx-style gateway writes reads the same.
	var tri Query
	if err := json.Unmarshal([]byte(`{"type":"bcp_query","query_id":"x","category":1,"fields":[{"name":"p","type":"enum","options":["a","b"]}]}`), &tri); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tri.Fields, []bcp.Field{{Name: "p", Type: bcp.Enum, Values: []string{"a", "b"}}}) {
		t.Errorf("options read as %+v", tri.Fields)
	}
	var tq Query
	if err := json.Unmarshal([]byte(`{"type":"bcp_query","query_id":"x","category":2,"questions":[{"name":"who","format":"person_name","max_words":3}]}`), &tq); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tq.Questions, []bcp.Question{{ID: "who", Format: bcp.PersonName, MaxWords: 3}}) {
		t.Errorf("name/format read as %+v", tq.Questions)
	}
}

func TestSubscriptionsActiveWireBothSpellings(t *testing.T) {
	m := SubscriptionsActive{Type: TypeSubscriptionsActive, Subscriptions: []ActiveSubscription{
		{SubscriptionID: "alerts", Controller: "main", Category: bcp.Cat1, BandwidthBits: 3,
			Fields: []bcp.Field{{Name: "p", Type: bcp.Enum, Values: []string{"low", "high"}}, {Name: "b", Type: bcp.Boolean}}},
		{SubscriptionID: "digest", Controller: "main", Category: bcp.Cat3, Directive: "Sum up.", MaxWords: 9, BandwidthBits: 99},
	}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"bcp_subscriptions_active","subscriptions":[` +
		`{"subscription_id":"alerts","controller":"main","category":1,"bandwidth_bits":3,"fields":[{"name":"p","type":"enum","values":["low","high"],"options":["low","high"]},{"name":"b","type":"boolean"}]},` +
		`{"subscription_id":"digest","controller":"main","category":3,"directive":"Sum up.","max_words":9,"bandwidth_bits":99}]}`
	if string(b) != want {
		t.Errorf("bcp_subscriptions_active =\n%s\nwant\n%s", b, want)
	}
	var back SubscriptionsActive
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Errorf("round trip = %+v, want %+v", back, m)
	}
}

// TestActiveSubscriptionRateLimit: a subscription's rate limit is
// announced as {max, window_ms}, window_ms an integer of milliseconds as
// duration_ms is; a subscription without one has no rate_limit key, so an
// announcement without limits is written as before.
func TestActiveSubscriptionRateLimit(t *testing.T) {
	limited := ActiveSubscription{SubscriptionID: "alerts", Controller: "main", Category: bcp.Cat1, BandwidthBits: 1,
		Fields: []bcp.Field{{Name: "b", Type: bcp.Boolean}}, RateLimit: NewRateLimit(2, time.Hour)}
	plain := limited
	plain.SubscriptionID, plain.RateLimit = "digest", nil
	for _, tc := range []struct {
		sub  ActiveSubscription
		want string
	}{
		{limited, `{"subscription_id":"alerts","controller":"main","category":1,"bandwidth_bits":1,"rate_limit":{"max":2,"window_ms":3600000},"fields":[{"name":"b","type":"boolean"}]}`},
		{plain, `{"subscription_id":"digest","controller":"main","category":1,"bandwidth_bits":1,"fields":[{"name":"b","type":"boolean"}]}`},
	} {
		b, err := json.Marshal(tc.sub)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("%s =\n%s\nwant\n%s", tc.sub.SubscriptionID, b, tc.want)
		}
		var back ActiveSubscription
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, tc.sub) {
			t.Errorf("round trip = %+v, want %+v", back, tc.sub)
		}
	}
	if w := limited.RateLimit.Window(); w != time.Hour {
		t.Errorf("Window() = %v, want 1h", w)
	}
	// Whole milliseconds, rounded up: a Reader waiting the window out is
	// never early.
	for window, ms := range map[time.Duration]int64{
		time.Second:                    1000,
		90 * time.Second:               90_000,
		24 * time.Hour:                 86_400_000,
		time.Second + time.Nanosecond:  1001,
		time.Second + time.Millisecond: 1001,
	} {
		if r := NewRateLimit(1, window); r.WindowMS != ms || r.Max != 1 {
			t.Errorf("NewRateLimit(1, %v) = %+v, want window_ms %d", window, r, ms)
		}
	}
	// A runtime reads a limit it is sent, and none from an older gateway.
	var old ActiveSubscription
	if err := json.Unmarshal([]byte(`{"subscription_id":"x","controller":"main","category":3,"directive":"d","bandwidth_bits":9}`), &old); err != nil || old.RateLimit != nil {
		t.Errorf("without rate_limit: %+v, %v", old.RateLimit, err)
	}
}

func TestResultTokens(t *testing.T) {
	tests := []struct {
		name, line string
		want       *Usage
	}{
		{"none", `{"type":"result","duration_ms":5,"num_turns":1,"cost_usd":0,"is_error":false}`, nil},
		{"usage", `{"type":"result","usage":{"input_tokens":10,"output_tokens":5}}`, &Usage{InputTokens: 10, OutputTokens: 5}},
		{"trionyx top level", `{"type":"result","duration_ms":5,"num_turns":2,"cost_usd":0.01,"is_error":false,"input_tokens":120,"output_tokens":30,"cache_creation_input_tokens":7,"cache_read_input_tokens":900}`,
			&Usage{InputTokens: 120, OutputTokens: 30, CacheCreationInputTokens: 7, CacheReadInputTokens: 900}},
		{"top level partial", `{"type":"result","output_tokens":3}`, &Usage{OutputTokens: 3}},
		{"usage wins", `{"type":"result","usage":{"input_tokens":1,"output_tokens":2},"input_tokens":100}`, &Usage{InputTokens: 1, OutputTokens: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Result
			if err := json.Unmarshal([]byte(tt.line), &r); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Usage, tt.want) {
				t.Errorf("usage = %+v, want %+v", r.Usage, tt.want)
			}
		})
	}
	var r Result
	if err := json.Unmarshal([]byte(`{"type":"result","duration_ms":5,"num_turns":2,"cost_usd":0.5,"is_error":true}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.DurationMS != 5 || r.NumTurns != 2 || r.CostUSD != 0.5 || !r.IsError {
		t.Errorf("other fields = %+v", r)
	}
	if err := json.Unmarshal([]byte(`{"type":"result","input_tokens":"many"}`), &r); err == nil {
		t.Error("a string token count was accepted")
	}
}

func TestUnsupported(t *testing.T) {
	for _, typ := range []string{"send_message_request", "restart_agent_request", "submit_item_request", "send_email_request",
		"save_draft_request", "move_email_request", "create_folder_request", "calendar_query_request",
		"calendar_create_request", "calendar_update_request", "calendar_delete_request"} {
		why, ok := Unsupported(typ)
		if !ok || why == "" {
			t.Errorf("%s: not listed", typ)
		}
		if r := ReplyType(typ); !strings.HasSuffix(r, "_response") || strings.Contains(r, "request") {
			t.Errorf("ReplyType(%s) = %s", typ, r)
		}
	}
	for _, typ := range []string{TypeQueryRequest, TypeResult, "launch_missiles"} {
		if _, ok := Unsupported(typ); ok {
			t.Errorf("%s listed as unsupported", typ)
		}
	}
}
