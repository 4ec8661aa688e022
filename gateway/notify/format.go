package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bcpgw/bcpgw/gateway/store"
)

// Clipping limits, in runes of the rendered text.
const (
	// MaxContent bounds an item's content in a notification: enough to
	// know what waits, never the whole of it. The queue shows all of it,
	// and approving needs all of it on screen there.
	MaxContent = 500
	// maxDetail bounds an event's detail; maxExcerpt an anomaly's match.
	maxDetail  = 500
	maxExcerpt = 80
	// maxName bounds an event's agent, peer, code and ref.
	maxName = 128
	// maxAnomalies bounds the anomalies listed (all are counted).
	maxAnomalies = 10
)

// Message is what a notification says, in the json format exactly (the
// other formats render it as text). It is the event as stored, with
// these differences, all for safety:
//
//   - the payload (the raw input of a refusal, attacker-controlled) is
//     not sent, only its size;
//   - the detail is rendered like an item's content (see Safe);
//   - an approval event about an item that still waits carries the item:
//     its validated, normalized content rendered safe and clipped, and its
//     anomalies. Never its content hash: approving needs that hash, and
//     it must come from reading the whole item in the queue, not from a
//     clipped notification.
//
// Nothing in a notification can approve or reject anything: Decide is a
// command for a person to run on the gateway's host, where bcpgw
// approvals shows the item in full.
type Message struct {
	// ID is the notification's idempotency key (also the webhook-id and
	// Idempotency-Key headers): the same on every attempt, unique to the
	// event and the state file.
	ID           string    `json:"id"`
	Seq          int64     `json:"seq"`
	Time         time.Time `json:"time"`
	Kind         string    `json:"kind"`
	Agent        string    `json:"agent,omitempty"`
	Peer         string    `json:"peer,omitempty"`
	Code         string    `json:"code,omitempty"`
	Detail       string    `json:"detail,omitempty"`
	Category     int       `json:"category,omitempty"`
	Bits         float64   `json:"bits,omitempty"`
	Ref          string    `json:"ref,omitempty"`
	PayloadBytes int       `json:"payload_bytes,omitempty"`
	Item         *Item     `json:"item,omitempty"`
	// Decide is the command that opens the approval queue, on approval
	// events.
	Decide string `json:"decide,omitempty"`
	// Test marks the sample sent by bcpgw notify test.
	Test bool `json:"test,omitempty"`
}

// Item is an approval item as a notification shows it.
type Item struct {
	ID             string    `json:"id"`
	Status         string    `json:"status"`
	Controller     string    `json:"controller"`
	Reader         string    `json:"reader"`
	SubscriptionID string    `json:"subscription_id,omitempty"`
	QueryID        string    `json:"query_id,omitempty"`
	Category       int       `json:"category"`
	Bits           float64   `json:"bits"`
	ExpiresAt      time.Time `json:"expires_at"`
	Directive      string    `json:"directive,omitempty"`
	// Content is the normalized response, one "key: value" line per
	// field or question (a Cat-3 summary's own lines kept), rendered
	// safe (see Safe) and clipped to MaxContent runes; ContentClipped
	// counts the runes left out. Empty once the item is decided.
	Content        string    `json:"content,omitempty"`
	ContentClipped int       `json:"content_clipped,omitempty"`
	Anomalies      []Anomaly `json:"anomalies,omitempty"`
	AnomalyCount   int       `json:"anomaly_count,omitempty"`
}

// Anomaly is one of an item's anomalies; Match is rendered safe.
type Anomaly struct {
	Code  string `json:"code"`
	Field string `json:"field,omitempty"`
	Match string `json:"match,omitempty"`
}

// newMessage makes the message of e; item, if not nil, is the approval
// item e is about.
func newMessage(id string, e store.Event, item *store.Approval, decide string) *Message {
	detail, _ := Safe(e.Detail, maxDetail)
	// The names too can be a runtime's: a refused push names any
	// controller (Peer), a refused answer any query id (Ref). Valid names
	// and ids are unchanged by SafeLine.
	m := &Message{
		ID: id, Seq: e.Seq, Time: e.Time.UTC(), Kind: e.Kind, Agent: SafeLine(e.Agent, maxName), Peer: SafeLine(e.Peer, maxName),
		Code: SafeLine(e.Code, maxName), Detail: detail, Category: e.Category, Bits: e.Bits, Ref: SafeLine(e.Ref, maxName),
		PayloadBytes: len(e.Payload),
	}
	if strings.HasPrefix(e.Kind, "approval_") {
		m.Decide = decide
	}
	if item != nil {
		m.Item = newItem(item)
	}
	return m
}

