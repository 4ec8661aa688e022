package bcp

import (
	"fmt"
	"math"
	"regexp"
)

// Category is a BCP category: 1 (typed fields), 2 (short answers) or
// 3 (summary with human approval).
type Category int

// The three categories.
const (
	Cat1 Category = 1
	Cat2 Category = 2
	Cat3 Category = 3
)

// Valid reports whether c is 1, 2 or 3.
func (c Category) Valid() bool { return c >= Cat1 && c <= Cat3 }

// FieldType is the type of a Cat-1 field.
type FieldType string

// The Cat-1 field types.
const (
	Boolean FieldType = "boolean"
	Enum    FieldType = "enum"
	Integer FieldType = "integer"
)

// Format is the expected format of a Cat-2 answer.
type Format string

// The Cat-2 answer formats.
const (
	ShortText  Format = "short_text"
	ShortList  Format = "short_list"
	PersonName Format = "person_name"
	Date       Format = "date"
	Email      Format = "email"
	IntegerFmt Format = "integer"
)

// Formats lists every known Cat-2 format, in documentation order.
var Formats = []Format{ShortText, ShortList, PersonName, Date, Email, IntegerFmt}

// Known reports whether f is one of [Formats].
func (f Format) Known() bool {
	for _, k := range Formats {
		if f == k {
			return true
		}
	}
	return false
}

// OnAnomaly is a Cat-2 spec's policy for a response that validates but
// carries anomalies. The zero value means [OnAnomalyReview].
type OnAnomaly string

// The anomaly policies.
const (
	OnAnomalyReview  OnAnomaly = "review"
	OnAnomalyReject  OnAnomaly = "reject"
	OnAnomalyDeliver OnAnomaly = "deliver"
)

// Field is one Cat-1 field. Values is set for enums only; Min and Max for
// integers only (both required there).
type Field struct {
	Name   string    `json:"name"`
	Type   FieldType `json:"type"`
	Values []string  `json:"values,omitempty"`
	Min    *int64    `json:"min,omitempty"`
	Max    *int64    `json:"max,omitempty"`
}

// Question is one Cat-2 question. MaxWords 0 means "the spec's MaxWords".
// Min and Max bound an integer answer and are allowed only with that format.
// Question, the text shown to the Reader, is optional here: whether a
// decoder requires it depends on the spelling it read (see the agents and
// runtime packages: with "id" it is required, with TriOnyx's "name" the id
// is the question).
type Question struct {
	ID       string `json:"id"`
	Question string `json:"question"`
	MaxWords int    `json:"max_words,omitempty"`
	Format   Format `json:"expected_format,omitempty"`
	Min      *int64 `json:"min,omitempty"`
	Max      *int64 `json:"max,omitempty"`
}

// Spec is what a query or a subscription asks for: the category and its
// shape. It is immutable once built; [Spec.Problems] says whether it is
// well formed, and the other functions of this package assume it is.
type Spec struct {
	Category  Category
	Fields    []Field    // Cat-1
	Questions []Question // Cat-2
	Directive string     // Cat-3
	// MaxWords is the Cat-3 summary limit, and the Cat-2 default for
	// questions that set none.
	MaxWords  int
	OnAnomaly OnAnomaly // Cat-2 only; empty means review
}

// QuestionWords returns the word limit that applies to q within s.
func (s Spec) QuestionWords(q Question) int {
	if q.MaxWords > 0 {
		return q.MaxWords
	}
	return s.MaxWords
}

// Complete returns s with every question's MaxWords and Format written
// out (the spec's MaxWords; short_text), so that what a Reader is told is
// complete per question; s itself is not changed. The bits are the same.
func (s Spec) Complete() Spec {
	if s.Questions == nil {
		return s
	}
	qs := make([]Question, len(s.Questions))
	for i, q := range s.Questions {
		q.MaxWords = s.QuestionWords(q)
		if q.Format == "" {
			q.Format = ShortText
		}
		qs[i] = q
	}
	s.Questions = qs
	return s
}

// Policy returns the effective anomaly policy of s.
func (s Spec) Policy() OnAnomaly {
	if s.OnAnomaly == "" {
		return OnAnomalyReview
	}
	return s.OnAnomaly
}

// Problem is one defect of a spec. Path is relative to the spec, in the
// definition file's own key names, for example "questions[1].max_words".
type Problem struct {
	Path string
	Msg  string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Msg
	}
	return p.Path + ": " + p.Msg
}

// namePattern is what field names and question ids must look like: they
// become JSON keys that a Reader must echo exactly.
var namePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// Problems returns every defect of s, or nil if s is well formed. The same
// rules apply to subscriptions in definitions and to queries at run time.
func (s Spec) Problems() []Problem {
	var ps []Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if !s.Category.Valid() {
		add("category", "must be 1, 2 or 3, got %d", s.Category)
		return ps
	}
	// Present, even empty, is wrong: a key of another category is a
	// mistake about what the subscription is.
	if s.Category != Cat1 && s.Fields != nil {
		add("fields", "only allowed in category 1")
	}
	if s.Category != Cat2 && s.Questions != nil {
		add("questions", "only allowed in category 2")
	}
	if s.Category != Cat3 && s.Directive != "" {
		add("directive", "only allowed in category 3")
	}
	if s.Category == Cat1 && s.MaxWords != 0 {
		add("max_words", "not allowed in category 1")
	}
	if s.Category != Cat2 && s.OnAnomaly != "" {
		add("on_anomaly", "only allowed in category 2")
	}
	if s.MaxWords < 0 {
		add("max_words", "must be > 0, got %d", s.MaxWords)
	}
	switch s.Category {
	case Cat1:
		ps = append(ps, fieldProblems(s.Fields)...)
	case Cat2:
		ps = append(ps, s.questionProblems()...)
		switch s.OnAnomaly {
		case "", OnAnomalyReview, OnAnomalyReject, OnAnomalyDeliver:
		default:
			add("on_anomaly", "must be review, reject or deliver, got %q", s.OnAnomaly)
		}
	case Cat3:
		if s.Directive == "" {
			add("directive", "required in category 3 (the instruction for the summary)")
		}
		if s.MaxWords == 0 {
			add("max_words", "required in category 3")
		}
	}
	return ps
}

