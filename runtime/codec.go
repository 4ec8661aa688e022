package runtime

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// DefaultMaxLine is the default limit on one line, newline excluded.
const DefaultMaxLine = 1 << 20

// Envelope is one decoded line: its type and the whole line, for decoding
// into the concrete message with Decode.
type Envelope struct {
	Type string
	Raw  []byte
}

// Decode unmarshals the line into v.
func (e Envelope) Decode(v any) error {
	if err := json.Unmarshal(e.Raw, v); err != nil {
		return fmt.Errorf("decode %s: %w", e.Type, err)
	}
	return nil
}

// Why a line was refused.
var (
	ErrLineTooLong = errors.New("line too long")
	ErrNotUTF8     = errors.New("line is not valid UTF-8")
	ErrNotJSON     = errors.New("line is not a JSON object")
	ErrNoType      = errors.New(`line has no string "type" field`)
)

// LineError is a line that was skipped. The stream stays usable: the next
// call reads the next line.
type LineError struct {
	Err  error  // one of ErrLineTooLong, ErrNotUTF8, ErrNotJSON, ErrNoType
	Len  int    // the line's length in bytes (for long lines, at least this)
	Head []byte // the start of the line, for the audit log
}

func (e *LineError) Error() string { return fmt.Sprintf("%v (%d bytes)", e.Err, e.Len) }
func (e *LineError) Unwrap() error { return e.Err }

// headLen bounds LineError.Head.
const headLen = 256

// Decoder reads JSON lines with a size limit.
type Decoder struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewDecoder reads lines of at most max bytes from r (DefaultMaxLine if
// max <= 0).
func NewDecoder(r io.Reader, max int) *Decoder {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &Decoder{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next line as an Envelope. A bad line gives a
// *LineError and the following call continues after it. At the end of the
// stream Next returns io.EOF; a final line without a newline is still
// returned first. Blank lines are skipped.
func (d *Decoder) Next() (Envelope, error) {
	for {
		line, err := d.readLine()
		if err != nil {
			return Envelope{}, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return parseLine(line)
	}
}

// readLine returns one line without its newline, or a *LineError for a
// line over the limit, whose remainder it discards.
func (d *Decoder) readLine() ([]byte, error) {
	d.buf = d.buf[:0]
	tooLong := 0
	for {
		chunk, err := d.r.ReadSlice('\n')
		if tooLong > 0 {
			tooLong += len(chunk)
		} else if len(d.buf)+len(chunk) > d.max+1 { // +1: the newline
			tooLong = len(d.buf) + len(chunk)
			d.buf = d.buf[:min(len(d.buf), headLen)]
			if len(d.buf) < headLen {
				d.buf = append(d.buf, chunk[:min(len(chunk), headLen-len(d.buf))]...)
			}
		} else {
			d.buf = append(d.buf, chunk...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && (len(d.buf) > 0 || tooLong > 0):
			// A last line without a newline.
		case err != nil:
			return nil, err
		}
		if tooLong > 0 {
			head := append([]byte(nil), d.buf...)
			return nil, &LineError{Err: ErrLineTooLong, Len: tooLong, Head: head}
		}
		return bytes.TrimSuffix(bytes.TrimSuffix(d.buf, []byte("\n")), []byte("\r")), nil
	}
}

func parseLine(line []byte) (Envelope, error) {
	bad := func(err error) (Envelope, error) {
		return Envelope{}, &LineError{Err: err, Len: len(line), Head: append([]byte(nil), line[:min(len(line), headLen)]...)}
	}
	if !utf8.Valid(line) {
		return bad(ErrNotUTF8)
	}
	var probe struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(line, &probe); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "type" {
			return bad(ErrNoType)
		}
		return bad(ErrNotJSON)
	}
	if probe.Type == nil || *probe.Type == "" {
		return bad(ErrNoType)
	}
	return Envelope{Type: *probe.Type, Raw: append([]byte(nil), line...)}, nil
}

// Encoder writes messages as JSON lines. It is safe for concurrent use;
// each message is written with one Write call.
type Encoder struct {
	mu sync.Mutex
	w  io.Writer
}

// NewEncoder writes to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Marshal encodes v as one protocol line, newline included.
func Marshal(v any) ([]byte, error) {
	line, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	return append(line, '\n'), nil
}

// Encode writes v as one line.
func (e *Encoder) Encode(v any) error {
	line, err := Marshal(v)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(line); err != nil {
		return fmt.Errorf("write message: %w", err)
	}
	return nil
}
