package tui

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/mattn/go-runewidth"
)

// A reviewer must see exactly what would reach the Controller. Text that
// hides something (zero-width characters, bidirectional overrides, tag
// characters, odd spaces, control characters) is shown as ⟨U+XXXX⟩, and
// the excerpts the anomaly detectors matched are highlighted.

// visible reports whether r is shown as itself. Newlines are kept as line
// breaks; everything else that is not plainly printable is made visible.
func visible(r rune) bool {
	switch {
	case r == '\n':
		return true
	case r == ' ':
		return true
	case unicode.Is(unicode.Variation_Selector, r):
		return false // can smuggle data on an innocent-looking character
	case r == unicode.ReplacementChar:
		return false
	}
	// unicode.IsPrint excludes control and format characters (Cc, Cf:
	// zero-width, bidi controls, tags), private use, unassigned code
	// points and every space but U+0020.
	return unicode.IsPrint(r)
}

// escape renders r as ⟨U+XXXX⟩.
func escape(r rune) string { return fmt.Sprintf("⟨U+%04X⟩", r) }

// Printable renders s for a terminal on one line: every character that
// is not plainly printable (newlines and escape sequences included) as
// ⟨U+XXXX⟩. Text that came from a runtime must pass through it before it
// is printed: a raw escape sequence could rewrite the operator's screen
// or clipboard.
func Printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '\n' || !visible(r) {
			b.WriteString(escape(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Unusual counts the characters of s that are shown escaped.
func Unusual(s string) int {
	n := 0
	for _, r := range s {
		if !visible(r) {
			n++
		}
	}
	return n
}

// styles are the text styles of the detail view.
type styles struct {
	escaped lipgloss.Style // ⟨U+XXXX⟩
	anomaly lipgloss.Style // an anomaly's match
	title   lipgloss.Style
	dim     lipgloss.Style
	warn    lipgloss.Style // errors, and rows with anomalies
	ok      lipgloss.Style
	sel     lipgloss.Style // the selected row
}

func defaultStyles() styles {
	return styles{
		escaped: lipgloss.NewStyle().Reverse(true),
		anomaly: lipgloss.NewStyle().Bold(true).Underline(true).Foreground(lipgloss.Color("11")),
		title:   lipgloss.NewStyle().Bold(true),
		dim:     lipgloss.NewStyle().Faint(true),
		warn:    lipgloss.NewStyle().Foreground(lipgloss.Color("9")).Bold(true),
		ok:      lipgloss.NewStyle().Foreground(lipgloss.Color("10")),
		sel:     lipgloss.NewStyle().Reverse(true),
	}
}

// cell is one rendered unit: a rune, or an escaped one.
type cell struct {
	text    string
	width   int
	space   bool // a place to break a line
	escaped bool
	anomaly bool
}

// cells splits s into cells, marking those inside any of the matches.
func cells(s string, matches []string) []cell {
	marked := make([]bool, len(s)) // by byte offset
	for _, m := range matches {
		// A long match is an excerpt ending in "...": it marks from its
		// start to the end of that run of non-space text.
		m, cut := strings.CutSuffix(m, "...")
		if m == "" {
			continue
		}
		for from := 0; from < len(s); {
			i := strings.Index(s[from:], m)
			if i < 0 {
				break
			}
			end := from + i + len(m)
			if cut {
				for end < len(s) && s[end] != ' ' && s[end] != '\n' {
					end++
				}
			}
			for j := from + i; j < end; j++ {
				marked[j] = true
			}
			from = end
		}
	}
	out := make([]cell, 0, len(s))
	for i, r := range s {
		c := cell{text: string(r), anomaly: marked[i], space: r == ' '}
		if !visible(r) {
			c.text, c.escaped = escape(r), true
		}
		c.width = runewidth.StringWidth(c.text)
		out = append(out, c)
	}
	return out
}

// wrap renders s in lines of at most width columns, breaking at spaces
// where it can, with escapes and anomaly matches styled.
func wrap(s string, matches []string, width int, st styles) []string {
	width = max(width, 10)
	var lines []string
	var line []cell
	w := 0
	flush := func(cs []cell) {
		var b strings.Builder
		for _, c := range cs {
			switch {
			case c.escaped:
				b.WriteString(st.escaped.Render(c.text))
			case c.anomaly:
				b.WriteString(st.anomaly.Render(c.text))
			default:
				b.WriteString(c.text)
			}
		}
		lines = append(lines, strings.TrimRight(b.String(), " "))
	}
	for _, c := range cells(s, matches) {
		if c.text == "\n" {
			flush(line)
			line, w = nil, 0
			continue
		}
		if w+c.width > width && len(line) > 0 {
			// Break after the last space in the line, if there is one.
			cut := -1
			for i := len(line) - 1; i > 0; i-- {
				if line[i].space {
					cut = i
					break
				}
			}
			if cut < 0 || c.space {
				flush(line)
				line = nil
			} else {
				flush(line[:cut])
				line = append([]cell(nil), line[cut+1:]...)
			}
			w = 0
			for _, x := range line {
				w += x.width
			}
			if w+c.width > width && len(line) > 0 {
				// What follows the space still does not fit with c.
				flush(line)
				line, w = nil, 0
			}
			if c.space && len(line) == 0 {
				continue // no leading space on a new line
			}
		}
		line = append(line, c)
		w += c.width
	}
	if len(line) > 0 || len(lines) == 0 {
		flush(line)
	}
	return lines
}

// truncate cuts s, which may be styled, to width columns with an
// ellipsis.
func truncate(s string, width int) string {
	return ansi.Truncate(s, width, "…")
}