func fieldProblems(fields []Field) []Problem {
	var ps []Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if len(fields) == 0 {
		add("fields", "category 1 needs at least one field")
	}
	seen := map[string]int{}
	for i, f := range fields {
		p := fmt.Sprintf("fields[%d]", i)
		switch {
		case f.Name == "":
			add(p+".name", "required")
		case !namePattern.MatchString(f.Name):
			add(p+".name", "%q is not a valid name (letters, digits, _ and -, starting with a letter or _)", f.Name)
		default:
			if j, dup := seen[f.Name]; dup {
				add(p+".name", "duplicate field %q (also fields[%d])", f.Name, j)
			}
			seen[f.Name] = i
		}
		if f.Type != Enum && f.Values != nil {
			add(p+".values", "only allowed for type enum")
		}
		if f.Type != Integer && (f.Min != nil || f.Max != nil) {
			add(p, "min and max are only allowed for type integer")
		}
		switch f.Type {
		case Boolean:
		case Enum:
			distinct := map[string]bool{}
			for k, v := range f.Values {
				if v == "" {
					add(fmt.Sprintf("%s.values[%d]", p, k), "must not be empty")
				}
				if distinct[v] {
					add(fmt.Sprintf("%s.values[%d]", p, k), "duplicate value %q", v)
				}
				distinct[v] = true
			}
			if len(distinct) < 2 {
				add(p+".values", "an enum needs at least 2 distinct values")
			}
		case Integer:
			if f.Min == nil {
				add(p+".min", "required for type integer")
			}
			if f.Max == nil {
				add(p+".max", "required for type integer")
			}
			if f.Min != nil && f.Max != nil && *f.Min > *f.Max {
				add(p, "min %d is greater than max %d", *f.Min, *f.Max)
			}
		case "":
			add(p+".type", "required (boolean, enum or integer)")
		default:
			add(p+".type", "must be boolean, enum or integer, got %q", f.Type)
		}
	}
	return ps
}

func (s Spec) questionProblems() []Problem {
	var ps []Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, Problem{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if len(s.Questions) == 0 {
		add("questions", "category 2 needs at least one question")
	}
	seen := map[string]int{}
	for i, q := range s.Questions {
		p := fmt.Sprintf("questions[%d]", i)
		switch {
		case q.ID == "":
			add(p+".id", "required")
		case !namePattern.MatchString(q.ID):
			add(p+".id", "%q is not a valid id (letters, digits, _ and -, starting with a letter or _)", q.ID)
		default:
			if j, dup := seen[q.ID]; dup {
				add(p+".id", "duplicate question id %q (also questions[%d])", q.ID, j)
			}
			seen[q.ID] = i
		}
		switch {
		case q.MaxWords < 0:
			add(p+".max_words", "must be > 0, got %d", q.MaxWords)
		case s.QuestionWords(q) <= 0:
			add(p+".max_words", "required: set it on the question or on the subscription")
		}
		if q.Format != "" && !q.Format.Known() {
			add(p+".expected_format", "unknown format %q (known: %s)", q.Format, formatList())
		}
		if q.Format != IntegerFmt && (q.Min != nil || q.Max != nil) {
			add(p, "min and max are only allowed with expected_format integer")
		}
		if q.Min != nil && q.Max != nil && *q.Min > *q.Max {
			add(p, "min %d is greater than max %d", *q.Min, *q.Max)
		}
	}
	return ps
}

func formatList() string {
	s := ""
	for i, f := range Formats {
		if i > 0 {
			s += ", "
		}
		s += string(f)
	}
	return s
}

// BitsPerWord is what one word of a Cat-2 or Cat-3 answer is charged: the
// information in one word drawn from a vocabulary of about 2,000.
const BitsPerWord = 11

// Bits returns the most information a response to s can carry, in bits:
// the theoretical maximum that budgets are charged. s must be well formed.
func Bits(s Spec) float64 {
	var bits float64
	switch s.Category {
	case Cat1:
		for _, f := range s.Fields {
			switch f.Type {
			case Boolean:
				bits++
			case Enum:
				bits += math.Log2(float64(len(f.Values)))
			case Integer:
				if f.Min != nil && f.Max != nil {
					// In float64 so that the full int64 range cannot overflow.
					bits += math.Log2(float64(*f.Max) - float64(*f.Min) + 1)
				}
			}
		}
	case Cat2:
		for _, q := range s.Questions {
			bits += BitsPerWord * float64(s.QuestionWords(q))
		}
	case Cat3:
		bits = BitsPerWord * float64(s.MaxWords)
	}
	return bits
}

// FormatBits renders a bit count the way details and summaries print it:
// one decimal and the unit, as in "671.0 bits".
func FormatBits(bits float64) string {
	return fmt.Sprintf("%.1f bits", bits)
}
