package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/lipgloss"

	"github.com/bcpgw/bcpgw/gateway/control"
)

// View renders the screen: a header of two lines and a rule, the body,
// and a footer of the last outcome and the keys.
func (m Model) View() string {
	var b strings.Builder
	b.WriteString(m.header())
	b.WriteString("\n")
	body := m.body()
	b.WriteString(body)
	// Pad the body so the footer stays at the bottom.
	if pad := m.height - 3 - lipgloss.Height(body) - 2; pad > 0 {
		b.WriteString(strings.Repeat("\n", pad))
	}
	b.WriteString("\n")
	b.WriteString(m.footer())
	return b.String()
}

func (m Model) header() string {
	var status string
	switch {
	case m.conn == nil && m.connErr != nil:
		status = m.st.warn.Render("gateway not running") + m.st.dim.Render(" · retrying every "+m.cfg.Retry.String())
	case m.conn == nil:
		status = m.st.dim.Render("connecting…")
	case !m.loaded:
		status = m.st.dim.Render("loading…")
	default:
		n := fmt.Sprintf("%d pending", len(m.items))
		if m.more { // more follow what is loaded: read as the cursor nears them
			n = fmt.Sprintf("%d+ pending", len(m.items))
		}
		status = n + m.st.dim.Render(" · live")
	}
	line1 := truncate(m.st.title.Render("bcpgw approvals")+"  "+status, m.width)
	line2 := m.st.dim.Render(truncate("state "+m.cfg.State, m.width))
	if m.conn == nil && m.connErr != nil {
		line2 = m.st.dim.Render(truncate(m.connErr.Error(), m.width))
	}
	return line1 + "\n" + line2 + "\n" + m.st.dim.Render(strings.Repeat("─", max(m.width, 1)))
}

func (m Model) body() string {
	switch m.view {
	case viewList:
		return m.list()
	case viewHelp:
		return m.st.title.Render(truncate("Keys", m.width)) + "\n" + m.helpVP.View()
	default:
		return m.detailHeader() + "\n" + m.vp.View()
	}
}

// The list's columns.
const listRow = "%s %-11s %-4s %-5s %7s  %4s  %-21s %s"

func (m Model) list() string {
	if !m.loaded {
		if m.connErr == nil {
			return ""
		}
		msg := "No gateway answers on " + m.cfg.State + ". Start one with\n\n  bcpgw run --agents DIR --state " + m.cfg.State +
			"\n\nand the queue appears here. (" + m.connErr.Error() + ")"
		return "\n" + strings.Join(indent(wrap(msg, nil, m.width-4, m.st)), "\n")
	}
	if len(m.items) == 0 {
		msg := "Nothing waits for a decision. New items appear here as Readers publish them."
		return "\n" + strings.Join(indent(wrap(msg, nil, m.width-4, m.st)), "\n")
	}
	now := m.cfg.Now()
	rows := []string{m.st.dim.Render(truncate(fmt.Sprintf(listRow, " ", "ID", "AGE", "CAT", "BITS", "ANOM", "READER → CONTROLLER", "SUBSCRIPTION/QUERY"), m.width))}
	// Scroll so the cursor stays on screen.
	room := max(m.height-3-1-2, 1)
	first := max(m.cursor-room+1, 0)
	for i := first; i < len(m.items) && i < first+room; i++ {
		a := m.items[i]
		what := a.SubscriptionID
		switch {
		case a.Kind == control.KindSubscription:
			what = "request: new subscription " + a.SubscriptionID
		case a.QueryID != "":
			what = "query " + a.QueryID
		}
		if a.Required > 1 { // approvals so far, of those it needs: "(1/2)"
			what += fmt.Sprintf(" (%d/%d)", len(a.Approvals), a.Required)
		}
		mark := " "
		if i == m.cursor {
			mark = ">"
		}
		row := fmt.Sprintf(listRow, mark, truncate(a.ID, 11), Age(now.Sub(a.CreatedAt)), fmt.Sprintf("Cat-%d", a.Category),
			fmt.Sprintf("%.1f", a.BandwidthBits), fmt.Sprint(len(a.Anomalies)), truncate(a.Reader+" → "+a.Controller, 21), what)
		row = truncate(row, m.width)
		if i == m.cursor {
			row = m.st.sel.Render(padRight(row, m.width))
		} else if len(a.Anomalies) > 0 {
			row = m.st.warn.Render(row)
		}
		rows = append(rows, row)
	}
	return strings.Join(rows, "\n")
}

func padRight(s string, w int) string {
	if n := lipgloss.Width(s); n < w {
		return s + strings.Repeat(" ", w-n)
	}
	return s
}

