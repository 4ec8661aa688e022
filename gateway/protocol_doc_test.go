package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/runtime"
)

// The wire examples of docs/protocol.md are the fenced blocks opened with
// "```json wire": each holds one or more protocol messages. The tests
// below decode every one with the Go types the gateway reads and writes,
// so that the page cannot drift from the code.

const protocolDoc = "../docs/protocol.md"

// docExample is one message of a wire example.
type docExample struct {
	line int // of the block's opening fence
	raw  []byte
	typ  string
}

// protocolExamples returns the messages of the page's wire examples.
func protocolExamples(t *testing.T) []docExample {
	t.Helper()
	f, err := os.Open(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docExample
	sc := bufio.NewScanner(f)
	n, open := 0, 0
	var block bytes.Buffer
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		switch {
		case open == 0 && text == "```json wire":
			open = n
			block.Reset()
		case open > 0 && text == "```":
			dec := json.NewDecoder(bytes.NewReader(block.Bytes()))
			for {
				var raw json.RawMessage
				if err := dec.Decode(&raw); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("%s:%d: not JSON: %v", protocolDoc, open, err)
				}
				var head struct {
					Type string `json:"type"`
				}
				if err := json.Unmarshal(raw, &head); err != nil || head.Type == "" {
					t.Fatalf("%s:%d: a message without a string type: %s", protocolDoc, open, raw)
				}
				out = append(out, docExample{line: open, raw: raw, typ: head.Type})
			}
			open = 0
		case open > 0:
			block.WriteString(sc.Text())
			block.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if open > 0 {
		t.Fatalf("%s:%d: wire example not closed", protocolDoc, open)
	}
	return out
}

// interrupted is the runtime's answer to an interrupt. The gateway reads
// no field of it: it audits the line as it is.
type interrupted struct {
	Type string `json:"type"`
}

// wireMessage returns a new value of the Go type a message of type typ
// is decoded into, and whether the gateway (toRuntime) or the runtime
// sends it; error goes both ways.
func wireMessage(typ string) (v any, toRuntime, fromRuntime bool) {
	switch typ {
	case runtime.TypeStart:
		return &runtime.Start{}, true, false
	case runtime.TypeSubscriptionsActive:
		return &runtime.SubscriptionsActive{}, true, false
	case runtime.TypePrompt:
		return &runtime.Prompt{}, true, false
	case runtime.TypeQuery:
		return &runtime.Query{}, true, false
	case runtime.TypeQuerySent:
		return &runtime.QuerySent{}, true, false
	case runtime.TypeQueryError:
		return &runtime.QueryError{}, true, false
	case runtime.TypeValidationResult:
		return &runtime.ValidationResult{}, true, false
	case runtime.TypeResponseDelivery:
		return &runtime.ResponseDelivery{}, true, false
	case runtime.TypeInterrupt:
		return &runtime.Interrupt{}, true, false
	case runtime.TypeShutdown:
		return &runtime.Shutdown{}, true, false
	case runtime.TypeReady:
		return &runtime.Ready{}, false, true
	case runtime.TypeResult:
		return &runtime.Result{}, false, true
	case runtime.TypeText:
		return &runtime.Text{}, false, true
	case runtime.TypeToolUse:
		return &runtime.ToolUse{}, false, true
	case runtime.TypeToolResult:
		return &runtime.ToolResult{}, false, true
	case runtime.TypeLog:
		return &runtime.Log{}, false, true
	case runtime.TypeError:
		return &runtime.Error{}, true, true
	case runtime.TypeInterrupted:
		return &interrupted{}, false, true
	case runtime.TypeQueryRequest:
		return &runtime.QueryRequest{}, false, true
	case runtime.TypeResponse:
		return &runtime.Response{}, false, true
	case runtime.TypeSubscribeRequest:
		return &runtime.SubscribeRequest{}, false, true
	case runtime.TypeSubscribeResult:
		return &runtime.SubscribeResult{}, true, false
	}
	if name, ok := strings.CutSuffix(typ, "_response"); ok {
		if _, unsupported := runtime.Unsupported(name + "_request"); unsupported {
			return &runtime.UnsupportedReply{}, true, false
		}
	}
	return nil, false, false
}

// decodeStrictly decodes a message with the Go type of its type, refusing
// unknown fields, and checks that the type writes it back the same: a
// field the type does not have, misspells, or writes differently (a
// missing field the gateway always writes, another spelling) is an error.
// The round trip also covers the types that decode themselves (a spec in
// both spellings, a result's token counts), which DisallowUnknownFields
// does not reach.
func decodeStrictly(typ string, raw []byte) error {
	v, _, _ := wireMessage(typ)
	if v == nil {
		return fmt.Errorf("unknown message type %q", typ)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode as %T: %w", v, err)
	}
	back, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	var want, got any
	if err := json.Unmarshal(raw, &want); err != nil {
		return err
	}
	if err := json.Unmarshal(back, &got); err != nil {
		return err
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Errorf("%T writes it as\n\t%s", v, back)
	}
	return nil
}

// keyPaths adds the key paths of a decoded message to out: "agent.cwd",
// "subscriptions[].fields[].values". The contents of a response, of a
// prompt's metadata and of a tool call's input are data, not protocol,
// and are not walked.
func keyPaths(v any, prefix string, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			if k != "response" && k != "metadata" && k != "input" {
				keyPaths(val, p, out)
			}
		}
	case []any:
		for _, item := range v {
			keyPaths(item, prefix+"[]", out)
		}
	}
}

