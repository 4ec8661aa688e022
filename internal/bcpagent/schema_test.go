package bcpagent

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/runtime"
)

var update = flag.Bool("update", false, "rewrite golden files")

// allSubs covers every field type, every format and Cat-3.
var allSubs = append(append([]runtime.ActiveSubscription(nil), researchSubs...),
	runtime.ActiveSubscription{SubscriptionID: "people", Controller: "desk", Category: bcp.Cat2, MaxWords: 4, Questions: []bcp.Question{
		{ID: "name", Question: "Who is it", Format: bcp.PersonName},
		{ID: "born", Question: "Born when?", MaxWords: 1, Format: bcp.Date},
		{ID: "mail", Question: "Contact?", MaxWords: 1, Format: bcp.Email},
		{ID: "tags", Question: "Tags?", Format: bcp.ShortList},
		{ID: "age", Question: "Age?", MaxWords: 1, Format: bcp.IntegerFmt, Min: i64(0)},
	}},
	runtime.ActiveSubscription{SubscriptionID: "score", Controller: "desk", Category: bcp.Cat1, Fields: []bcp.Field{
		{Name: "score", Type: bcp.Integer, Min: i64(-3), Max: i64(3)},
	}},
	runtime.ActiveSubscription{SubscriptionID: "digest", Controller: "main", Category: bcp.Cat3, Directive: "Summarize what changed today", MaxWords: 100},
	// The same shape as "score" under another id: one shared branch.
	runtime.ActiveSubscription{SubscriptionID: "score", Controller: "main", Category: bcp.Cat1, Fields: []bcp.Field{
		{Name: "score", Type: bcp.Integer, Min: i64(-3), Max: i64(3)},
	}},
)

func encode(t *testing.T, s Schema) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPublishSchemaGolden(t *testing.T) {
	got := encode(t, PublishSchema(allSubs))
	path := filepath.Join("testdata", "publish_schema.golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/bcpagent -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("PublishSchema changed; if intended, rerun with -update. Got:\n%s", got)
	}
}

// Both APIs refuse a tool schema whose root is not an object schema or
// carries oneOf/anyOf/allOf.
func TestToolSchemasHaveAnObjectRoot(t *testing.T) {
	q := runtime.Query{QueryID: "q-1", Category: bcp.Cat1, Fields: researchSubs[1].Fields}
	for name, s := range map[string]Schema{
		"publish one": PublishSchema(researchSubs[:1]), "publish many": PublishSchema(allSubs),
		"respond": RespondSchema(q), "query": QuerySchema(),
	} {
		if s["type"] != "object" {
			t.Errorf("%s: root type %v", name, s["type"])
		}
		for _, k := range []string{"oneOf", "anyOf", "allOf"} {
			if _, ok := s[k]; ok {
				t.Errorf("%s: %s at the root", name, k)
			}
		}
	}
	many := PublishSchema(allSubs)["properties"].(Schema)["response"].(Schema)
	if _, ok := many["oneOf"]; ok {
		t.Errorf("many subscriptions: response has a oneOf, which refuses an object that fits two branches")
	}
	one := PublishSchema(researchSubs[:1])["properties"].(Schema)
	if ids := one["subscription_id"].(Schema)["enum"]; fmt.Sprint(ids) != "[research-findings]" {
		t.Errorf("one subscription: subscription_id enum %v", ids)
	}
	if _, ok := one["response"].(Schema)["anyOf"]; ok {
		t.Errorf("one subscription: response has an anyOf")
	}
}

