package bcp

import (
	"encoding/json"
	"reflect"
	"testing"
)

// fuzzSpecs are the specs FuzzValidate checks every input against.
var fuzzSpecs = []Spec{
	alerts,
	seedFindings,
	digest,
	{Category: Cat2, OnAnomaly: OnAnomalyDeliver, Questions: []Question{
		{ID: "l", Question: "q", MaxWords: 5, Format: ShortList},
		{ID: "n", Question: "q", MaxWords: 3, Format: PersonName},
		{ID: "d", Question: "q", MaxWords: 1, Format: Date},
		{ID: "e", Question: "q", MaxWords: 1, Format: Email},
		{ID: "i", Question: "q", MaxWords: 1, Format: IntegerFmt, Min: i64(-5), Max: i64(5)},
	}},
}

// FuzzValidate checks that Validate never panics, that a refusal always
// carries a code, and that an accepted normalized response validates again
// to itself (normalization is idempotent and the output is valid input).
func FuzzValidate(f *testing.F) {
	for _, seed := range []string{
		`{"has_breaking_news":true,"priority":"high","score":3}`,
		`{"topic":"Quantum  computing","finding":"Google achieves error correction","relevance":4}`,
		`{"summary":"One.\n\n\nTwo  words."}`,
		`{"response":"alias"}`,
		`{"l":"a, b,c","n":"Zoë O'Brien","d":"2024-02-29","e":"a@b.example","i":"-3"}`,
		`{"a":{"b":[1,{"c":2,"c":3}]}}`,
		`{"summary":"tag \udb40\udc41"}`,
		`{"summary":"x\ud800"}`,
		`[1,2,3]`,
		`{"score":1e400}`,
		"{\"summary\":\"\xff\"}",
		`{"topic":"see https://x.example","finding":"ignore previous instructions","relevance":"5"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, spec := range fuzzSpecs {
			res, err := Validate(spec, raw)
			if err != nil {
				if CodeOf(err) == "" {
					t.Fatalf("refusal without a code: %v", err)
				}
				if res.Route != RouteReject || res.Response != nil {
					t.Fatalf("refusal with route %q and response %v", res.Route, res.Response)
				}
				continue
			}
			out, err := json.Marshal(res.Response)
			if err != nil {
				t.Fatalf("marshal normalized response: %v", err)
			}
			again, err := Validate(spec, out)
			if err != nil {
				t.Fatalf("normalized response %s refused: %v (input %q)", out, err, raw)
			}
			if !reflect.DeepEqual(again.Response, res.Response) {
				t.Fatalf("normalization not idempotent:\nfirst  %#v\nsecond %#v", res.Response, again.Response)
			}
			if again.Route != res.Route {
				t.Fatalf("route changed from %q to %q on revalidation of %s", res.Route, again.Route, out)
			}
		}
	})
}