func (m Model) detailHeader() string {
	a := m.open
	what := "subscription " + a.SubscriptionID
	switch {
	case a.Kind == control.KindSubscription:
		what = "REQUEST for new subscription " + a.SubscriptionID
	case a.QueryID != "":
		what = "answer to query " + a.QueryID
	}
	now := m.cfg.Now()
	line := fmt.Sprintf("%s  Cat-%d %s  %s → %s  %.1f bits", a.ID, a.Category, what, a.Reader, a.Controller, a.BandwidthBits)
	exp := fmt.Sprintf("received %s ago · expires in %s (%s)", Age(now.Sub(a.CreatedAt)), Age(a.ExpiresAt.Sub(now)),
		a.ExpiresAt.Local().Format("Jan 2 15:04"))
	if !a.ExpiresAt.After(now) {
		exp = m.st.warn.Render("expired: it can no longer be approved")
	}
	if p := a.Progress(); p != "" {
		exp += " · " + p + approvers(a)
	}
	if pct := m.vp.ScrollPercent(); m.vp.TotalLineCount() > m.vp.Height {
		exp += m.st.dim.Render(fmt.Sprintf(" · %d%%", int(pct*100)))
	}
	return m.st.title.Render(truncate(line, m.width)) + "\n" + truncate(exp, m.width)
}

// approvers names who approved an item so far: " (alice)".
func approvers(a control.Approval) string {
	if len(a.Approvals) == 0 {
		return ""
	}
	names := make([]string, len(a.Approvals))
	for i, g := range a.Approvals {
		names[i] = g.User
	}
	return " (" + strings.Join(names, ", ") + ")"
}

func (m Model) footer() string {
	var line string
	switch {
	case m.view == viewConfirm:
		line = truncate(m.st.title.Render(fmt.Sprintf("Deliver %s to %s? ", m.open.ID, m.open.Controller))+"y approves, any other key cancels", m.width)
	case m.view == viewReason:
		// The input takes the message line; a refusal takes the help's.
		help := m.st.dim.Render(truncate(m.help(), m.width))
		if m.flash != "" && m.failed {
			help = m.st.warn.Render(truncate(m.flash, m.width))
		}
		return m.reason.View() + "\n" + help
	case m.flash != "" && m.failed:
		line = m.st.warn.Render(m.flash)
	case m.flash != "":
		line = m.st.ok.Render(m.flash)
	}
	// What is off-screen is said first, where a narrow terminal still
	// shows it; a refusal says it itself.
	if n := m.below(); m.view == viewDetail && n > 0 && !(m.failed && m.flash != "") {
		more := m.st.title.Render(fmt.Sprintf("↓ more below (%d lines)", n))
		if line != "" {
			more += " · "
		}
		line = more + line
	}
	return truncate(line, m.width) + "\n" + m.st.dim.Render(truncate(m.help(), m.width))
}

// help is the help line for the current view.
func (m Model) help() string {
	var ks []key.Binding
	switch m.view {
	case viewList:
		ks = []key.Binding{m.keys.Up, m.keys.Down, m.keys.Open, m.keys.Help, m.keys.Quit}
	case viewDetail:
		ks = []key.Binding{m.keys.Approve, m.keys.Reject, m.keys.Help, m.keys.Scroll, m.keys.Next, m.keys.Back, m.keys.Quit}
	case viewHelp:
		ks = []key.Binding{m.keys.CloseHelp, m.keys.Scroll}
	case viewConfirm:
		ks = []key.Binding{m.keys.Yes, m.keys.Cancel}
	case viewReason:
		ks = []key.Binding{m.keys.Submit, m.keys.Cancel}
	}
	parts := make([]string, 0, len(ks))
	for _, k := range ks {
		h := k.Help()
		parts = append(parts, h.Key+" "+h.Desc)
	}
	return strings.Join(parts, " · ")
}

// helpKeys are the help's entries: a section title (keys empty), or keys
// and what they do.
var helpKeys = []struct{ keys, does string }{
	{"", "In the list"},
	{"↑ k  ↓ j", "move"},
	{"enter → l", "read the item"},
	{"", "Reading an item"},
	{"↑ k  ↓ j", "scroll a line"},
	{"pgdn space f", "a page down (pgup b: up; d u: half a page)"},
	{"a", "approve: once every line of the item has been on screen (\"more below\" says what is not yet); y confirms, any other key cancels"},
	{"r", "reject: type the reason the Reader is told, enter rejects, esc cancels"},
	{"n  p", "the next, the previous item"},
	{"esc ← h", "back to the list"},
	{"", "Anywhere"},
	{"?", "this help (?, esc or q closes it)"},
	{"q", "quit (ctrl+c: at once, also while typing)"},
}

// helpLines renders the help, wrapped to the terminal.
func (m Model) helpLines() []string {
	const col = 14 // the keys' column
	var out []string
	for _, h := range helpKeys {
		if h.keys == "" {
			if out != nil {
				out = append(out, "")
			}
			out = append(out, m.st.title.Render(truncate(h.does, m.width)))
			continue
		}
		for i, l := range wrap(h.does, nil, m.width-2-col, m.st) {
			k := ""
			if i == 0 {
				k = h.keys
			}
			out = append(out, "  "+padRight(k, col)+l)
		}
	}
	out = append(out, "")
	for _, l := range wrap("A decision names the SHA-256 of the text shown: what was approved is what is delivered. "+
		"An item that needs several approvals (\"1 of 2 approvals\") is delivered once operators with different uids have approved it; one rejection ends it.", nil, m.width-2, m.st) {
		out = append(out, "  "+l)
	}
	return out
}

// Age renders a duration compactly: "4s", "12m", "3h", "2d".
func Age(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh", int(d.Hours()))
	default:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if neg {
		return "-" + s
	}
	return s
}