// The schema and the gateway's validation agree on the structure of a
// response: what bcp.Validate accepts the schema accepts, and the
// structural mistakes both refuse. (Word limits are said in descriptions
// only, so they are not compared.)
func TestSpecSchemaAgreesWithValidate(t *testing.T) {
	type tc struct {
		response string
		valid    bool
	}
	cases := map[string][]tc{
		"research-findings": {
			{`{"topic":"Quantum error correction","relevance":"4"}`, true},
			{`{"relevance":"4","topic":"Order does not matter"}`, true},
			{`{"topic":"x"}`, false},
			{`{"topic":"x","relevance":"4","extra":"y"}`, false},
			{`{"topic":"x","relevance":"04"}`, false},
			{`{"topic":"x","relevance":"four"}`, false},
			{`{"topic":"","relevance":"4"}`, false},
			{`{"topic":"   ","relevance":"4"}`, false},
			{`{"topic":"\t\n","relevance":"4"}`, false},
			{`{"topic":7,"relevance":"4"}`, false},
		},
		"research-alerts": {
			{`{"has_breaking_news":true,"priority":"critical"}`, true},
			{`{"has_breaking_news":"true","priority":"critical"}`, false},
			{`{"has_breaking_news":false,"priority":"urgent"}`, false},
			{`{"has_breaking_news":false}`, false},
		},
		"people": {
			{`{"name":"Ada Lovelace","born":"1815-12-10","mail":"ada@example.org","tags":"math, poetry","age":"36"}`, true},
			{`{"name":"Ada","born":"10/12/1815","mail":"ada@example.org","tags":"x","age":"36"}`, false},
			{`{"name":"Ada","born":"1815-12-10","mail":"ada@example.org","tags":"x","age":"-1x"}`, false},
			{`{"name":" ","born":"1815-12-10","mail":"ada@example.org","tags":"x","age":"36"}`, false},
			{`{"name":"Ada","born":"1815-12-10","mail":"ada@example.org","tags":"  ","age":"36"}`, false},
		},
		"score": {
			{`{"score":-3}`, true},
			{`{"score":3}`, true},
			{`{"score":4}`, false},
			{`{"score":1.5}`, false},
			{`{"score":"1"}`, false},
		},
		"digest": {
			{`{"summary":"Two sources changed.\nNothing urgent."}`, true},
			{`{"summary":""}`, false},
			{`{"summary":" \n "}`, false},
			{`{"text":"wrong key"}`, false},
		},
	}
	for _, sub := range allSubs {
		spec := subscriptionSpec(sub)
		schema := roundTrip(t, SpecSchema(spec))
		for _, c := range cases[sub.SubscriptionID] {
			_, err := bcp.Validate(spec, []byte(c.response))
			if (err == nil) != c.valid {
				t.Fatalf("%s %s: bcp.Validate %v, test expects valid=%v", sub.SubscriptionID, c.response, err, c.valid)
			}
			var v any
			if err := json.Unmarshal([]byte(c.response), &v); err != nil {
				t.Fatal(err)
			}
			if err := check(schema, v); (err == nil) != c.valid {
				t.Errorf("%s %s: schema says %v, want valid=%v", sub.SubscriptionID, c.response, err, c.valid)
			}
		}
	}
}

