package bcp

import (
	"fmt"
	"slices"
	"strings"
)

// Route is where an accepted response goes next.
type Route string

// The routes.
const (
	// RouteDeliver: straight to the Controller.
	RouteDeliver Route = "deliver"
	// RouteReview: to the operator's approval queue first (every Cat-3, and
	// Cat-2 with anomalies under the review policy).
	RouteReview Route = "review"
	// RouteReject: refused; nothing reaches the Controller.
	RouteReject Route = "reject"
)

// Result is what Validate found. Response is set when the response passed
// validation; Anomalies may be set even on refusal (a Cat-2 response refused
// by the reject policy carries the anomalies that refused it).
type Result struct {
	Response  Response
	Anomalies []Anomaly
	Bits      float64 // the spec's bits: what an accepted response is charged
	Route     Route
}

// maxProblems bounds how many problems one refusal lists.
const maxProblems = 8

// Validate checks raw, a Reader's response, against spec, and returns the
// normalized response and where it goes. A refusal is an *Error with code
// ValidationFailed whose detail lists the problems, so the Reader can fix
// its answer; its Result has Route RouteReject. spec must be well formed
// (see Spec.Problems).
func Validate(spec Spec, raw []byte) (Result, error) {
	res := Result{Bits: Bits(spec), Route: RouteReject}
	members, err := parseObject(raw)
	if err != nil {
		return res, &Error{Code: ValidationFailed, Detail: err.Error()}
	}
	var v validation
	switch spec.Category {
	case Cat1:
		v.cat1(spec, members)
	case Cat2:
		v.cat2(spec, members)
	case Cat3:
		v.cat3(spec, members)
	default:
		return res, Errorf(ValidationFailed, "spec has invalid category %d", spec.Category)
	}
	res.Anomalies = v.anomalies
	if len(v.problems) > 0 {
		return res, &Error{Code: ValidationFailed, Detail: v.detail()}
	}
	switch {
	case spec.Category == Cat3:
		res.Route = RouteReview
	case len(v.anomalies) == 0:
		res.Route = RouteDeliver
	default:
		switch spec.Policy() {
		case OnAnomalyReject:
			return res, Errorf(ValidationFailed, "anomalies found (%s) and this subscription rejects anomalies", anomalySummary(v.anomalies))
		case OnAnomalyDeliver:
			res.Route = RouteDeliver
		default:
			res.Route = RouteReview
		}
	}
	res.Response = v.out
	return res, nil
}

// validation collects one response's normalized entries, problems and
// anomalies.
type validation struct {
	out       Response
	problems  []string
	anomalies []Anomaly
}

func (v *validation) fail(key string, format string, args ...any) {
	v.problems = append(v.problems, key+": "+fmt.Sprintf(format, args...))
}

func (v *validation) detail() string {
	ps := v.problems
	more := ""
	if len(ps) > maxProblems {
		more = fmt.Sprintf("; and %d more", len(ps)-maxProblems)
		ps = ps[:maxProblems]
	}
	return strings.Join(ps, "; ") + more
}

// keys refuses members whose keys are not in want, and returns the members
// by key.
func (v *validation) keys(members []member, want func(string) bool) map[string]jsonValue {
	byKey := make(map[string]jsonValue, len(members))
	for _, m := range members {
		if !want(m.key) {
			v.problems = append(v.problems, fmt.Sprintf("unexpected field %s", quote(m.key)))
			continue
		}
		byKey[m.key] = m.val
	}
	return byKey
}

