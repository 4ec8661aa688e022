package runtime

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/bcpgw/bcpgw/bcp"
)

// FuzzDecodeQuerySpec checks that the strict spec decoder never panics,
// that a refused spec yields nothing usable, and that an accepted one
// survives its own encoding unchanged (what the gateway understood is what
// it would say back), as does QuerySpec.Spec in every category.
func FuzzDecodeQuerySpec(f *testing.F) {
	for _, seed := range []string{
		`{"questions":[{"id":"who","question":"Who?","max_words":3,"expected_format":"person_name"}],"max_words":5,"context":"c"}`,
		`{"questions":[{"name":"who","format":"person_name","max_words":3}]}`,
		`{"questions":[{"id":"who","question":"Who?","fromat":"person_name"}]}`,
		`{"questions":[{"id":"a","name":"a","question":"A?"}]}`,
		`{"fields":[{"name":"p","type":"enum","options":["low","high"]},{"name":"n","type":"integer","min":-2,"max":9}]}`,
		`{"fields":[{"name":"p","type":"enum","values":["x"],"options":["x"]}]}`,
		`{"directive":"Summarize.","max_words":40}`,
		`{"max_words":3,"max_words":4}`,
		`{"max_words":1e400,"context":null}`,
		`{"fields":[{"values":[[[[[[[[1]]]]]]]]}]}`,
		`{"\u0000":[{"\ud800":1}]}`,
		`[]`, `null`, `{`, "{\"context\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, problems := DecodeQuerySpec(raw)
		if len(problems) > 0 {
			s.spelled = nil
			if !reflect.DeepEqual(s, QuerySpec{}) {
				t.Fatalf("refused spec returned %+v", s)
			}
			for _, p := range problems {
				if p.Msg == "" {
					t.Fatalf("problem without a message: %+v", p)
				}
			}
			return
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal accepted spec: %v", err)
		}
		again, problems := DecodeQuerySpec(out)
		if len(problems) > 0 {
			t.Fatalf("encoded spec %s refused: %v (input %q)", out, problems, raw)
		}
		s.spelled, again.spelled = nil, nil
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip changed the spec:\nfirst  %+v\nsecond %+v", s, again)
		}
		for _, cat := range []bcp.Category{bcp.Cat1, bcp.Cat2, bcp.Cat3} {
			spec, problems := s.Spec(cat)
			if len(problems) == 0 {
				if ps := spec.Problems(); len(ps) > 0 {
					t.Fatalf("Spec(%d) accepted a spec with problems %v", cat, ps)
				}
				_ = bcp.Bits(spec)
			}
		}
	})
}
