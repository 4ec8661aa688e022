package agents

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"

	"github.com/bcpgw/bcpgw/bcp"
)

// A delivery filter is a CEL expression (github.com/google/cel-go, the
// expression language of Kubernetes admission policies) over the
// validated, normalized values of one push. It is compiled and
// type-checked once, when the definitions are loaded, against the
// subscription's spec: a misspelt field, a comparison of a string with a
// number, or an expression that is not a condition fails the load with the
// file and line, instead of silently dropping (or delivering) every push.
//
// A Reader chooses every value the filter reads, so evaluation is bounded
// twice: at load, CEL's cost estimator, fed the largest value each field
// can hold, refuses an expression whose worst case exceeds
// MaxFilterCost; at run time the program stops at that cost. The filter
// is a way to cut noise, not a security boundary: a hijacked Reader can
// always claim "critical".

// MaxFilterCost bounds one evaluation of a filter, in CEL's cost units
// (about one per operation, a tenth of a unit per character a string
// function reads). A filter such as `priority in ["high", "critical"] &&
// score >= 4` costs under 10; the bound leaves room for string and list
// functions on the longest answers while keeping an evaluation within
// tens of microseconds.
const MaxFilterCost = 10_000

// MaxFilterBytes bounds a filter's text: a filter is a line or two.
const MaxFilterBytes = 4096

// Filter is a subscription's delivery filter (the filter key): pushes
// that validate but do not match are accepted and recorded, not delivered
// and not charged. It is immutable and safe for concurrent use.
type Filter struct {
	// Source is the expression as written. It is what a Filter encodes
	// to, so that Definition.Equal compares filters by their text.
	Source string
	// MaxCost is the estimated worst-case cost of one evaluation, at most
	// MaxFilterCost.
	MaxCost uint64

	prog cel.Program
	vars []filterVar // the spec's fields, in spec order
}

// filterVar is one CEL variable: a Cat-1 field or a Cat-2 question.
type filterVar struct {
	name string
	kind filterKind
}

type filterKind int

const (
	kindBool   filterKind = iota // Cat-1 boolean
	kindString                   // Cat-1 enum; Cat-2 answers but integer and short_list
	kindInt                      // Cat-1 integer; Cat-2 integer answer
	kindList                     // Cat-2 short_list: its items
)

// celIdent is what CEL accepts as a variable name. Field names may also
// hold '-', which CEL reads as a minus: such fields cannot be filtered on.
var celIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// celReserved are the words CEL's grammar keeps for itself.
var celReserved = []string{
	"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
	"if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while",
}

// FilterError is a filter refused at load: each problem with its line and
// column within the expression (both 1-based).
type FilterError struct {
	Problems []FilterProblem
}

// FilterProblem is one problem of a filter.
type FilterProblem struct {
	Line, Column int
	Msg          string
}

func (e *FilterError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.String()
	}
	return strings.Join(msgs, "; ")
}

func (p FilterProblem) String() string {
	if p.Column > 0 {
		return fmt.Sprintf("column %d: %s", p.Column, p.Msg)
	}
	return p.Msg
}

// CompileFilter compiles and type-checks src against spec, a well-formed
// Cat-1 or Cat-2 spec. Each field becomes a variable of its type: a Cat-1
// boolean a bool, an enum a string, an integer an int; a Cat-2 answer a
// string, but an integer answer an int and a short_list a list of strings
// (its items). The expression must be a condition (bool). A refusal is a
// *FilterError.
func CompileFilter(spec bcp.Spec, src string) (*Filter, error) {
	whole := func(format string, args ...any) (*Filter, error) {
		return nil, &FilterError{Problems: []FilterProblem{{Msg: fmt.Sprintf(format, args...)}}}
	}
	switch {
	case spec.Category == bcp.Cat3:
		return whole("not allowed in category 3: a Cat-3 push is one free-text summary, which an operator reads anyway; there is no typed value to filter on")
	case !spec.Category.Valid():
		return whole("the subscription has no valid category")
	case strings.TrimSpace(src) == "":
		return whole("must not be empty")
	case len(src) > MaxFilterBytes:
		return whole("is %d bytes; a filter may be at most %d", len(src), MaxFilterBytes)
	}
	vars, unusable := filterVars(spec)
	opts := []cel.EnvOption{
		cel.ParserExpressionSizeLimit(MaxFilterBytes),
		cel.ParserRecursionLimit(64),
	}
	for _, v := range vars {
		opts = append(opts, cel.Variable(v.name, v.kind.celType()))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("filter environment: %w", err)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, issuesError(iss, vars, unusable)
	}
	if out := ast.OutputType(); !out.IsExactType(types.BoolType) {
		return whole("must be a condition (true or false), but this expression gives %s", out)
	}
	est, err := env.EstimateCost(ast, sizes(spec, vars))
	if err != nil {
		return whole("cannot estimate its cost: %v", err)
	}
	if est.Max > MaxFilterCost {
		return whole("could cost up to %d to evaluate on the largest answers this spec allows, more than the limit of %d: simplify it (nested loops over lists, or regular expressions built from answers, cost the most)", est.Max, MaxFilterCost)
	}
	prog, err := env.Program(ast, cel.CostLimit(MaxFilterCost), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return whole("%v", err)
	}
	return &Filter{Source: src, MaxCost: est.Max, prog: prog, vars: vars}, nil
}

