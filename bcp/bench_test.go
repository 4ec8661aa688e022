package bcp

import (
	"strings"
	"testing"
)

// The benchmarks validate a typical accepted response for each category;
// BenchmarkParseObject is the strict JSON parse alone, the baseline the
// category costs can be compared with.
var (
	benchCat1 = []byte(`{"has_breaking_news":true,"priority":"critical","score":4}`)
	benchCat2 = []byte(`{"topic":"Quantum computing breakthrough","finding":"Google achieves 100-qubit error correction milestone with a new surface code layout","relevance":"4"}`)
	benchCat3 = []byte(`{"summary":"` + strings.TrimSuffix(strings.Repeat("Two sources changed today and one was removed. ", 10), " ") + `"}`)
)

func benchValidate(b *testing.B, spec Spec, raw []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Validate(spec, raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateCat1(b *testing.B) { benchValidate(b, alerts, benchCat1) }
func BenchmarkValidateCat2(b *testing.B) { benchValidate(b, seedFindings, benchCat2) }
func BenchmarkValidateCat3(b *testing.B) {
	benchValidate(b, Spec{Category: Cat3, Directive: "d", MaxWords: 100}, benchCat3)
}

func BenchmarkParseObject(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchCat2)))
	for b.Loop() {
		if _, err := parseObject(benchCat2); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateRefusedDeep measures the cost of refusing a hostile
// 1 MiB response: the bound that matters for a flooding Reader.
func BenchmarkValidateRefusedLarge(b *testing.B) {
	raw := []byte(`{"summary":"` + strings.Repeat("ab ", (MaxResponseBytes-20)/3) + `"}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Validate(Spec{Category: Cat3, Directive: "d", MaxWords: 100}, raw); err == nil {
			b.Fatal("accepted")
		}
	}
}
