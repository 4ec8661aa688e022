package runtime

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// BenchmarkDecoderNext decodes typical runtime lines (a bcp_response of
// about 200 bytes); BenchmarkReadLines only splits the same input into
// lines, the baseline.
func benchInput(n int) []byte {
	line := `{"type":"bcp_response","subscription_id":"research-findings","controller":"main","response":{"topic":"Quantum computing","finding":"` + strings.Repeat("word ", 20) + `","relevance":"4"}}` + "\n"
	return bytes.Repeat([]byte(line), n)
}

func BenchmarkDecoderNext(b *testing.B) {
	input := benchInput(1000)
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		dec := NewDecoder(bytes.NewReader(input), 0)
		for {
			if _, err := dec.Next(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkReadLines(b *testing.B) {
	input := benchInput(1000)
	b.SetBytes(int64(len(input)))
	b.ReportAllocs()
	for b.Loop() {
		dec := NewDecoder(bytes.NewReader(input), 0)
		for {
			if _, err := dec.readLine(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}