// A model's well-formed publish of any subscription passes the publish
// schema; an id that was not announced does not.
func TestPublishSchemaAcceptsEachSubscription(t *testing.T) {
	schema := roundTrip(t, PublishSchema(allSubs))
	good := map[string]string{
		"research-findings": `{"topic":"Quantum","relevance":"4"}`,
		"research-alerts":   `{"has_breaking_news":true,"priority":"low"}`,
		"people":            `{"name":"Ada","born":"1815-12-10","mail":"a@b.org","tags":"x","age":"3"}`,
		"score":             `{"score":0}`,
		"digest":            `{"summary":"All quiet."}`,
	}
	for _, sub := range allSubs {
		args := fmt.Sprintf(`{"subscription_id":%q,"controller":%q,"response":%s}`, sub.SubscriptionID, sub.Controller, good[sub.SubscriptionID])
		var v any
		if err := json.Unmarshal([]byte(args), &v); err != nil {
			t.Fatal(err)
		}
		if err := check(schema, v); err != nil {
			t.Errorf("%s: %v", args, err)
		}
	}
	for _, bad := range []string{
		`{"subscription_id":"nope","controller":"main","response":{"score":0}}`,
		`{"subscription_id":"score","controller":"someone","response":{"score":0}}`,
		`{"subscription_id":"score","controller":"main","response":{"score":9}}`,
		`{"subscription_id":"score","controller":"main"}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(bad), &v); err != nil {
			t.Fatal(err)
		}
		if check(schema, v) == nil {
			t.Errorf("%s passes the schema", bad)
		}
	}
}

// Subscriptions whose shapes differ only in what JSON Schema cannot check
// (a Cat-3 directive, a Cat-2 word limit) accept the same objects: a
// publish to either must still pass the schema.
func TestPublishSchemaOverlappingSubscriptions(t *testing.T) {
	tests := []struct {
		name string
		subs []runtime.ActiveSubscription
		resp string
	}{
		{"two Cat-3", []runtime.ActiveSubscription{
			{SubscriptionID: "morning", Controller: "main", Category: bcp.Cat3, Directive: "Summarize the morning news", MaxWords: 100},
			{SubscriptionID: "evening", Controller: "main", Category: bcp.Cat3, Directive: "Summarize the evening news", MaxWords: 100},
		}, `{"summary":"All quiet."}`},
		{"two Cat-2 with the same question ids", []runtime.ActiveSubscription{
			{SubscriptionID: "short", Controller: "main", Category: bcp.Cat2, Questions: []bcp.Question{{ID: "topic", Question: "Topic?", MaxWords: 3}}},
			{SubscriptionID: "long", Controller: "desk", Category: bcp.Cat2, Questions: []bcp.Question{{ID: "topic", Question: "Topic?", MaxWords: 20}}},
		}, `{"topic":"Quantum"}`},
	}
	for _, tt := range tests {
		schema := roundTrip(t, PublishSchema(tt.subs))
		for _, sub := range tt.subs {
			args := fmt.Sprintf(`{"subscription_id":%q,"controller":%q,"response":%s}`, sub.SubscriptionID, sub.Controller, tt.resp)
			var v any
			if err := json.Unmarshal([]byte(args), &v); err != nil {
				t.Fatal(err)
			}
			if err := check(schema, v); err != nil {
				t.Errorf("%s: %s: %v", tt.name, args, err)
			}
		}
	}
}

// The gateway refuses 3.0 for an integer field, which JSON Schema counts
// as an integer: the description says it.
func TestIntegerFieldSaysNoDecimalPoint(t *testing.T) {
	for _, f := range []bcp.Field{{Name: "n", Type: bcp.Integer, Min: i64(0), Max: i64(9)}, {Name: "n", Type: bcp.Integer}} {
		if d, _ := fieldSchema(f)["description"].(string); !strings.Contains(d, "JSON integer") || !strings.Contains(d, "no decimal point") {
			t.Errorf("%+v: description %q", f, d)
		}
	}
	if _, err := bcp.Validate(bcp.Spec{Category: bcp.Cat1, Fields: []bcp.Field{{Name: "n", Type: bcp.Integer, Min: i64(0), Max: i64(9)}}}, []byte(`{"n":3.0}`)); err == nil {
		t.Errorf("the gateway takes 3.0 as an integer: the description is wrong")
	}
}

func roundTrip(t *testing.T, s Schema) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(encode(t, s), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// check validates v against the subset of JSON Schema these schemas use
// (type, enum, minimum, maximum, minLength, pattern, required, properties,
// additionalProperties false, oneOf, anyOf, format date). It is a test
// oracle, not a general validator.
func check(s map[string]any, v any) error {
	if branches, ok := s["anyOf"].([]any); ok {
		var errs []string
		for _, b := range branches {
			err := check(b.(map[string]any), v)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			return fmt.Errorf("matches no anyOf branch: %s", strings.Join(errs, "; "))
		}
	}
	if branches, ok := s["oneOf"].([]any); ok {
		n := 0
		for _, b := range branches {
			if check(b.(map[string]any), v) == nil {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("matches %d oneOf branches, want 1", n)
		}
	}
	switch s["type"] {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("not an object: %v", v)
		}
		props, _ := s["properties"].(map[string]any)
		for _, r := range asSlice(s["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("missing %s", r)
			}
		}
		for k, val := range obj {
			p, ok := props[k]
			if !ok {
				if s["additionalProperties"] == false {
					return fmt.Errorf("unexpected key %s", k)
				}
				continue
			}
			if err := check(p.(map[string]any), val); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("not a string: %v", v)
		}
		if ml, ok := s["minLength"].(float64); ok && float64(len([]rune(str))) < ml {
			return fmt.Errorf("shorter than %v", ml)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%q does not match %s", str, p)
		}
	case "integer":
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) {
			return fmt.Errorf("not an integer: %v", v)
		}
		if m, ok := s["minimum"].(float64); ok && f < m {
			return fmt.Errorf("%v below %v", f, m)
		}
		if m, ok := s["maximum"].(float64); ok && f > m {
			return fmt.Errorf("%v above %v", f, m)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("not a boolean: %v", v)
		}
	}
	if enum, ok := s["enum"].([]any); ok {
		for _, e := range enum {
			if e == v {
				return nil
			}
		}
		return fmt.Errorf("%v not in %v", v, enum)
	}
	return nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestPublishToolTellsRateLimit: the model is told a subscription's rate
// limit in BCPPublish's description, under that subscription only.
func TestPublishToolTellsRateLimit(t *testing.T) {
	subs := slices.Clone(researchSubs)
	subs[1].RateLimit = runtime.NewRateLimit(2, time.Hour)
	d := (&Agent{}).publishTool(subs).def.Description
	const line = "    (Rate limit: at most 2 publishes in any 1h; more are refused with rate_limited, so publish what matters most.)\n"
	alerts := strings.Index(d, `subscription_id "research-alerts"`)
	if strings.Count(d, "Rate limit") != 1 || alerts < 0 || strings.Index(d, line) < alerts {
		t.Errorf("description does not tell research-alerts' limit, once, under it:\n%s", d)
	}
}
