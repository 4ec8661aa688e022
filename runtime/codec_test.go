package runtime

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

// readAll decodes every line of input, returning each line's type or the
// error it produced.
func readAll(t *testing.T, input string, max int, r func(io.Reader) io.Reader) []string {
	t.Helper()
	var src io.Reader = strings.NewReader(input)
	if r != nil {
		src = r(src)
	}
	dec := NewDecoder(src, max)
	var got []string
	for {
		env, err := dec.Next()
		if err == io.EOF {
			return got
		}
		var le *LineError
		switch {
		case errors.As(err, &le):
			got = append(got, "error:"+le.Err.Error())
		case err != nil:
			t.Fatalf("Next: %v", err)
		default:
			got = append(got, env.Type)
		}
		if len(got) > 100 {
			t.Fatal("decoder does not advance")
		}
	}
}

func TestDecoderSurvivesBadLines(t *testing.T) {
	long := `{"type":"text","text":"` + strings.Repeat("x", 200) + `"}`
	tests := []struct {
		name  string
		input string
		max   int
		want  string
	}{
		{"plain", `{"type":"ready"}` + "\n" + `{"type":"result"}` + "\n", 0, "ready,result"},
		{"no final newline", `{"type":"ready"}` + "\n" + `{"type":"result"}`, 0, "ready,result"},
		{"crlf and blank lines", "\r\n" + `{"type":"ready"}` + "\r\n\n  \n" + `{"type":"log"}` + "\n", 0, "ready,log"},
		{"too long in the middle", `{"type":"ready"}` + "\n" + long + "\n" + `{"type":"result"}` + "\n", 64, "ready,error:line too long,result"},
		{"too long at the end", `{"type":"ready"}` + "\n" + long, 64, "ready,error:line too long"},
		{"exactly the limit", `{"type":"ready"}` + "\n", len(`{"type":"ready"}`), "ready"},
		{"one over the limit", `{"type":"ready"}` + "\n" + `{"type":"log"}` + "\n", len(`{"type":"ready"}`) - 1, "error:line too long,log"},
		{"not json", "hello world\n" + `{"type":"ready"}` + "\n", 0, "error:line is not a JSON object,ready"},
		{"array", "[1,2]\n" + `{"type":"ready"}` + "\n", 0, "error:line is not a JSON object,ready"},
		{"truncated object", `{"type":"rea` + "\n" + `{"type":"ready"}` + "\n", 0, "error:line is not a JSON object,ready"},
		{"no type", `{"kind":"ready"}` + "\n", 0, `error:line has no string "type" field`},
		{"numeric type", `{"type":7}` + "\n", 0, `error:line has no string "type" field`},
		{"empty type", `{"type":""}` + "\n", 0, `error:line has no string "type" field`},
		{"invalid utf-8", "{\"type\":\"text\",\"text\":\"\xff\"}\n" + `{"type":"ready"}` + "\n", 0, "error:line is not valid UTF-8,ready"},
		{"nul bytes", "\x00\x00\x00\n" + `{"type":"ready"}` + "\n", 0, "error:line is not a JSON object,ready"},
	}
	for _, tt := range tests {
		for _, slow := range []bool{false, true} {
			name := tt.name
			var wrap func(io.Reader) io.Reader
			if slow {
				name += "/one byte reads"
				wrap = iotest.OneByteReader
			}
			t.Run(name, func(t *testing.T) {
				if got := strings.Join(readAll(t, tt.input, tt.max, wrap), ","); got != tt.want {
					t.Errorf("got %s, want %s", got, tt.want)
				}
			})
		}
	}
}

func TestDecoderLongLineReportsLengthAndHead(t *testing.T) {
	line := `{"type":"text","text":"` + strings.Repeat("y", 3<<20) + `"}`
	dec := NewDecoder(strings.NewReader(line+"\n"+`{"type":"ready"}`+"\n"), 1<<20)
	_, err := dec.Next()
	var le *LineError
	if !errors.As(err, &le) || !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err = %v, want a too-long LineError", err)
	}
	if le.Len != len(line)+1 {
		t.Errorf("Len = %d, want %d", le.Len, len(line)+1)
	}
	if len(le.Head) != headLen || !bytes.HasPrefix(le.Head, []byte(`{"type":"text"`)) {
		t.Errorf("Head = %q (%d bytes), want the first %d bytes", le.Head[:20], len(le.Head), headLen)
	}
	env, err := dec.Next()
	if err != nil || env.Type != "ready" {
		t.Fatalf("after the long line: %v %v, want ready", env.Type, err)
	}
}

func TestEnvelopeDecode(t *testing.T) {
	dec := NewDecoder(strings.NewReader(`{"type":"bcp_response","subscription_id":"s","controller":"main","response":{"a":"b"}}`+"\n"), 0)
	env, err := dec.Next()
	if err != nil {
		t.Fatal(err)
	}
	var r Response
	if err := env.Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.SubscriptionID != "s" || r.Controller != "main" || string(r.Response) != `{"a":"b"}` {
		t.Errorf("decoded %+v", r)
	}
}

func TestEncoderConcurrentLinesStayWhole(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := enc.Encode(Log{Type: TypeLog, Level: "info", Message: strings.Repeat("z", 1000)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got := readAll(t, buf.String(), 0, nil)
	if len(got) != 50 {
		t.Fatalf("decoded %d lines, want 50", len(got))
	}
	for _, typ := range got {
		if typ != TypeLog {
			t.Fatalf("line decoded as %q: lines interleaved", typ)
		}
	}
}