func (v *validation) cat1(spec Spec, members []member) {
	byKey := v.keys(members, func(k string) bool {
		for _, f := range spec.Fields {
			if f.Name == k {
				return true
			}
		}
		return false
	})
	for _, f := range spec.Fields {
		val, ok := byKey[f.Name]
		if !ok {
			v.fail(f.Name, "missing")
			continue
		}
		switch f.Type {
		case Boolean:
			if val.kind != kindBool {
				v.fail(f.Name, "must be true or false, got %s", val.kind)
				continue
			}
			v.out = append(v.out, Entry{f.Name, val.b})
		case Enum:
			if val.kind != kindString {
				v.fail(f.Name, "must be a string, got %s", val.kind)
				continue
			}
			if !slices.Contains(f.Values, val.text) {
				v.fail(f.Name, "must be one of %s, got %s", strings.Join(f.Values, ", "), quote(val.text))
				continue
			}
			v.out = append(v.out, Entry{f.Name, val.text})
		case Integer:
			if val.kind != kindNumber {
				v.fail(f.Name, "must be a JSON integer, got %s", val.kind)
				continue
			}
			n, err := parseInteger(val.text, f.Min, f.Max)
			if err != nil {
				v.fail(f.Name, "%v", err)
				continue
			}
			v.out = append(v.out, Entry{f.Name, n})
		default:
			// A malformed spec fails closed.
			v.fail(f.Name, "spec has unknown field type %q", f.Type)
		}
	}
}

func (v *validation) cat2(spec Spec, members []member) {
	byKey := v.keys(members, func(k string) bool {
		for _, q := range spec.Questions {
			if q.ID == k {
				return true
			}
		}
		return false
	})
	for _, q := range spec.Questions {
		val, ok := byKey[q.ID]
		if !ok {
			v.fail(q.ID, "missing")
			continue
		}
		// An integer answer may come as a JSON number; it is delivered as
		// a string either way.
		if !(val.kind == kindString || (q.Format == IntegerFmt && val.kind == kindNumber)) {
			want := "a string"
			if q.Format == IntegerFmt {
				want = "an integer or a string"
			}
			v.fail(q.ID, "must be %s, got %s", want, val.kind)
			continue
		}
		if err := checkHygiene(val.text, false); err != nil {
			v.fail(q.ID, "%v", err)
			continue
		}
		if err := checkWordCount(val.text, spec.QuestionWords(q)); err != nil {
			v.fail(q.ID, "%v", err)
			continue
		}
		text := normalizeLine(val.text)
		if text == "" {
			v.fail(q.ID, "is empty")
			continue
		}
		text, err := checkFormat(q, text)
		if err != nil {
			v.fail(q.ID, "%v", err)
			continue
		}
		// Counted on what is delivered: re-joining a list can add words.
		if err := checkDelivered(text, false, spec.QuestionWords(q)); err != nil {
			v.fail(q.ID, "%v", err)
			continue
		}
		v.anomalies = append(v.anomalies, detectAnomalies(q.ID, text)...)
		v.out = append(v.out, Entry{q.ID, text})
	}
}

// The Cat-3 key, and the alias accepted for compatibility.
const (
	summaryKey      = "summary"
	summaryAliasKey = "response"
)

func (v *validation) cat3(spec Spec, members []member) {
	byKey := v.keys(members, func(k string) bool { return k == summaryKey || k == summaryAliasKey })
	val, ok := byKey[summaryKey]
	alias, hasAlias := byKey[summaryAliasKey]
	switch {
	case ok && hasAlias:
		v.fail(summaryKey, "both \"summary\" and its alias \"response\" are present; send only \"summary\"")
		return
	case hasAlias:
		val, ok = alias, true
	case !ok:
		v.fail(summaryKey, "missing")
		return
	}
	if val.kind != kindString {
		v.fail(summaryKey, "must be a string, got %s", val.kind)
		return
	}
	if err := checkHygiene(val.text, true); err != nil {
		v.fail(summaryKey, "%v", err)
		return
	}
	if err := checkWordCount(val.text, spec.MaxWords); err != nil {
		v.fail(summaryKey, "%v", err)
		return
	}
	text := normalizeText(val.text)
	if text == "" {
		v.fail(summaryKey, "is empty")
		return
	}
	if err := checkDelivered(text, true, spec.MaxWords); err != nil {
		v.fail(summaryKey, "%v", err)
		return
	}
	v.anomalies = detectAnomalies(summaryKey, text)
	v.out = Response{{summaryKey, text}}
}

func anomalySummary(as []Anomaly) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = a.Field + ": " + string(a.Code)
	}
	return strings.Join(parts, ", ")
}