func newItem(a *store.Approval) *Item {
	it := &Item{
		ID: a.ID, Status: string(a.Status), Controller: a.Controller, Reader: a.Reader,
		SubscriptionID: a.SubscriptionID, QueryID: a.QueryID, Category: int(a.Category), Bits: a.Bits,
		ExpiresAt: a.ExpiresAt.UTC(), AnomalyCount: len(a.Anomalies),
	}
	it.Directive, _ = Safe(a.Directive, MaxContent)
	if a.Status == store.ApprovalPending {
		it.Content, it.ContentClipped = Safe(contentText(a.Response), MaxContent)
	}
	for i, an := range a.Anomalies {
		if i == maxAnomalies {
			break
		}
		it.Anomalies = append(it.Anomalies, Anomaly{Code: string(an.Code), Field: SafeLine(an.Field, maxExcerpt), Match: SafeLine(an.Match, maxExcerpt)})
	}
	return it
}

// contentText renders a normalized response (a JSON object, in the spec's
// order) as "key: value" lines; a Cat-3 summary is its text alone.
func contentText(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return string(raw)
	}
	var lines []string
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return string(raw)
		}
		key, _ := kt.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return string(raw)
		}
		val := fmt.Sprint(v)
		if s, ok := v.(string); ok {
			val = s
		}
		if (key == "summary" || key == "response") && len(lines) == 0 && !dec.More() {
			return val
		}
		lines = append(lines, key+": "+val)
	}
	return strings.Join(lines, "\n")
}

// title is a one-line summary of m, for a title or a first line.
func (m *Message) title() string {
	who := m.Agent
	if m.Peer != "" {
		who += " -> " + m.Peer
	}
	switch {
	case m.Test:
		return "bcpgw: test notification"
	case m.Item != nil && m.Kind == "approval_queued" && m.Item.Status == string(store.ApprovalPending):
		return fmt.Sprintf("bcpgw: approval waiting: Cat-%d from %s to %s", m.Item.Category, m.Item.Reader, m.Item.Controller)
	case m.Kind == "refused" && m.Code != "":
		return fmt.Sprintf("bcpgw: %s: %s", m.Code, who)
	case who != "":
		return fmt.Sprintf("bcpgw: %s: %s", m.Kind, who)
	}
	return "bcpgw: " + m.Kind
}

// lines renders m as text lines: ntfy's body, and Slack's text. esc
// escapes every piece of text (Slack's, or none); quote marks the lines
// of an item's content.
func (m *Message) lines(quote string, esc func(string) string) []string {
	var out []string
	add := func(s string) { out = append(out, esc(s)) }
	if m.Detail != "" {
		add(m.Detail)
	}
	if it := m.Item; it != nil {
		what := "push on " + it.SubscriptionID
		if it.QueryID != "" {
			what = "answer to query " + it.QueryID
		}
		add(fmt.Sprintf("Item %s (%s): Cat-%d %s from %s to %s, %.1f bits, expires %s",
			it.ID, it.Status, it.Category, what, it.Reader, it.Controller, it.Bits, it.ExpiresAt.Format(time.RFC3339)))
		if it.Directive != "" {
			add("Asked: " + it.Directive)
		}
		if it.Content != "" {
			for _, l := range strings.Split(it.Content, "\n") {
				out = append(out, quote+esc(l))
			}
			if it.ContentClipped > 0 {
				add(fmt.Sprintf("(%d more characters: read the whole item in the queue)", it.ContentClipped))
			}
		}
		if it.AnomalyCount > 0 {
			var as []string
			for _, a := range it.Anomalies {
				s := a.Code
				if a.Field != "" {
					s += " in " + a.Field
				}
				if a.Match != "" {
					s += fmt.Sprintf(" (%s)", a.Match)
				}
				as = append(as, s)
			}
			if more := it.AnomalyCount - len(it.Anomalies); more > 0 {
				as = append(as, fmt.Sprintf("%d more", more))
			}
			add(fmt.Sprintf("Anomalies (%d): %s", it.AnomalyCount, strings.Join(as, "; ")))
		}
	}
	if d := m.decideLine(); d != "" {
		add(d)
	}
	if m.Test {
		add("Nothing waits: this is a test sent by bcpgw notify test.")
	}
	return out
}

