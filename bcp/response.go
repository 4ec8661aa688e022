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
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, e := range r {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(e.Key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(e.Value)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
