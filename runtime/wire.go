package runtime

import (
	"encoding/json"
	"strings"

	"github.com/bcpgw/bcpgw/bcp"
)

// Specs travel to Readers (bcp_query, bcp_subscriptions_active) in both
// spellings at once, so that a runtime written for either reads the whole
// spec: a question has "id" and TriOnyx's "name", "expected_format" and
// "format", and its max_words and format are always written out (TriOnyx's
// runtime assumes 10 words when max_words is missing); an enum field has
// "values" and "options". Decoding accepts either spelling, the protocol's
// first.

// wireField is a Cat-1 field as the gateway writes it.
type wireField struct {
	Name    string        `json:"name"`
	Type    bcp.FieldType `json:"type"`
	Values  []string      `json:"values,omitempty"`
	Options []string      `json:"options,omitempty"`
	Min     *int64        `json:"min,omitempty"`
	Max     *int64        `json:"max,omitempty"`
}

// wireQuestion is a Cat-2 question as the gateway writes it.
type wireQuestion struct {
	ID             string     `json:"id"`
	Name           string     `json:"name"`
	Question       string     `json:"question"`
	MaxWords       int        `json:"max_words,omitempty"`
	ExpectedFormat bcp.Format `json:"expected_format,omitempty"`
	Format         bcp.Format `json:"format,omitempty"`
	Min            *int64     `json:"min,omitempty"`
	Max            *int64     `json:"max,omitempty"`
}

func toWireFields(fs []bcp.Field) []wireField {
	if fs == nil {
		return nil
	}
	out := make([]wireField, len(fs))
	for i, f := range fs {
		out[i] = wireField{Name: f.Name, Type: f.Type, Values: f.Values, Options: f.Values, Min: f.Min, Max: f.Max}
	}
	return out
}

func fromWireFields(ws []wireField) []bcp.Field {
	if ws == nil {
		return nil
	}
	out := make([]bcp.Field, len(ws))
	for i, w := range ws {
		values := w.Values
		if values == nil {
			values = w.Options
		}
		out[i] = bcp.Field{Name: w.Name, Type: w.Type, Values: values, Min: w.Min, Max: w.Max}
	}
	return out
}

// toWireQuestions writes questions with their limits complete: words is
// the spec's max_words, for questions without their own.
func toWireQuestions(qs []bcp.Question, words int) []wireQuestion {
	if qs == nil {
		return nil
	}
	out := make([]wireQuestion, len(qs))
	for i, q := range qs {
		if q.MaxWords == 0 {
			q.MaxWords = words
		}
		if q.Format == "" {
			q.Format = bcp.ShortText
		}
		out[i] = wireQuestion{ID: q.ID, Name: q.ID, Question: q.Question, MaxWords: q.MaxWords,
			ExpectedFormat: q.Format, Format: q.Format, Min: q.Min, Max: q.Max}
	}
	return out
}

func fromWireQuestions(ws []wireQuestion) []bcp.Question {
	if ws == nil {
		return nil
	}
	out := make([]bcp.Question, len(ws))
	for i, w := range ws {
		q := bcp.Question{ID: w.ID, Question: w.Question, MaxWords: w.MaxWords, Format: w.ExpectedFormat, Min: w.Min, Max: w.Max}
		if q.ID == "" {
			q.ID = w.Name
		}
		if q.Format == "" {
			q.Format = w.Format
		}
		out[i] = q
	}
	return out
}

// MarshalJSON writes the query's spec in both spellings.
func (q Query) MarshalJSON() ([]byte, error) {
	type plain Query
	return json.Marshal(struct {
		plain
		Fields    []wireField    `json:"fields,omitempty"`
		Questions []wireQuestion `json:"questions,omitempty"`
	}{plain(q), toWireFields(q.Fields), toWireQuestions(q.Questions, q.MaxWords)})
}

// UnmarshalJSON reads the query's spec in either spelling.
func (q *Query) UnmarshalJSON(data []byte) error {
	type plain Query
	var w struct {
		plain
		Fields    []wireField    `json:"fields"`
		Questions []wireQuestion `json:"questions"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*q = Query(w.plain)
	q.Fields, q.Questions = fromWireFields(w.Fields), fromWireQuestions(w.Questions)
	return nil
}

// MarshalJSON writes the subscription's spec in both spellings.
func (s ActiveSubscription) MarshalJSON() ([]byte, error) {
	type plain ActiveSubscription
	return json.Marshal(struct {
		plain
		Fields    []wireField    `json:"fields,omitempty"`
		Questions []wireQuestion `json:"questions,omitempty"`
	}{plain(s), toWireFields(s.Fields), toWireQuestions(s.Questions, s.MaxWords)})
}

// UnmarshalJSON reads the subscription's spec in either spelling.
func (s *ActiveSubscription) UnmarshalJSON(data []byte) error {
	type plain ActiveSubscription
	var w struct {
		plain
		Fields    []wireField    `json:"fields"`
		Questions []wireQuestion `json:"questions"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*s = ActiveSubscription(w.plain)
	s.Fields, s.Questions = fromWireFields(w.Fields), fromWireQuestions(w.Questions)
	return nil
}

// unsupported are the message types TriOnyx's runtime sends for services
// of TriOnyx's gateway that bcpgw does not offer, with what to say about
// each. Agents exchange data through BCP only here.
var unsupported = map[string]string{
	"send_message_request":    "agents exchange data only through BCP queries and subscriptions",
	"restart_agent_request":   "only an operator restarts agents (bcpgw agents stop/start NAME)",
	"submit_item_request":     "bcpgw has no connector to post items to",
	"send_email_request":      "bcpgw has no mail connector",
	"save_draft_request":      "bcpgw has no mail connector",
	"move_email_request":      "bcpgw has no mail connector",
	"create_folder_request":   "bcpgw has no mail connector",
	"calendar_query_request":  "bcpgw has no calendar connector",
	"calendar_create_request": "bcpgw has no calendar connector",
	"calendar_update_request": "bcpgw has no calendar connector",
	"calendar_delete_request": "bcpgw has no calendar connector",
}

// Unsupported reports whether msgType is one of TriOnyx's message types
// that bcpgw does not implement, and why. The gateway answers such a
// message with an error saying "<type> is not supported by bcpgw" and
// with the "<name>_response" {request_id, success: false, detail} that
// TriOnyx's runtime waits for, so its tool call ends at once.
func Unsupported(msgType string) (why string, ok bool) {
	why, ok = unsupported[msgType]
	return why, ok
}

// UnsupportedReply is the answer TriOnyx's runtime waits for after a
// request bcpgw does not implement: type "<name>_response" for
// "<name>_request", never successful (new).
type UnsupportedReply struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Success   bool   `json:"success"`
	Detail    string `json:"detail"`
}

// ReplyType returns the type of the answer to a "<name>_request".
func ReplyType(requestType string) string {
	return strings.TrimSuffix(requestType, "_request") + "_response"
}
