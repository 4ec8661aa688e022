package agents

import (
	"fmt"
	"strings"
)

// ParseError is one problem with a definition, located by file, line and
// field path. Its text is "file:LINE: field.path: message", the form
// editors and CI logs understand.
type ParseError struct {
	File string
	Line int    // 1-based; 0 when the problem concerns the whole file
	Path string // e.g. "bcp_channels[0].subscriptions[1].category"; may be empty
	Msg  string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Warning is a problem that does not stop a set from loading, such as a
// subscription that can never be delivered. It prints like a ParseError.
type Warning ParseError

func (w *Warning) String() string { return (*ParseError)(w).Error() }

// LoadError reports every problem found in a definition or a set, not just
// the first, together with the warnings and notes gathered on the way.
type LoadError struct {
	Errors   []*ParseError
	Warnings []*Warning
	Notes    []string
}

func (e *LoadError) Error() string {
	lines := make([]string, len(e.Errors))
	for i, pe := range e.Errors {
		lines[i] = pe.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual errors, for errors.As.
func (e *LoadError) Unwrap() []error {
	errs := make([]error, len(e.Errors))
	for i, pe := range e.Errors {
		errs[i] = pe
	}
	return errs
}
