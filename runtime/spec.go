package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bcpgw/bcpgw/bcp"
)

// QuerySpec is the shape a Controller asks for in a bcp_query_request.
//
// It is decoded as strictly as a definition's subscription: an unknown or
// misspelled key, a duplicate key, a value of the wrong JSON type or both
// spellings of one key are refused with every problem and its path (a
// *[SpecError]), never dropped, because a dropped "format" or "max" would
// silently remove a limit the Controller meant to set.
//
// Two spellings are accepted, one of each pair: the protocol's {id,
// question, expected_format} and TriOnyx's {name, format} for questions
// (with "name" the question text is optional: the name is the question),
// and "values" or TriOnyx's "options" for enum choices. It is encoded in
// the protocol's spelling.
type QuerySpec struct {
	Fields    []bcp.Field
	Questions []bcp.Question
	Directive string
	MaxWords  int
	Context   string
	// Raw, if set, is what is sent instead of the fields above: for a
	// runtime that forwards a spec written elsewhere (by its model, say)
	// so that the gateway judges exactly what was written. It must be a
	// JSON object. Decoding never sets it.
	Raw json.RawMessage

	// spelled maps the path of a key in the protocol's spelling to the
	// path as the decoded JSON spelled it ("questions[0].expected_format"
	// to "questions[0].format"), for error messages.
	spelled map[string]string
}

// MarshalJSON writes Raw if set, else the spec in the protocol's spelling
// (but for a question without text, see below), so that it decodes back
// to the same spec. A list that is present but empty is written (the
// spec's rules tell it from an absent one).
func (s QuerySpec) MarshalJSON() ([]byte, error) {
	if s.Raw != nil {
		return s.Raw, nil
	}
	type field struct {
		Name   string        `json:"name"`
		Type   bcp.FieldType `json:"type"`
		Values *[]string     `json:"values,omitempty"`
		Min    *int64        `json:"min,omitempty"`
		Max    *int64        `json:"max,omitempty"`
	}
	// A question without text is written with TriOnyx's "name", with
	// which the text is optional (with "id" it is required).
	type question struct {
		ID       string     `json:"id,omitempty"`
		Name     string     `json:"name,omitempty"`
		Question string     `json:"question,omitempty"`
		MaxWords int        `json:"max_words,omitempty"`
		Format   bcp.Format `json:"expected_format,omitempty"`
		Min      *int64     `json:"min,omitempty"`
		Max      *int64     `json:"max,omitempty"`
	}
	var out struct {
		Fields    *[]field    `json:"fields,omitempty"`
		Questions *[]question `json:"questions,omitempty"`
		Directive string      `json:"directive,omitempty"`
		MaxWords  int         `json:"max_words,omitempty"`
		Context   string      `json:"context,omitempty"`
	}
	if s.Fields != nil {
		fs := make([]field, len(s.Fields))
		for i, f := range s.Fields {
			fs[i] = field{Name: f.Name, Type: f.Type, Min: f.Min, Max: f.Max}
			if f.Values != nil {
				fs[i].Values = &s.Fields[i].Values
			}
		}
		out.Fields = &fs
	}
	if s.Questions != nil {
		qs := make([]question, len(s.Questions))
		for i, q := range s.Questions {
			qs[i] = question{ID: q.ID, Question: q.Question, MaxWords: q.MaxWords, Format: q.Format, Min: q.Min, Max: q.Max}
			if q.Question == "" {
				qs[i].ID, qs[i].Name = "", q.ID
			}
		}
		out.Questions = &qs
	}
	out.Directive, out.MaxWords, out.Context = s.Directive, s.MaxWords, s.Context
	return json.Marshal(out)
}

// UnmarshalJSON decodes a spec strictly; its error is a *SpecError.
func (s *QuerySpec) UnmarshalJSON(data []byte) error {
	spec, problems := DecodeQuerySpec(data)
	if len(problems) > 0 {
		return &SpecError{Problems: problems}
	}
	*s = spec
	return nil
}