// filterVars returns the variables of spec's fields, and the names that
// cannot be variables (not CEL identifiers, or CEL's own words).
func filterVars(spec bcp.Spec) (vars []filterVar, unusable []string) {
	add := func(name string, k filterKind) {
		if !celIdent.MatchString(name) || slices.Contains(celReserved, name) {
			unusable = append(unusable, name)
			return
		}
		vars = append(vars, filterVar{name, k})
	}
	for _, f := range spec.Fields {
		switch f.Type {
		case bcp.Boolean:
			add(f.Name, kindBool)
		case bcp.Integer:
			add(f.Name, kindInt)
		default:
			add(f.Name, kindString)
		}
	}
	for _, q := range spec.Questions {
		switch q.Format {
		case bcp.IntegerFmt:
			add(q.ID, kindInt)
		case bcp.ShortList:
			add(q.ID, kindList)
		default:
			add(q.ID, kindString)
		}
	}
	return vars, unusable
}

func (k filterKind) celType() *cel.Type {
	switch k {
	case kindBool:
		return cel.BoolType
	case kindInt:
		return cel.IntType
	case kindList:
		return cel.ListType(cel.StringType)
	}
	return cel.StringType
}

var undeclared = regexp.MustCompile(`^undeclared reference to '([^']*)'`)

// issuesError turns CEL's issues into a FilterError, saying in plain
// words what an unknown name means here.
func issuesError(iss *cel.Issues, vars []filterVar, unusable []string) error {
	typed := make([]string, len(vars))
	for i, v := range vars {
		typed[i] = v.name + " " + v.kind.celType().String()
	}
	known := "this subscription's fields: " + strings.Join(typed, ", ")
	if len(typed) == 0 {
		known = "this subscription has no field a filter can use"
	}
	if len(unusable) > 0 {
		known += fmt.Sprintf("; %s cannot be used in a filter: not a CEL identifier (rename it, with _ instead of -)", strings.Join(unusable, ", "))
	}
	fe := &FilterError{}
	told := false // the fields are listed once
	for _, e := range iss.Errors() {
		msg := e.Message
		if m := undeclared.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("unknown field or function %q", m[1])
			if !told {
				msg += " (" + known + ")"
				told = true
			}
		} else if strings.HasPrefix(msg, "found no matching overload") && !told {
			msg += " (" + known + ")"
			told = true
		}
		p := FilterProblem{Msg: msg}
		if loc := e.Location; loc != nil && loc.Line() > 0 {
			p.Line, p.Column = loc.Line(), loc.Column()+1
		}
		fe.Problems = append(fe.Problems, p)
	}
	if len(fe.Problems) == 0 {
		return errors.New(iss.String())
	}
	return fe
}

// maxWordChars bounds a Cat-2 word (bcp refuses longer ones), for the
// cost estimate.
const maxWordChars = 48

// sizes feeds CEL's cost estimator the largest value of each variable: a
// Cat-2 answer has at most max_words words of at most 48 characters with
// a space between, a short_list at most max_words items; an enum's
// longest value.
func sizes(spec bcp.Spec, vars []filterVar) checker.CostEstimator {
	m := map[string]uint64{}
	items := map[string]uint64{}
	for _, f := range spec.Fields {
		var longest int
		for _, v := range f.Values {
			longest = max(longest, len([]rune(v)))
		}
		m[f.Name] = uint64(longest)
	}
	for _, q := range spec.Questions {
		words := uint64(spec.QuestionWords(q))
		m[q.ID] = words * (maxWordChars + 1)
		if q.Format == bcp.ShortList {
			items[q.ID] = m[q.ID]
			m[q.ID] = words
		}
	}
	return sizeEstimator{size: m, items: items}
}

type sizeEstimator struct{ size, items map[string]uint64 }

func (s sizeEstimator) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	p := n.Path()
	var v uint64
	var ok bool
	switch {
	case len(p) == 1:
		v, ok = s.size[p[0]]
	case len(p) == 2 && p[1] == "@items":
		v, ok = s.items[p[0]]
	}
	if !ok {
		return nil
	}
	return &checker.SizeEstimate{Min: 0, Max: v}
}

func (sizeEstimator) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// Match evaluates the filter on r, a response validated against the spec
// the filter was compiled for. An error (a value missing or of the wrong
// kind, or a run-time failure such as an overflow or the cost limit) is
// returned with false: a caller must treat it as no match, so that no
// value a Reader chooses can make a filter deliver what it would not.
func (f *Filter) Match(r bcp.Response) (match bool, err error) {
	defer func() {
		if p := recover(); p != nil { // cel-go recovers its own; this is for ours
			match, err = false, fmt.Errorf("filter evaluation failed: %v", p)
		}
	}()
	vals := make(map[string]any, len(f.vars))
	for _, v := range f.vars {
		raw, ok := r.Get(v.name)
		if !ok {
			return false, fmt.Errorf("no value for %q", v.name)
		}
		val, err := v.kind.value(raw)
		if err != nil {
			return false, fmt.Errorf("%s: %w", v.name, err)
		}
		vals[v.name] = val
	}
	out, _, err := f.prog.Eval(vals)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("the filter gave %v, not true or false", out.Value())
	}
	return b, nil
}

// value converts a normalized response value to the variable's Go value.
func (k filterKind) value(raw any) (any, error) {
	switch k {
	case kindBool:
		if b, ok := raw.(bool); ok {
			return b, nil
		}
	case kindInt:
		switch v := raw.(type) {
		case int64:
			return v, nil
		case string: // a Cat-2 integer answer, delivered as a decimal string
			return strconv.ParseInt(v, 10, 64)
		}
	case kindString:
		if s, ok := raw.(string); ok {
			return s, nil
		}
	case kindList:
		// bcp joins a short_list's items with ", ", and an item never holds
		// a comma, so splitting gives the items back exactly.
		if s, ok := raw.(string); ok {
			return strings.Split(s, ", "), nil
		}
	}
	return nil, fmt.Errorf("unexpected value %T", raw)
}

// MarshalText encodes the filter as its source (see Source).
func (f *Filter) MarshalText() ([]byte, error) { return []byte(f.Source), nil }
