package bcp

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func i64(n int64) *int64 { return &n }

// seedFindings is the research-findings subscription of the protocol docs.
var seedFindings = Spec{Category: Cat2, Questions: []Question{
	{ID: "topic", Question: "What is the topic?", MaxWords: 10, Format: ShortText},
	{ID: "finding", Question: "What is the key finding?", MaxWords: 50, Format: ShortText},
	{ID: "relevance", Question: "Relevance score", MaxWords: 1, Format: IntegerFmt},
}}

func TestBitsWorkedExamples(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{
			// The BCP document's Cat-1 example: boolean + 3-value enum +
			// integer 1..5 + 4-value enum.
			name: "cat1 example 6.9",
			spec: Spec{Category: Cat1, Fields: []Field{
				{Name: "a", Type: Boolean},
				{Name: "b", Type: Enum, Values: []string{"x", "y", "z"}},
				{Name: "c", Type: Integer, Min: i64(1), Max: i64(5)},
				{Name: "d", Type: Enum, Values: []string{"low", "medium", "high", "critical"}},
			}},
			want: "6.9 bits",
		},
		{name: "cat2 example 671.0", spec: seedFindings, want: "671.0 bits"},
		{name: "cat3 100 words", spec: Spec{Category: Cat3, Directive: "d", MaxWords: 100}, want: "1100.0 bits"},
		{
			name: "cat2 question inherits max_words",
			spec: Spec{Category: Cat2, MaxWords: 5, Questions: []Question{{ID: "a", Question: "q"}, {ID: "b", Question: "q", MaxWords: 2}}},
			want: "77.0 bits",
		},
		{name: "boolean alone", spec: Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Boolean}}}, want: "1.0 bits"},
		{name: "integer single value", spec: Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Integer, Min: i64(3), Max: i64(3)}}}, want: "0.0 bits"},
		{
			name: "integer full int64 range does not overflow",
			spec: Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Integer, Min: i64(math.MinInt64), Max: i64(math.MaxInt64)}}},
			want: "64.0 bits",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if ps := tt.spec.Problems(); ps != nil {
				t.Fatalf("spec has problems: %v", ps)
			}
			if got := FormatBits(Bits(tt.spec)); got != tt.want {
				t.Errorf("Bits = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestSpecProblems(t *testing.T) {
	q := func(id string) Question { return Question{ID: id, Question: "q?", MaxWords: 3} }
	tests := []struct {
		name string
		spec Spec
		want []string // each a substring of one problem, in order
	}{
		{"category 0", Spec{}, []string{"category: must be 1, 2 or 3"}},
		{"category 4", Spec{Category: 4}, []string{"category: must be 1, 2 or 3, got 4"}},
		{"cat1 no fields", Spec{Category: Cat1}, []string{"fields: category 1 needs at least one field"}},
		{"cat1 dup names", Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Boolean}, {Name: "a", Type: Boolean}}},
			[]string{`fields[1].name: duplicate field "a" (also fields[0])`}},
		{"cat1 bad name", Spec{Category: Cat1, Fields: []Field{{Name: "a b", Type: Boolean}}}, []string{`fields[0].name: "a b" is not a valid name`}},
		{"cat1 missing name", Spec{Category: Cat1, Fields: []Field{{Type: Boolean}}}, []string{"fields[0].name: required"}},
		{"enum one value", Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Enum, Values: []string{"x"}}}},
			[]string{"fields[0].values: an enum needs at least 2 distinct values"}},
		{"enum dup values", Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Enum, Values: []string{"x", "x"}}}},
			[]string{`fields[0].values[1]: duplicate value "x"`, "fields[0].values: an enum needs at least 2 distinct values"}},
		{"enum empty value", Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Enum, Values: []string{"x", ""}}}},
			[]string{"fields[0].values[1]: must not be empty"}},
		{"integer no bounds", Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Integer}}},
			[]string{"fields[0].min: required", "fields[0].max: required"}},
		{"integer min > max", Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Integer, Min: i64(5), Max: i64(1)}}},
			[]string{"fields[0]: min 5 is greater than max 1"}},
		{"values on boolean", Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Boolean, Values: []string{"x", "y"}}}},
			[]string{"fields[0].values: only allowed for type enum"}},
		{"min on enum", Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: Enum, Values: []string{"x", "y"}, Min: i64(1)}}},
			[]string{"fields[0]: min and max are only allowed for type integer"}},
		{"unknown type", Spec{Category: Cat1, Fields: []Field{{Name: "a", Type: "float"}}},
			[]string{`fields[0].type: must be boolean, enum or integer, got "float"`}},
		{"missing type", Spec{Category: Cat1, Fields: []Field{{Name: "a"}}}, []string{"fields[0].type: required"}},
		{"cat1 with max_words", Spec{Category: Cat1, MaxWords: 3, Fields: []Field{{Name: "a", Type: Boolean}}},
			[]string{"max_words: not allowed in category 1"}},
		{"cat2 no questions", Spec{Category: Cat2}, []string{"questions: category 2 needs at least one question"}},
		{"cat2 dup ids", Spec{Category: Cat2, Questions: []Question{q("a"), q("a")}}, []string{`questions[1].id: duplicate question id "a"`}},
		{"cat2 no words", Spec{Category: Cat2, Questions: []Question{{ID: "a", Question: "q"}}},
			[]string{"questions[0].max_words: required: set it on the question or on the subscription"}},
		{"cat2 no question text", Spec{Category: Cat2, Questions: []Question{{ID: "a", MaxWords: 1}}}, nil}, // the decoders decide
		{"cat2 unknown format", Spec{Category: Cat2, Questions: []Question{{ID: "a", Question: "q", MaxWords: 1, Format: "phone"}}},
			[]string{`questions[0].expected_format: unknown format "phone" (known: short_text, short_list, person_name, date, email, integer)`}},
		{"cat2 min on text", Spec{Category: Cat2, Questions: []Question{{ID: "a", Question: "q", MaxWords: 1, Min: i64(1)}}},
			[]string{"questions[0]: min and max are only allowed with expected_format integer"}},
		{"cat2 bad policy", Spec{Category: Cat2, OnAnomaly: "ignore", Questions: []Question{q("a")}},
			[]string{`on_anomaly: must be review, reject or deliver, got "ignore"`}},
		{"cat2 with fields", Spec{Category: Cat2, Questions: []Question{q("a")}, Fields: []Field{{Name: "x", Type: Boolean}}},
			[]string{"fields: only allowed in category 1"}},
		{"cat3 nothing", Spec{Category: Cat3}, []string{"directive: required", "max_words: required in category 3"}},
		{"cat3 policy", Spec{Category: Cat3, Directive: "d", MaxWords: 3, OnAnomaly: OnAnomalyDeliver},
			[]string{"on_anomaly: only allowed in category 2"}},
		{"directive on cat2", Spec{Category: Cat2, Directive: "d", Questions: []Question{q("a")}}, []string{"directive: only allowed in category 3"}},
		{"empty fields on cat2", Spec{Category: Cat2, Fields: []Field{}, Questions: []Question{q("a")}}, []string{"fields: only allowed in category 1"}},
		{"empty questions on cat1", Spec{Category: Cat1, Questions: []Question{}, Fields: []Field{{Name: "a", Type: Boolean}}}, []string{"questions: only allowed in category 2"}},
		{"valid cat2", seedFindings, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.spec.Problems()
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems %v, want %d %q", len(got), got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i].String(), w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestSpecComplete(t *testing.T) {
	s := Spec{Category: Cat2, MaxWords: 7, Questions: []Question{
		{ID: "a", Question: "q"},
		{ID: "b", Question: "q", MaxWords: 2, Format: Date},
	}}
	got := s.Complete()
	want := []Question{{ID: "a", Question: "q", MaxWords: 7, Format: ShortText}, {ID: "b", Question: "q", MaxWords: 2, Format: Date}}
	if !reflect.DeepEqual(got.Questions, want) {
		t.Fatalf("Complete().Questions = %+v, want %+v", got.Questions, want)
	}
	if s.Questions[0].MaxWords != 0 || s.Questions[0].Format != "" {
		t.Errorf("Complete changed its receiver: %+v", s.Questions[0])
	}
	if Bits(got) != Bits(s) {
		t.Errorf("bits %v, want %v", Bits(got), Bits(s))
	}
	if c := (Spec{Category: Cat1, Fields: []Field{{Name: "x", Type: Boolean}}}).Complete(); c.Questions != nil {
		t.Errorf("Cat-1 spec grew questions: %+v", c)
	}
}