// DecodeQueryRequest decodes a bcp_query_request line. When only its spec
// is refused, the error is a *SpecError and the other fields are set, so
// the refusal can name the request; any other error means the message
// itself is malformed.
func DecodeQueryRequest(line []byte) (QueryRequest, error) {
	var head struct {
		Type      string          `json:"type"`
		RequestID string          `json:"request_id"`
		To        string          `json:"to"`
		Category  bcp.Category    `json:"category"`
		Spec      json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return QueryRequest{}, fmt.Errorf("decode %s: %w", TypeQueryRequest, err)
	}
	q := QueryRequest{Type: head.Type, RequestID: head.RequestID, To: head.To, Category: head.Category}
	if head.Spec == nil {
		return q, nil
	}
	spec, problems := DecodeQuerySpec(head.Spec)
	if len(problems) > 0 {
		return q, &SpecError{Problems: problems}
	}
	q.Spec = spec
	return q, nil
}

// DecodeSubscribeRequest decodes a bcp_subscribe_request line, its spec
// as strictly as a query's (see DecodeQueryRequest for the errors).
func DecodeSubscribeRequest(line []byte) (SubscribeRequest, error) {
	q, err := DecodeQueryRequest(line)
	return SubscribeRequest{Type: q.Type, RequestID: q.RequestID, To: q.To, Category: q.Category, Spec: q.Spec}, err
}

// SpecError is a query spec the strict decoding refused. Each problem's
// path is relative to the spec and spelled as the sender spelled it.
type SpecError struct {
	Problems []bcp.Problem
}

func (e *SpecError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.String()
	}
	return strings.Join(msgs, "; ")
}

// Spec returns the spec s asks for in category cat, completed (each
// question's max_words and format written out, see bcp.Spec.Complete),
// or every problem that makes it unusable: bcp.Spec.Problems and a
// question without its text in the "id" spelling. Paths are spelled the
// way the Controller spelled them. It is meant for decoded specs; a
// QuerySpec built in Go reads as the protocol's spelling.
func (s QuerySpec) Spec(cat bcp.Category) (bcp.Spec, []bcp.Problem) {
	spec := bcp.Spec{Category: cat, Fields: s.Fields, Questions: s.Questions, Directive: s.Directive, MaxWords: s.MaxWords}
	problems := spec.Problems()
	if cat == bcp.Cat2 {
		for i, q := range s.Questions {
			p := fmt.Sprintf("questions[%d]", i)
			if q.ID != "" && q.Question == "" && s.spelled[p+".id"] == "" {
				problems = append(problems, bcp.Problem{Path: p + ".question",
					Msg: `required with "id" (with TriOnyx's "name" instead of "id", the name is the question and the text is optional)`})
			}
		}
	}
	if len(problems) > 0 {
		for i := range problems {
			problems[i].Path = respell(problems[i].Path, s.spelled)
		}
		return bcp.Spec{}, problems
	}
	return spec.Complete(), nil
}

// respell rewrites the protocol-spelled path p, or its prefix, the way
// the sender spelled it.
func respell(p string, spelled map[string]string) string {
	for canon, as := range spelled {
		if p == canon {
			return as
		}
		if rest, ok := strings.CutPrefix(p, canon); ok && (rest[0] == '.' || rest[0] == '[') {
			return as + rest
		}
	}
	return p
}

// maxSpecDepth bounds the nesting of a spec's JSON: a spec is three levels
// deep (spec, list, item, values); anything deeper is refused unread.
const maxSpecDepth = 8

// DecodeQuerySpec decodes a bcp_query_request's spec strictly (see
// QuerySpec) and returns every problem found; the spec is usable only when
// there are none. It never panics, whatever data holds.
func DecodeQuerySpec(data []byte) (QuerySpec, []bcp.Problem) {
	d := &specDecoder{}
	root, err := parseJSON(data)
	if err != nil {
		return QuerySpec{}, []bcp.Problem{{Msg: "spec is not valid JSON: " + err.Error()}}
	}
	var s QuerySpec
	d.object(root, "", "spec", []keyRule{
		{key: "fields", fn: func(n *jnode, p string) {
			s.Fields = []bcp.Field{}
			d.list(n, p, func(item *jnode, ip string) { s.Fields = append(s.Fields, d.field(item, ip)) })
		}},
		{key: "questions", fn: func(n *jnode, p string) {
			s.Questions = []bcp.Question{}
			d.list(n, p, func(item *jnode, ip string) { s.Questions = append(s.Questions, d.question(item, ip)) })
		}},
		{key: "directive", fn: func(n *jnode, p string) { s.Directive, _ = d.nonEmpty(n, p) }},
		{key: "max_words", fn: func(n *jnode, p string) { s.MaxWords, _ = d.words(n, p) }},
		{key: "context", fn: func(n *jnode, p string) { s.Context, _ = d.str(n, p) }},
	})
	if len(d.problems) > 0 {
		return QuerySpec{}, d.problems
	}
	s.spelled = d.spelled
	return s, nil
}

