package tui

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/runtime"
)

// requestLines renders a Controller's request for a subscription
// (BCPSubscribe): what approving it lets the Reader push, field by
// field, and its bits per push. Every text came from an agent, so all of
// it goes through wrap, which shows invisible characters as ⟨U+XXXX⟩.
// A spec that does not decode is shown as its raw JSON.
func (m Model) requestLines(a control.Approval, w int) (out []string) {
	para := func(s string) { out = append(out, indent(wrap(s, nil, w-2, m.st))...) }
	sectionHere := func(title string) {
		out = append(out, "")
		for _, l := range wrap(title, nil, w, m.st) {
			out = append(out, m.st.title.Render(l))
		}
	}
	defer func() {
		sectionHere("Hash")
		para("sha256 " + a.SHA256)
	}()
	sectionHere("Subscription request (what the Controller asks for)")
	para(fmt.Sprintf("%s asks that %s may push Cat-%d data to it as subscription %s, %s per push (request %s).",
		a.Controller, a.Reader, a.Category, a.SubscriptionID, bcp.FormatBits(a.BandwidthBits), a.RequestID))
	para(fmt.Sprintf("Approving adds it until revoked (bcpgw subscriptions revoke %s): %s is told at once, and its pushes are validated, charged and delivered like those of a declared subscription.",
		a.SubscriptionID, a.Reader))
	qs, problems := runtime.DecodeQuerySpec(a.Response)
	if len(problems) > 0 {
		sectionHere("Spec (raw)")
		para(string(a.Response))
		return out
	}
	switch {
	case len(qs.Fields) > 0:
		sectionHere(fmt.Sprintf("Fields (%d)", len(qs.Fields)))
		for _, f := range qs.Fields {
			para(fieldLine(f))
		}
	case len(qs.Questions) > 0:
		sectionHere(fmt.Sprintf("Questions (%d)", len(qs.Questions)))
		for _, q := range qs.Questions {
			words := q.MaxWords
			if words == 0 {
				words = qs.MaxWords
			}
			format := string(q.Format)
			if format == "" {
				format = string(bcp.ShortText)
			}
			line := fmt.Sprintf("%s (at most %d words, %s", q.ID, words, format)
			if q.Min != nil || q.Max != nil {
				line += ", " + bounds(q.Min, q.Max)
			}
			para(line + "): " + q.Question)
		}
	}
	if qs.Directive != "" {
		sectionHere(fmt.Sprintf("Directive (a summary of at most %d words)", qs.MaxWords))
		para(qs.Directive)
	}
	return out
}

// fieldLine describes one Cat-1 field: "urgent: true or false",
// `priority: one of "low", "high"`.
func fieldLine(f bcp.Field) string {
	switch f.Type {
	case bcp.Boolean:
		return f.Name + ": true or false"
	case bcp.Enum:
		// Each value quoted: the values are the requesting Controller's
		// text, and "high, low" must not read as two of them.
		q := make([]string, len(f.Values))
		for i, v := range f.Values {
			q[i] = strconv.Quote(v)
		}
		return f.Name + ": one of " + strings.Join(q, ", ")
	case bcp.Integer:
		return f.Name + ": an integer, " + bounds(f.Min, f.Max)
	}
	return fmt.Sprintf("%s: %s", f.Name, f.Type)
}

// bounds says "from 1 to 5", "at least 1" or "at most 5".
func bounds(lo, hi *int64) string {
	switch {
	case lo != nil && hi != nil:
		return fmt.Sprintf("from %d to %d", *lo, *hi)
	case lo != nil:
		return fmt.Sprintf("at least %d", *lo)
	case hi != nil:
		return fmt.Sprintf("at most %d", *hi)
	}
	return "any"
}