// decideLine is the line that says where to decide m's item, if it waits.
func (m *Message) decideLine() string {
	if m.Decide != "" && m.Item != nil && m.Item.Status == string(store.ApprovalPending) {
		return "Decide in the queue, after reading all of it: " + m.Decide
	}
	return ""
}

// ntfyMaxBody bounds an ntfy body. ntfy takes a body shorter than its
// message-size-limit (4096 bytes by default) as the message; a longer one
// becomes an attachment, or is refused 400 where attachments are off (the
// default of a server of one's own), and the notification would be lost.
// Content of 4-byte characters and long anomaly excerpts, both the
// Reader's choice, render longer than that.
const ntfyMaxBody = 4000

// ntfyBody is m's text cut to ntfyMaxBody bytes, on a character boundary
// and never inside a ⟨U+XXXX⟩, keeping the line that says where to decide.
func ntfyBody(m *Message) string {
	lines := m.lines("| ", func(s string) string { return s })
	text := strings.Join(lines, "\n")
	if len(text) <= ntfyMaxBody {
		return text
	}
	tail := "\n… (cut to fit ntfy's message size: read the whole item in the queue)"
	if d := m.decideLine(); d != "" && lines[len(lines)-1] == d {
		lines = lines[:len(lines)-1]
		tail += "\n" + d
	}
	text, n := strings.Join(lines, "\n"), max(0, ntfyMaxBody-len(tail))
	if len(text) > n {
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		text = text[:n]
		if open := strings.LastIndex(text, "⟨"); open > strings.LastIndex(text, "⟩") {
			text = text[:open]
		}
	}
	return text + tail
}

// request is a rendered notification, sent the same on every attempt.
type request struct {
	id          string
	body        []byte
	contentType string
	header      map[string]string // format-specific headers
}

// render writes m in t's format.
func render(t *Target, m *Message) (*request, error) {
	r := &request{id: m.ID, header: map[string]string{}}
	switch t.Format {
	case FormatSlack:
		text := "*" + slackEscape(m.title()) + "*\n" + strings.Join(m.lines("> ", slackEscape), "\n")
		b, err := json.Marshal(map[string]any{"text": text, "unfurl_links": false, "unfurl_media": false})
		if err != nil {
			return nil, err
		}
		r.body, r.contentType = b, "application/json"
	case FormatNtfy:
		r.body, r.contentType = []byte(ntfyBody(m)), "text/plain; charset=utf-8"
		r.header["Title"] = asciiHeader(m.title())
		r.header["Priority"] = fmt.Sprint(ntfyPriority(m))
		r.header["Tags"] = asciiHeader(strings.Join(ntfyTags(m), ","))
	default:
		b, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		r.body, r.contentType = b, "application/json"
	}
	return r, nil
}

// slackEscape escapes the three characters Slack gives meaning to, so
// that no text can make a link (<url|text>), a mention or a channel ping
// (<!channel>).
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// asciiHeader keeps a header value to printable ASCII (names and kinds
// are ASCII by their rules; anything else becomes ?).
func asciiHeader(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// ntfyPriority: high (4) for what needs a person soon, default (3) else.
func ntfyPriority(m *Message) int {
	switch m.Kind {
	case "approval_queued", "approval_partial", "agent_failed", "reload_failed", "delivery_parked", "session_killed",
		KindFailed, KindDisabled, KindGap, KindDown:
		return 4
	}
	return 3
}

func ntfyTags(m *Message) []string {
	tag := "information_source"
	switch {
	case m.Test:
		tag = "test_tube"
	case strings.HasPrefix(m.Kind, "approval_"):
		tag = "hourglass"
	case ntfyPriority(m) > 3 || m.Kind == "refused" || strings.HasSuffix(m.Kind, "_refused"):
		tag = "warning"
	}
	return []string{tag, "bcpgw", m.Kind}
}
