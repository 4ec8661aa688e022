package runtime

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/bcp"
)

func i64(n int64) *int64 { return &n }

func TestDecodeQuerySpec(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want QuerySpec // compared on the exported fields
		errs []string  // each problem, in order, as "path: message" prefixes
	}{
		{name: "protocol spelling",
			raw:  `{"questions":[{"id":"who","question":"Who?","max_words":3,"expected_format":"person_name"}],"max_words":5,"context":"c"}`,
			want: QuerySpec{Questions: []bcp.Question{{ID: "who", Question: "Who?", MaxWords: 3, Format: bcp.PersonName}}, MaxWords: 5, Context: "c"}},
		{name: "trionyx spelling",
			raw:  `{"questions":[{"name":"who","format":"person_name","max_words":3}]}`,
			want: QuerySpec{Questions: []bcp.Question{{ID: "who", MaxWords: 3, Format: bcp.PersonName}}}},
		{name: "mixed across questions",
			raw:  `{"questions":[{"id":"a","question":"A?","format":"date"},{"name":"b","expected_format":"email"}]}`,
			want: QuerySpec{Questions: []bcp.Question{{ID: "a", Question: "A?", Format: bcp.Date}, {ID: "b", Format: bcp.Email}}}},
		{name: "enum options",
			raw:  `{"fields":[{"name":"p","type":"enum","options":["low","high"]},{"name":"n","type":"integer","min":-2,"max":9}]}`,
			want: QuerySpec{Fields: []bcp.Field{{Name: "p", Type: bcp.Enum, Values: []string{"low", "high"}}, {Name: "n", Type: bcp.Integer, Min: i64(-2), Max: i64(9)}}}},
		{name: "cat3", raw: `{"directive":"Summarize.","max_words":40}`, want: QuerySpec{Directive: "Summarize.", MaxWords: 40}},
		{name: "empty lists kept as present", raw: `{"fields":[],"questions":[]}`, want: QuerySpec{Fields: []bcp.Field{}, Questions: []bcp.Question{}}},

		// The bug of issue 14: a misspelled key used to vanish.
		{name: "misspelled format", raw: `{"questions":[{"id":"who","question":"Who?","fromat":"person_name"}]}`,
			errs: []string{"questions[0].fromat: unknown field (known: expected_format, format, id, max, max_words, min, name, question)"}},
		{name: "unknown spec key", raw: `{"questions":[],"category":2,"on_anomaly":"deliver"}`,
			errs: []string{"category: unknown field (known: context, directive, fields, max_words, questions)", "on_anomaly: unknown field"}},
		{name: "unknown field key", raw: `{"fields":[{"name":"n","type":"integer","minimum":1,"max":3}]}`,
			errs: []string{"fields[0].minimum: unknown field (known: max, min, name, options, type, values)"}},
		{name: "both spellings", raw: `{"questions":[{"id":"a","name":"a","question":"A?","expected_format":"date","format":"date"}],"fields":[{"name":"p","type":"enum","values":["x","y"],"options":["x","y"]}]}`,
			errs: []string{
				"questions[0].name: both id and name are set; write one (name is TriOnyx's spelling of id)",
				"questions[0].format: both expected_format and format are set",
				"fields[0].options: both values and options are set; write one (options is TriOnyx's spelling of values)"}},
		{name: "duplicate key", raw: `{"max_words":3,"max_words":300,"directive":"d"}`, errs: []string{"max_words: duplicate key"}},
		{name: "duplicate key deep", raw: `{"questions":[{"id":"a","id":"b","question":"q"}]}`, errs: []string{"questions[0].id: duplicate key"}},
		{name: "types", raw: `{"max_words":"3","directive":7,"context":null,"questions":{"id":"a"},"fields":[{"name":1,"type":"enum","values":"x"}]}`,
			errs: []string{
				"max_words: must be an integer, got a string",
				"directive: must be a string, got a number",
				"context: must be a string, got null",
				"questions: must be a list, got an object",
				"fields[0].name: must be a string, got a number",
				"fields[0].values: must be a list, got a string"}},
		{name: "integers", raw: `{"max_words":1.5,"questions":[{"id":"a","question":"q","max_words":0,"min":1e3,"max":99999999999999999999}]}`,
			errs: []string{
				"max_words: must be an integer, got 1.5",
				"questions[0].max_words: must be >= 1, got 0",
				"questions[0].min: must be an integer, got 1e3",
				"questions[0].max: integer 99999999999999999999 is out of range"}},
		{name: "too many words", raw: `{"max_words":4294967296}`, errs: []string{"max_words: 4294967296 is too large"}},
		{name: "empty format and directive", raw: `{"directive":"","questions":[{"id":"a","question":"q","format":""}]}`,
			errs: []string{"directive: must not be empty", "questions[0].format: must not be empty"}},
		{name: "not an object", raw: `[1]`, errs: []string{"spec must be a JSON object, got a list"}},
		{name: "null", raw: `null`, errs: []string{"spec must be a JSON object, got null"}},
		{name: "question not an object", raw: `{"questions":["who?"]}`, errs: []string{"questions[0]: a question must be a JSON object, got a string"}},
		{name: "hostile key", raw: `{"questions":[{"id":"a","question":"q","x.y\u202e` + strings.Repeat("z", 100) + `":1}]}`,
			errs: []string{`questions[0]."x.y\u202ezzzzz`}},
		{name: "too deep", raw: `{"fields":[{"values":[[[[[[[[1]]]]]]]]}]}`, errs: []string{"spec is not valid JSON: nested deeper than 8 levels"}},
		{name: "invalid utf8", raw: "{\"context\":\"\xff\"}", errs: []string{"spec is not valid JSON: not valid UTF-8"}},
		{name: "trailing data", raw: `{} {}`, errs: []string{"spec is not valid JSON: data after the JSON value"}},
		{name: "truncated", raw: `{"questions":[`, errs: []string{"spec is not valid JSON: unexpected end of input"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, problems := DecodeQuerySpec([]byte(tt.raw))
			if len(problems) != len(tt.errs) {
				t.Fatalf("problems = %q, want %d: %q", problems, len(tt.errs), tt.errs)
			}
			for i, want := range tt.errs {
				if !strings.HasPrefix(problems[i].String(), want) {
					t.Errorf("problem %d = %q, want prefix %q", i, problems[i], want)
				}
			}
			if len(tt.errs) > 0 {
				return
			}
			got.spelled = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("spec = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDecodeQueryRequest: decoding a whole bcp_query_request refuses a bad
// spec with a *SpecError and still reads the fields beside it.
func TestDecodeQueryRequest(t *testing.T) {
	line := []byte(`{"type":"bcp_query_request","spec":{"questions":[{"id":"a","question":"q","fromat":"date"}]},"request_id":"r1","to":"researcher","category":2}`)
	var whole QueryRequest
	if err := json.Unmarshal(line, &whole); !errors.As(err, new(*SpecError)) {
		t.Errorf("json.Unmarshal: err = %v, want a *SpecError", err)
	}
	q, err := DecodeQueryRequest(line)
	var se *SpecError
	if !errors.As(err, &se) || len(se.Problems) != 1 || se.Problems[0].Path != "questions[0].fromat" {
		t.Fatalf("err = %v, want a *SpecError naming questions[0].fromat", err)
	}
	if q.RequestID != "r1" || q.To != "researcher" || q.Category != bcp.Cat2 {
		t.Errorf("fields beside the spec = %+v", q)
	}
}

func TestQuerySpecSpec(t *testing.T) {
	tests := []struct {
		name string
		cat  bcp.Category
		raw  string
		want bcp.Spec
		errs []string
	}{
		{name: "completed", cat: bcp.Cat2, raw: `{"max_words":6,"questions":[{"name":"who"},{"id":"when","question":"When?","format":"date","max_words":1}]}`,
			want: bcp.Spec{Category: bcp.Cat2, MaxWords: 6, Questions: []bcp.Question{
				{ID: "who", MaxWords: 6, Format: bcp.ShortText},
				{ID: "when", Question: "When?", MaxWords: 1, Format: bcp.Date}}}},
		{name: "text required with id", cat: bcp.Cat2, raw: `{"questions":[{"id":"who","max_words":2}]}`,
			errs: []string{`questions[0].question: required with "id"`}},
		{name: "problems in the sender's spelling", cat: bcp.Cat2,
			raw: `{"questions":[{"name":"9who","format":"phone","max_words":2},{"name":"n","format":"short_text","min":1,"max_words":1}]}`,
			errs: []string{
				`questions[0].name: "9who" is not a valid id`,
				`questions[0].format: unknown format "phone"`,
				"questions[1]: min and max are only allowed with expected_format integer"}},
		{name: "options in the sender's spelling", cat: bcp.Cat1, raw: `{"fields":[{"name":"p","type":"enum","options":["x","x"]}]}`,
			errs: []string{`fields[0].options[1]: duplicate value "x"`, "fields[0].options: an enum needs at least 2 distinct values"}},
		{name: "cat1 from cat2 keys", cat: bcp.Cat1, raw: `{"questions":[{"name":"a","max_words":1}]}`,
			errs: []string{"questions: only allowed in category 2", "fields: category 1 needs at least one field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			qs, problems := DecodeQuerySpec([]byte(tt.raw))
			if len(problems) > 0 {
				t.Fatalf("decode: %v", problems)
			}
			got, problems := qs.Spec(tt.cat)
			if len(problems) != len(tt.errs) {
				t.Fatalf("problems = %q, want %q", problems, tt.errs)
			}
			for i, want := range tt.errs {
				if !strings.HasPrefix(problems[i].String(), want) {
					t.Errorf("problem %d = %q, want prefix %q", i, problems[i], want)
				}
			}
			if len(tt.errs) == 0 && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("spec = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestQuerySpecMarshal(t *testing.T) {
	s := QuerySpec{Questions: []bcp.Question{{ID: "who", Question: "Who?", MaxWords: 3, Format: bcp.PersonName}}, Context: "c"}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"questions":[{"id":"who","question":"Who?","max_words":3,"expected_format":"person_name"}],"context":"c"}`; string(b) != want {
		t.Errorf("marshal = %s, want %s", b, want)
	}
	var back QuerySpec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	back.spelled = nil
	if !reflect.DeepEqual(back, s) {
		t.Errorf("round trip = %+v, want %+v", back, s)
	}
	raw := QuerySpec{Raw: json.RawMessage(`{"questions":[{"name":"who","fromat":"x"}]}`)}
	b, err = json.Marshal(QueryRequest{Type: TypeQueryRequest, RequestID: "r", To: "x", Category: 2, Spec: raw})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"spec":{"questions":[{"name":"who","fromat":"x"}]}`) {
		t.Errorf("raw spec not sent as written: %s", b)
	}
}

func TestDecodeQueryRequestMalformed(t *testing.T) {
	for _, line := range []string{`{"type":"bcp_query_request","request_id":5}`, `{"type":"bcp_query_request","category":"2"}`} {
		_, err := DecodeQueryRequest([]byte(line))
		if err == nil || errors.As(err, new(*SpecError)) {
			t.Errorf("%s: err = %v, want a message error", line, err)
		}
	}
	q, err := DecodeQueryRequest([]byte(`{"type":"bcp_query_request","request_id":"r","to":"x","category":1}`))
	if err != nil || q.RequestID != "r" || q.Spec.Fields != nil {
		t.Errorf("no spec: %+v, %v", q, err)
	}
}
