package bcpagent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/runtime"
)

// Schema is a JSON Schema, built as plain maps so that encoding/json
// writes it with sorted keys: the same spec always gives the same bytes.
type Schema = map[string]any

// plainText is said of every free-text answer: what the gateway flags as
// an anomaly, so that a model that follows the schema is not sent to
// review for it.
const plainText = "Plain words only: no links, URLs, Markdown, HTML, code or instructions."

// nonBlank is the pattern of a free-text answer: the gateway refuses an
// answer that is empty or only white space ("is empty"), which minLength
// alone would let through.
const nonBlank = `\S`

// SpecSchema returns the JSON Schema of a response to spec: an object
// with exactly the spec's keys, all required, nothing else allowed. What
// JSON Schema can say it says (types, enums, integer ranges, date and
// integer syntax); what it cannot say precisely (word limits, the
// character rules of a name) goes into descriptions. spec must be well
// formed.
func SpecSchema(spec bcp.Spec) Schema {
	props := Schema{}
	var required []string
	desc := ""
	switch spec.Category {
	case bcp.Cat1:
		desc = "Typed fields, exactly these."
		for _, f := range spec.Fields {
			props[f.Name] = fieldSchema(f)
			required = append(required, f.Name)
		}
	case bcp.Cat2:
		desc = "One short answer per question, exactly these keys."
		for _, q := range spec.Questions {
			props[q.ID] = questionSchema(q, spec.QuestionWords(q))
			required = append(required, q.ID)
		}
	case bcp.Cat3:
		desc = "A summary that an operator reviews before it is delivered."
		props["summary"] = Schema{
			"type":      "string",
			"minLength": 1,
			"pattern":   nonBlank,
			"description": fmt.Sprintf("%s At most %d words; line breaks are allowed. %s",
				sentence(spec.Directive), spec.MaxWords, plainText),
		}
		required = append(required, "summary")
	}
	return Schema{
		"type":                 "object",
		"description":          fmt.Sprintf("Cat-%d response. %s", spec.Category, desc),
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	}
}

func fieldSchema(f bcp.Field) Schema {
	switch f.Type {
	case bcp.Boolean:
		return Schema{"type": "boolean"}
	case bcp.Enum:
		return Schema{"type": "string", "enum": f.Values}
	case bcp.Integer:
		// JSON Schema counts 3.0 as an integer; the gateway refuses it, so
		// the description says what "integer" means here.
		s := Schema{"type": "integer", "description": "A JSON integer, no decimal point."}
		if f.Min != nil {
			s["minimum"] = *f.Min
		}
		if f.Max != nil {
			s["maximum"] = *f.Max
		}
		if f.Min != nil && f.Max != nil {
			s["description"] = fmt.Sprintf("A JSON integer from %d to %d, no decimal point.", *f.Min, *f.Max)
		}
		return s
	}
	return Schema{}
}

// integerPattern is the integer syntax the gateway accepts in a Cat-2
// integer answer (JSON's integer literal).
const integerPattern = `^-?(0|[1-9][0-9]*)$`

func questionSchema(q bcp.Question, words int) Schema {
	// Formats with a pattern of their own (date, integer) replace
	// nonBlank with it below.
	s := Schema{"type": "string", "minLength": 1, "pattern": nonBlank}
	limit := fmt.Sprintf("At most %d words.", words)
	if words == 1 {
		limit = "One word."
	}
	parts := []string{sentence(q.Question), limit}
	switch q.Format {
	case "", bcp.ShortText:
		parts = append(parts, plainText)
	case bcp.ShortList:
		parts = append(parts, "A comma-separated list, such as: first item, second item.", plainText)
	case bcp.PersonName:
		parts = append(parts, "A person's name: letters, spaces and - ' . only.")
	case bcp.Date:
		s["format"] = "date"
		s["pattern"] = `^[0-9]{4}-[0-9]{2}-[0-9]{2}$`
		parts = append(parts, "A date as YYYY-MM-DD.")
	case bcp.Email:
		s["format"] = "email"
		parts = append(parts, "An email address, such as name@example.com.")
	case bcp.IntegerFmt:
		s["pattern"] = integerPattern
		switch {
		case q.Min != nil && q.Max != nil:
			parts = append(parts, fmt.Sprintf("An integer from %d to %d, written in digits.", *q.Min, *q.Max))
		case q.Min != nil:
			parts = append(parts, fmt.Sprintf("An integer of at least %d, written in digits.", *q.Min))
		case q.Max != nil:
			parts = append(parts, fmt.Sprintf("An integer of at most %d, written in digits.", *q.Max))
		default:
			parts = append(parts, "An integer, written in digits.")
		}
	}
	s["description"] = strings.Join(parts, " ")
	return s
}

// sentence ends s with a period unless it ends with punctuation.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s[len(s)-1:], ".?!:") {
		return s
	}
	return s + "."
}

// subscriptionSpec is the spec an announced subscription carries.
func subscriptionSpec(s runtime.ActiveSubscription) bcp.Spec {
	return bcp.Spec{Category: s.Category, Fields: s.Fields, Questions: s.Questions, Directive: s.Directive, MaxWords: s.MaxWords}
}

// querySpec is the spec a query carries.
func querySpec(q runtime.Query) bcp.Spec {
	return bcp.Spec{Category: q.Category, Fields: q.Fields, Questions: q.Questions, Directive: q.Directive, MaxWords: q.MaxWords}
}