// documentedKeys returns, by message type, every key path the page's
// examples show.
func documentedKeys(t *testing.T) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, ex := range protocolExamples(t) {
		var v any
		if err := json.Unmarshal(ex.raw, &v); err != nil {
			t.Fatal(err)
		}
		if out[ex.typ] == nil {
			out[ex.typ] = map[string]bool{}
		}
		keyPaths(v, "", out[ex.typ])
	}
	return out
}

// messageTypes returns the message types runtime/message.go declares (its
// Type... constants).
func messageTypes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "runtime", "message.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Type") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, v)
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("found only %d message types in runtime/message.go: %q", len(out), out)
	}
	return out
}

// TestProtocolDoc checks docs/protocol.md against the code: every wire
// example decodes strictly with the gateway's own types and is written
// back by them unchanged, every message type of runtime/message.go has an
// example, and every error code of bcp/code.go is documented.
func TestProtocolDoc(t *testing.T) {
	examples := protocolExamples(t)
	shown := map[string]bool{}
	for _, ex := range examples {
		shown[ex.typ] = true
		if err := decodeStrictly(ex.typ, ex.raw); err != nil {
			t.Errorf("%s:%d: the example\n\t%s\ndoes not match the code: %v", protocolDoc, ex.line, ex.raw, err)
		}
	}
	for _, typ := range messageTypes(t) {
		if !shown[typ] {
			t.Errorf("%s has no wire example of %q (runtime/message.go)", protocolDoc, typ)
		}
	}
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range bcp.Codes {
		if !bytes.Contains(doc, []byte("| `"+string(c)+"`")) {
			t.Errorf("%s does not document the error code %s in its table (a row starting | `%s`)", protocolDoc, c, c)
		}
	}
}

// traceLine is one line of the Python runtime's PYRT_TRACE.
type traceLine struct {
	Dir  string `json:"dir"`
	Line string `json:"line"`
}

// checkTrace checks every line a runtime exchanged with the gateway (its
// PYRT_TRACE file) against docs/protocol.md: it decodes strictly with the
// Go type of its type, goes the direction the page says, and has no key
// path the page's examples of that type do not show. It returns the
// types seen.
func checkTrace(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedKeys(t)
	seen := map[string]bool{}
	// A last line still being written is left out.
	lines := strings.Split(string(b), "\n")
	lines = lines[:len(lines)-1]
	if len(lines) == 0 {
		t.Errorf("%s is empty", path)
	}
	for i, l := range lines {
		var tl traceLine
		if err := json.Unmarshal([]byte(l), &tl); err != nil {
			t.Fatalf("%s:%d: %v", path, i+1, err)
		}
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal([]byte(tl.Line), &head); err != nil {
			t.Errorf("%s:%d: %s: %v", path, i+1, tl.Line, err)
			continue
		}
		seen[head.Type] = true
		_, toRuntime, fromRuntime := wireMessage(head.Type)
		if (tl.Dir == "in" && !toRuntime) || (tl.Dir == "out" && !fromRuntime) {
			t.Errorf("%s:%d: %q went %s, which the page does not say it does: %s", path, i+1, head.Type, tl.Dir, tl.Line)
		}
		if err := decodeStrictly(head.Type, []byte(tl.Line)); err != nil {
			t.Errorf("%s:%d: %s: %v", path, i+1, tl.Line, err)
		}
		var v any
		_ = json.Unmarshal([]byte(tl.Line), &v)
		keys := map[string]bool{}
		keyPaths(v, "", keys)
		for k := range keys {
			if !documented[head.Type][k] {
				t.Errorf("%s:%d: %s carries %s, which no example of %s in %s shows: %s", path, i+1, head.Type, k, head.Type, protocolDoc, tl.Line)
			}
		}
	}
	return seen
}

// sortedKeys is for messages.
func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
