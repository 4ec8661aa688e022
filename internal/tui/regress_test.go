package tui

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// Regression tests: each failed before its fix. The comments say what
// went wrong.

// view.go footer: in the reason view the footer's first line is the
// input, so a refusal ("A reason is required", "Not connected") is set
// but never shown: enter on an empty reason seems to do nothing.
func TestRegressionRejectMessageHidden(t *testing.T) {
	q := startQueue(t, newGateway(threeItems()...), Config{})
	q.waitFor("3 pending", "crawler → writer")
	q.key("enter")
	q.key("r")
	q.waitFor("Reason: ")
	q.key("enter")
	q.waitFor("A reason is required")
}

// model.go key: the confirm and reason views are handled before the busy
// check, and submitting leaves the view where it is, so a second y (or
// enter) while the decision is in flight sends it again, and any other
// key says "Not approved." while the approval goes through.
func TestRegressionDecisionSentTwice(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"approve", []string{"a", "y", "y"}},
		{"reject", []string{"r", "bad", "enter", "enter"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := newGateway(threeItems()...)
			hold := make(chan struct{})
			gw.hold = hold
			q := startQueue(t, gw, Config{})
			q.waitFor("3 pending", "crawler → writer")
			q.key("enter")
			for _, k := range tc.keys {
				q.key(k)
			}
			q.settle()
			testproc.Eventually(t, "the first call", func() bool { ap, rj := gw.calls(); return len(ap)+len(rj) > 0 })
			time.Sleep(50 * time.Millisecond) // room for a second call
			ap, rj := gw.calls()
			sc := q.s.screen()
			close(hold)
			if len(ap)+len(rj) != 1 {
				t.Errorf("%d decisions sent for one item: %+v %+v", len(ap)+len(rj), ap, rj)
			}
			if !strings.Contains(sc, "ing ap-0003…") {
				t.Errorf("while in flight the screen should say Approving/Rejecting ap-0003…:\n%s", sc)
			}
		})
	}
}

// text.go wrap: after breaking at the last space, the rest of the line
// plus the current cell can still exceed the width when the cell is an
// escape (8 to 10 columns, ⟨U+XXXX⟩ to ⟨U+XXXXXX⟩); it is appended
// without a second check.
func TestRegressionWrapOverflowAfterBreak(t *testing.T) {
	for _, l := range wrap("ab cdef\u200b", nil, 10, defaultStyles()) {
		if w := ansi.StringWidth(l); w > 10 {
			t.Errorf("line %q is %d columns, want at most 10", l, w)
		}
	}
}

// model.go responseFields: json.Unmarshal of null into a string succeeds
// and leaves it empty, so a null value is shown as an empty string,
// though the doc says values that are not strings are shown as JSON.
func TestRegressionNullShownEmpty(t *testing.T) {
	got := responseFields(json.RawMessage(`{"a":null,"b":""}`))
	if len(got) != 2 || got[0].text != "null" {
		t.Errorf("responseFields = %q, want a shown as null", got)
	}
}

// bcp cuts an anomaly's match to 40 characters and appends "..." (bcp
// excerpt); text.go cells looks for the whole excerpt, which is not in
// the text, so long matches (every base64 run over 40 characters, long
// URLs) are never highlighted.
func TestRegressionLongAnomalyMatchNotHighlighted(t *testing.T) {
	text := "see https://evil.example/" + strings.Repeat("x", 60) + " now"
	match := "https://evil.example/" + strings.Repeat("x", 19) + "..." // what bcp reports
	n := 0
	for _, c := range cells(text, []string{match}) {
		if c.anomaly {
			n++
		}
	}
	if n == 0 {
		t.Errorf("no character of the URL is highlighted for the match %q", match)
	}
}

// model.go decided: after a failed decision the list is fetched again;
// when the item is no longer pending (already decided, expired, revoked:
// the usual reasons a decision fails) setItems replaces the gateway's
// message ("already approved by bob") with the generic "no longer
// pending" one within one round trip, so the reviewer never learns who
// decided it.
func TestRegressionDecisionErrorReplaced(t *testing.T) {
	gw := newGateway(threeItems()...)
	q := startQueue(t, gw, Config{})
	q.waitFor("3 pending", "crawler → writer")
	q.key("enter")
	q.waitFor("ap-0003  Cat-3")
	// bob approves it elsewhere; this connection has not heard yet.
	gw.mu.Lock()
	gw.removeLocked("ap-0003")
	gw.mu.Unlock()
	gw.setDecideErr(control.Errorf(control.CodeAlreadyDecided, "approval item ap-0003 was already approved by bob"))
	q.key("a")
	q.key("y")
	q.waitFor("2 pending")
	q.settle()
	if sc := q.s.screen(); !strings.Contains(sc, "already approved by bob") {
		t.Errorf("the reason the approval failed is gone:\n%s", sc)
	}
}

// The detail view's viewport cuts every line at its width (bubbles
// viewport, no wrapping). wrap's overflow (above) therefore hides the end
// of an escape: a reviewer sees "⟨U+E00" and not which character it is.
func TestRegressionEscapeCutInDetail(t *testing.T) {
	resp := `{"summary":"a ` + strings.Repeat("b", 74) + "󠁁" + ` end"}`
	a := item("ap-0050", time.Minute, 3, "scout", "planner", resp)
	a.SubscriptionID = "s"
	q := startQueue(t, newGateway(a), Config{})
	q.waitFor("1 pending")
	q.key("enter")
	if sc := q.waitFor("ap-0050  Cat-3", "sha256"); !strings.Contains(sc, "⟨U+E0041⟩") {
		t.Errorf("the escape is not shown whole:\n%s", sc)
	}
}

// view.go detailHeader and footer: truncate (runewidth.Truncate) is
// applied to strings that already hold escape sequences; runewidth
// counts their bytes as columns, so with colours on the line is cut
// short, and a cut inside a sequence or before a reset leaves a broken
// or unterminated style.
func TestRegressionTruncateStyled(t *testing.T) {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI256)
	m := New(Config{Dial: newGateway().Dial, Now: fixedNow})
	m.st.title = r.NewStyle().Bold(true)
	m.st.warn = r.NewStyle().Foreground(lipgloss.Color("9")).Bold(true)
	m.width = 40
	m.open = threeItems()[1]
	m.view = viewConfirm
	// Cut short: 34 columns of 40.
	first := strings.Split(m.footer(), "\n")[0]
	if w := ansi.StringWidth(first); w != 40 {
		t.Errorf("the confirmation is cut to %d columns, want 40: %q", w, first)
	}
	// Cut before the reset: "\x1b[1;91mexpired: it can no long…" leaves
	// bold red on for the viewport below.
	m.width = 30
	m.open.ExpiresAt = now.Add(-time.Minute)
	m.view = viewDetail
	exp := strings.Split(m.detailHeader(), "\n")[1]
	if !strings.HasSuffix(exp, "\x1b[0m") && !strings.HasSuffix(exp, "\x1b[m") {
		t.Errorf("the expiry line leaves its style on: %q", exp)
	}
}