// specDecoder walks a parsed spec, collecting every problem.
type specDecoder struct {
	problems []bcp.Problem
	spelled  map[string]string
}

func (d *specDecoder) fail(path, format string, args ...any) {
	d.problems = append(d.problems, bcp.Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// keyRule is one key an object may hold. alias, if set, is the other
// spelling of key: either may be written, not both.
type keyRule struct {
	key, alias string
	fn         func(n *jnode, path string)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// plainKey is a key that may appear in a path as it is.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// showKey renders a key for a path: as it is when plain, else quoted and
// cut short, so no key can forge a path or smuggle a long text.
func showKey(k string) string {
	if plainKey.MatchString(k) {
		return k
	}
	if utf8.RuneCountInString(k) > 40 {
		k = string([]rune(k)[:40]) + "..."
	}
	return fmt.Sprintf("%+q", k)
}

// object walks an object node: unknown keys, duplicate keys and both
// spellings of a pair are problems; known keys go to their rules in
// document order. what names the object in the error for a non-object.
func (d *specDecoder) object(n *jnode, path, what string, rules []keyRule) {
	if n.kind != jObject {
		d.fail(path, "%s must be a JSON object, got %s", what, n.kind)
		return
	}
	byKey := map[string]*keyRule{}
	for i := range rules {
		r := &rules[i]
		byKey[r.key] = r
		if r.alias != "" {
			byKey[r.alias] = r
		}
	}
	written := map[*keyRule]string{} // the spelling each rule was written in
	for i, k := range n.keys {
		p := joinPath(path, showKey(k))
		if n.dup[i] {
			d.fail(p, "duplicate key")
			continue
		}
		r := byKey[k]
		if r == nil {
			d.fail(p, "unknown field (known: %s)", knownList(rules))
			continue
		}
		if other, twice := written[r]; twice {
			d.fail(p, "both %s and %s are set; write one (%s is TriOnyx's spelling of %s)", other, k, r.alias, r.key)
			continue
		}
		written[r] = k
		if k == r.alias {
			if d.spelled == nil {
				d.spelled = map[string]string{}
			}
			d.spelled[joinPath(path, r.key)] = p
		}
		r.fn(n.vals[i], p)
	}
}

func knownList(rules []keyRule) string {
	var keys []string
	for _, r := range rules {
		keys = append(keys, r.key)
		if r.alias != "" {
			keys = append(keys, r.alias)
		}
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

func (d *specDecoder) list(n *jnode, path string, fn func(item *jnode, path string)) {
	if n.kind != jArray {
		d.fail(path, "must be a list, got %s", n.kind)
		return
	}
	for i, item := range n.items {
		fn(item, fmt.Sprintf("%s[%d]", path, i))
	}
}

func (d *specDecoder) str(n *jnode, path string) (string, bool) {
	if n.kind != jString {
		d.fail(path, "must be a string, got %s", n.kind)
		return "", false
	}
	return n.text, true
}

func (d *specDecoder) nonEmpty(n *jnode, path string) (string, bool) {
	s, ok := d.str(n, path)
	if ok && s == "" {
		d.fail(path, "must not be empty")
		return "", false
	}
	return s, ok
}

// integer decodes a JSON integer literal: no fraction, no exponent, no
// string holding digits (a limit with the wrong type is a mistake).
func (d *specDecoder) integer(n *jnode, path string) (int64, bool) {
	if n.kind != jNumber {
		d.fail(path, "must be an integer, got %s", n.kind)
		return 0, false
	}
	if strings.ContainsAny(n.text, ".eE") {
		d.fail(path, "must be an integer, got %s", excerpt(n.text))
		return 0, false
	}
	v, err := strconv.ParseInt(n.text, 10, 64)
	if err != nil {
		d.fail(path, "integer %s is out of range", excerpt(n.text))
		return 0, false
	}
	return v, true
}

// words decodes a word limit: an integer from 1 to 2^31-1.
func (d *specDecoder) words(n *jnode, path string) (int, bool) {
	v, ok := d.integer(n, path)
	switch {
	case !ok:
		return 0, false
	case v < 1:
		d.fail(path, "must be >= 1, got %d", v)
		return 0, false
	case v > 1<<31-1:
		d.fail(path, "%d is too large", v)
		return 0, false
	}
	return int(v), true
}

func (d *specDecoder) intPtr(n *jnode, path string) *int64 {
	v, ok := d.integer(n, path)
	if !ok {
		return nil
	}
	return &v
}

func (d *specDecoder) field(n *jnode, path string) bcp.Field {
	var f bcp.Field
	d.object(n, path, "a field", []keyRule{
		{key: "name", fn: func(n *jnode, p string) { f.Name, _ = d.str(n, p) }},
		{key: "type", fn: func(n *jnode, p string) {
			v, _ := d.str(n, p)
			f.Type = bcp.FieldType(v)
		}},
		{key: "values", alias: "options", fn: func(n *jnode, p string) {
			f.Values = []string{}
			d.list(n, p, func(item *jnode, ip string) {
				if v, ok := d.str(item, ip); ok {
					f.Values = append(f.Values, v)
				}
			})
		}},
		{key: "min", fn: func(n *jnode, p string) { f.Min = d.intPtr(n, p) }},
		{key: "max", fn: func(n *jnode, p string) { f.Max = d.intPtr(n, p) }},
	})
	return f
}

func (d *specDecoder) question(n *jnode, path string) bcp.Question {
	var q bcp.Question
	d.object(n, path, "a question", []keyRule{
		{key: "id", alias: "name", fn: func(n *jnode, p string) { q.ID, _ = d.str(n, p) }},
		{key: "question", fn: func(n *jnode, p string) { q.Question, _ = d.nonEmpty(n, p) }},
		{key: "max_words", fn: func(n *jnode, p string) { q.MaxWords, _ = d.words(n, p) }},
		{key: "expected_format", alias: "format", fn: func(n *jnode, p string) {
			v, _ := d.nonEmpty(n, p)
			q.Format = bcp.Format(v)
		}},
		{key: "min", fn: func(n *jnode, p string) { q.Min = d.intPtr(n, p) }},
		{key: "max", fn: func(n *jnode, p string) { q.Max = d.intPtr(n, p) }},
	})
	return q
}

// excerpt cuts a literal for an error message.
func excerpt(s string) string {
	if len(s) > 24 {
		return s[:24] + "..."
	}
	return s
}

// jkind is the JSON kind of a parsed value.
type jkind int

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

func (k jkind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "a list", "an object"}[k]
}

// jnode is one parsed JSON value. Objects keep their keys in order, with
// duplicates marked (the first occurrence is the one kept).
type jnode struct {
	kind  jkind
	text  string // a string's value, a number's literal
	items []*jnode
	keys  []string
	vals  []*jnode
	dup   []bool
}

// parseJSON parses data as exactly one JSON value, at most maxSpecDepth
// deep, refusing invalid UTF-8 (which encoding/json would replace).
func parseJSON(data []byte) (*jnode, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseNode(dec, 1)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return n, nil
}

func parseNode(dec *json.Decoder, depth int) (*jnode, error) {
	if depth > maxSpecDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxSpecDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr(err)
	}
	switch t := tok.(type) {
	case nil:
		return &jnode{kind: jNull}, nil
	case bool:
		return &jnode{kind: jBool}, nil
	case json.Number:
		return &jnode{kind: jNumber, text: string(t)}, nil
	case string:
		return &jnode{kind: jString, text: t}, nil
	case json.Delim:
		n := &jnode{kind: jArray}
		if t == '{' {
			n.kind = jObject
		}
		seen := map[string]bool{}
		for dec.More() {
			if n.kind == jObject {
				tok, err := dec.Token()
				if err != nil {
					return nil, jsonErr(err)
				}
				k, _ := tok.(string)
				n.keys = append(n.keys, k)
				n.dup = append(n.dup, seen[k])
				seen[k] = true
			}
			v, err := parseNode(dec, depth+1)
			if err != nil {
				return nil, err
			}
			if n.kind == jObject {
				n.vals = append(n.vals, v)
			} else {
				n.items = append(n.items, v)
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, jsonErr(err)
		}
		return n, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

func jsonErr(err error) error {
	if err == io.EOF {
		return errors.New("unexpected end of input")
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}