// PublishSchema returns the JSON Schema of BCPPublish's arguments for the
// announced subscriptions: subscription_id and controller limited to the
// announced values, and response to the subscription's shape.
//
// The natural schema is a choice at the root with one branch per
// subscription, each fixing subscription_id and controller. Neither API
// takes that: both refuse oneOf/anyOf/allOf at the root of a tool's
// schema. So the root is an object, subscription_id and controller are
// enums (a single value when there is one subscription), and the choice
// sits on response: one branch per subscription, each titled with the
// subscription_id and controller it belongs to. Subscriptions with the
// same shape share a branch.
//
// The choice is anyOf, not oneOf: one object may fit several branches
// (two Cat-3 subscriptions differ only in their directives, which are
// descriptions; two Cat-2 ones with the same question ids differ only in
// word limits), and oneOf would then refuse every valid publish. The
// gateway checks the response against the chosen subscription anyway.
func PublishSchema(subs []runtime.ActiveSubscription) Schema {
	var ids, controllers []string
	type branch struct {
		schema Schema
		key    string
		names  []string
	}
	var branches []*branch
	for _, s := range subs {
		ids = appendNew(ids, s.SubscriptionID)
		controllers = appendNew(controllers, s.Controller)
		schema := SpecSchema(subscriptionSpec(s))
		raw, _ := json.Marshal(schema) // sorted keys: equal shapes, equal bytes
		key := string(raw)
		name := fmt.Sprintf("subscription_id %s, controller %s", s.SubscriptionID, s.Controller)
		found := false
		for _, b := range branches {
			if b.key == key {
				b.names = append(b.names, name)
				found = true
			}
		}
		if !found {
			branches = append(branches, &branch{schema: schema, key: key, names: []string{name}})
		}
	}
	var response Schema
	if len(branches) == 1 {
		response = branches[0].schema
	} else {
		var anyOf []any
		for _, b := range branches {
			b.schema["title"] = "Response for " + strings.Join(b.names, "; ")
			anyOf = append(anyOf, b.schema)
		}
		response = Schema{
			"description": "The data to publish, in the shape of the chosen subscription: use the branch titled with its subscription_id.",
			"anyOf":       anyOf,
		}
	}
	return Schema{
		"type": "object",
		"properties": Schema{
			"subscription_id": Schema{"type": "string", "enum": ids, "description": "The subscription to publish to."},
			"controller":      Schema{"type": "string", "enum": controllers, "description": "The Controller that declared the subscription."},
			"response":        response,
		},
		"required":             []string{"subscription_id", "controller", "response"},
		"additionalProperties": false,
	}
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// RespondSchema returns the JSON Schema of BCPRespond's arguments for one
// open query: its query_id and a response of the query's shape.
func RespondSchema(q runtime.Query) Schema {
	return Schema{
		"type": "object",
		"properties": Schema{
			"query_id": Schema{"type": "string", "enum": []string{q.QueryID}, "description": "The query you are answering."},
			"response": SpecSchema(querySpec(q)),
		},
		"required":             []string{"query_id", "response"},
		"additionalProperties": false,
	}
}

// QuerySchema returns the JSON Schema of BCPQuery's arguments: the Reader
// to ask and the spec of the answer. Which keys go with which category is
// said in descriptions (a root oneOf is refused by both APIs); the
// gateway checks the spec and a refusal comes back as the tool result.
func QuerySchema() Schema {
	var formats []string
	for _, f := range bcp.Formats {
		formats = append(formats, string(f))
	}
	field := Schema{
		"type": "object",
		"properties": Schema{
			"name":   Schema{"type": "string", "pattern": `^[A-Za-z_][A-Za-z0-9_-]{0,63}$`},
			"type":   Schema{"type": "string", "enum": []string{"boolean", "enum", "integer"}},
			"values": Schema{"type": "array", "items": Schema{"type": "string"}, "minItems": 2, "description": "type enum only: the allowed values."},
			"min":    Schema{"type": "integer", "description": "type integer only (required there)."},
			"max":    Schema{"type": "integer", "description": "type integer only (required there)."},
		},
		"required":             []string{"name", "type"},
		"additionalProperties": false,
	}
	question := Schema{
		"type": "object",
		"properties": Schema{
			"id":              Schema{"type": "string", "pattern": `^[A-Za-z_][A-Za-z0-9_-]{0,63}$`},
			"question":        Schema{"type": "string"},
			"max_words":       Schema{"type": "integer", "minimum": 1},
			"expected_format": Schema{"type": "string", "enum": formats},
			"min":             Schema{"type": "integer", "description": "expected_format integer only."},
			"max":             Schema{"type": "integer", "description": "expected_format integer only."},
		},
		"required":             []string{"id", "question"},
		"additionalProperties": false,
	}
	return Schema{
		"type": "object",
		"properties": Schema{
			"to":        Schema{"type": "string", "description": "The name of the Reader agent to ask."},
			"category":  Schema{"type": "integer", "enum": []int{1, 2, 3}, "description": "1: typed fields; 2: short answers; 3: a summary an operator must approve."},
			"fields":    Schema{"type": "array", "items": field, "minItems": 1, "description": "Category 1 only: the typed fields of the answer."},
			"questions": Schema{"type": "array", "items": question, "minItems": 1, "description": "Category 2 only: the questions, each answered in at most max_words words."},
			"directive": Schema{"type": "string", "description": "Category 3 only: what the summary should cover."},
			"max_words": Schema{"type": "integer", "minimum": 1, "description": "Category 3: the summary's word limit (required). Category 2: the default limit for questions without max_words."},
			"context":   Schema{"type": "string", "description": "Why you ask, for the Reader."},
		},
		"required":             []string{"to", "category"},
		"additionalProperties": false,
	}
}
