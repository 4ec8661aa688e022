package bcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// MaxResponseBytes bounds the raw response Validate will look at. No valid
// response comes near it; the runtime line limit is the same 1 MiB.
const MaxResponseBytes = 1 << 20

// MaxDepth bounds the nesting of a response's JSON. A valid response is one
// flat object (depth 1); deeper values are parsed only to check them for
// duplicate keys before they are refused, and not beyond this depth.
const MaxDepth = 32

// kind is the JSON kind of a decoded value.
type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k kind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// jsonValue is one top-level member's value. Composite values keep only
// their kind: no valid response contains one.
type jsonValue struct {
	kind kind
	b    bool
	text string // the string, or the number's literal text
}

// member is one key and value of the top-level object, in input order.
type member struct {
	key string
	val jsonValue
}

// parseObject parses raw as exactly one JSON object and returns its members
// in input order. It refuses invalid UTF-8, trailing data, duplicate keys at
// any depth, and nesting deeper than MaxDepth.
func parseObject(raw []byte) ([]member, error) {
	if len(raw) > MaxResponseBytes {
		return nil, fmt.Errorf("response is %d bytes; the limit is %d", len(raw), MaxResponseBytes)
	}
	// encoding/json silently replaces invalid UTF-8 with U+FFFD; refuse it
	// before it gets the chance.
	if !utf8.Valid(raw) {
		return nil, errors.New("response is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("response must be a JSON object, got %s", tokenKind(tok))
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %s", quote(key))
		}
		seen[key] = true
		v, err := parseValue(dec, 1)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", quote(key), err)
		}
		members = append(members, member{key: key, val: v})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, syntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("response has data after the JSON object")
	}
	return members, nil
}

func objectKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", syntaxError(err)
	}
	key, ok := tok.(string)
	if !ok {
		return "", errors.New("response is not valid JSON: object key is not a string")
	}
	return key, nil
}

// parseValue reads one value at the given depth (the depth of the object or
// array that holds it).
func parseValue(dec *json.Decoder, depth int) (jsonValue, error) {
	tok, err := dec.Token()
	if err != nil {
		return jsonValue{}, syntaxError(err)
	}
	switch t := tok.(type) {
	case nil:
		return jsonValue{kind: kindNull}, nil
	case bool:
		return jsonValue{kind: kindBool, b: t}, nil
	case json.Number:
		return jsonValue{kind: kindNumber, text: string(t)}, nil
	case string:
		return jsonValue{kind: kindString, text: t}, nil
	case json.Delim:
		if depth+1 > MaxDepth {
			return jsonValue{}, fmt.Errorf("nested deeper than %d levels", MaxDepth)
		}
		if t == '[' {
			for dec.More() {
				if _, err := parseValue(dec, depth+1); err != nil {
					return jsonValue{}, err
				}
			}
			if _, err := dec.Token(); err != nil {
				return jsonValue{}, syntaxError(err)
			}
			return jsonValue{kind: kindArray}, nil
		}
		seen := map[string]bool{}
		for dec.More() {
			key, err := objectKey(dec)
			if err != nil {
				return jsonValue{}, err
			}
			if seen[key] {
				return jsonValue{}, fmt.Errorf("duplicate key %s", quote(key))
			}
			seen[key] = true
			if _, err := parseValue(dec, depth+1); err != nil {
				return jsonValue{}, fmt.Errorf("%s: %w", quote(key), err)
			}
		}
		if _, err := dec.Token(); err != nil {
			return jsonValue{}, syntaxError(err)
		}
		return jsonValue{kind: kindObject}, nil
	}
	return jsonValue{}, fmt.Errorf("unexpected JSON token %v", tok)
}

func syntaxError(err error) error {
	if err == io.EOF {
		return errors.New("response is not valid JSON: unexpected end of input")
	}
	return fmt.Errorf("response is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func tokenKind(tok any) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case json.Delim:
		if t == '[' {
			return "an array"
		}
	}
	return fmt.Sprintf("%v", tok)
}

// maxQuoted bounds how much of a Reader's text an error message echoes.
const maxQuoted = 40

// quote renders untrusted text for an error message: Go-quoted (so control
// and invisible characters show as escapes) and cut to a short prefix.
func quote(s string) string {
	return fmt.Sprintf("%+q", excerpt(s))
}
