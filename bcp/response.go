package bcp

import (
	"bytes"
	"encoding/json"
)

// Entry is one key and its normalized value: a bool, an int64 (Cat-1
// integers) or a string.
type Entry struct {
	Key   string
	Value any
}

// Response is a normalized response in its spec's field order. It marshals
// to a JSON object with the keys in that order, so what a Controller reads
// does not depend on the order the Reader used.
type Response []Entry

// Get returns the value of key.
func (r Response) Get(key string) (any, bool) {
	for _, e := range r {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// MarshalJSON renders r as an object in entry order.
func (r Response) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	// Text is delivered as written: no HTML escaping of <, > and &, which
	// would change what a Controller reads. An outer encoder that wants
	// escaping still applies it.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteByte('{')
	for i, e := range r {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := enc.Encode(e.Key); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
		buf.WriteByte(':')
		if err := enc.Encode(e.Value); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
