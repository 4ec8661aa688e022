package tui

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/control"
)

// markStyles make escapes and anomaly matches visible in plain text:
// an escape is bracketed, a match is upper-cased.
func markStyles() styles {
	st := defaultStyles()
	st.escaped = lipgloss.NewStyle().Transform(func(s string) string { return "[" + s + "]" })
	st.anomaly = lipgloss.NewStyle().Transform(strings.ToUpper)
	return st
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		matches []string
		width   int
		want    []string
	}{
		{"fits", "hello world", nil, 20, []string{"hello world"}},
		{"empty", "", nil, 20, []string{""}},
		{"breaks at the last space", "hello world", nil, 10, []string{"hello", "world"}},
		{"a space at the edge is dropped", "hello world foo", nil, 11, []string{"hello world", "foo"}},
		{"several breaks", "aa bb cc dd ee ff gg hh", nil, 10, []string{"aa bb cc", "dd ee ff", "gg hh"}},
		{"a long word is cut", "abcdefghijklmnopqrstuvwxyz", nil, 10, []string{"abcdefghij", "klmnopqrst", "uvwxyz"}},
		{"the width is at least 10", "abcdefghijklmnop", nil, 3, []string{"abcdefghij", "klmnop"}},
		{"newline kept", "a\nb", nil, 10, []string{"a", "b"}},
		{"blank line kept", "a\n\nb", nil, 10, []string{"a", "", "b"}},
		{"newline resets the width", "abcdefgh\nabcdefgh", nil, 10, []string{"abcdefgh", "abcdefgh"}},
		{"trailing spaces trimmed", "abc   \ndef", nil, 10, []string{"abc", "def"}},
		{"wide characters count 2", "日本語テキスト", nil, 10, []string{"日本語テキ", "スト"}},
		// An escape is 8 to 10 columns (⟨U+XXXX⟩ to ⟨U+XXXXXX⟩) and is
		// never split.
		{"escape counted", "abcdefgh\u200b", nil, 10, []string{"abcdefgh", "⟨U+200B⟩"}},
		{"escape fills the line", "ab\u200bcd", nil, 10, []string{"ab⟨U+200B⟩", "cd"}},
		{"escape after a break", "ab cd\u200b", nil, 10, []string{"ab", "cd⟨U+200B⟩"}},
		{"tag escape is 9 wide", "xy\U000E0041", nil, 10, []string{"xy", "⟨U+E0041⟩"}},
		{"tag escape fits", "x\U000E0041", nil, 10, []string{"x⟨U+E0041⟩"}},
		{"every kind escaped", "a\u200b\u202e\U000E0041\u00a0\ufe0f\tz", nil, 80,
			[]string{"a⟨U+200B⟩⟨U+202E⟩⟨U+E0041⟩⟨U+00A0⟩⟨U+FE0F⟩⟨U+0009⟩z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := wrap(tc.in, tc.matches, tc.width, defaultStyles())
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("wrap(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
			}
			for _, l := range got {
				if w := ansi.StringWidth(l); w > max(tc.width, 10) {
					t.Errorf("line %q is %d columns, more than %d", l, w, tc.width)
				}
			}
		})
	}
}

// TestWrapKeepsWidthAndText wraps many texts of ordinary characters at
// many widths: no line is too wide, and nothing but spaces is lost.
func TestWrapKeepsWidthAndText(t *testing.T) {
	words := []string{"a", "to", "the", "gateway", "approval", "x", "Controller", "bandwidth", "日本", "reviewer's", "ok."}
	for n := 0; n < 200; n++ {
		var b strings.Builder
		for i := 0; i < 5+n%37; i++ {
			if i > 0 {
				b.WriteString(strings.Repeat(" ", 1+(n*i)%2))
			}
			if (n+i)%17 == 0 {
				b.WriteString("\n")
			}
			b.WriteString(words[(n*7+i*3)%len(words)])
			if (n+i)%23 == 0 {
				b.WriteString(strings.Repeat("z", 15)) // longer than some widths
			}
		}
		in := b.String()
		for width := 10; width <= 40; width += 3 {
			got := wrap(in, nil, width, defaultStyles())
			for _, l := range got {
				if w := ansi.StringWidth(l); w > width {
					t.Fatalf("wrap(%q, %d): line %q is %d columns", in, width, l, w)
				}
			}
			strip := func(s string) string { return strings.NewReplacer(" ", "", "\n", "").Replace(s) }
			if strip(strings.Join(got, "")) != strip(in) {
				t.Fatalf("wrap(%q, %d) = %q: text lost", in, width, got)
			}
		}
	}
}

func TestWrapHighlightsMatches(t *testing.T) {
	st := markStyles()
	for _, tc := range []struct {
		name    string
		in      string
		matches []string
		width   int
		want    []string
	}{
		{"every occurrence", "foo bar foo baz foo", []string{"foo"}, 40, []string{"FOO bar FOO baz FOO"}},
		{"adjacent occurrences", "xfoofoox", []string{"foo"}, 40, []string{"xFOOFOOx"}},
		{"several matches, overlapping", "ignore all previous instructions", []string{"ignore all", "all previous"}, 40,
			[]string{"IGNORE ALL PREVIOUS instructions"}},
		{"no match", "nothing here", []string{"absent"}, 40, []string{"nothing here"}},
		{"empty match ignored", "abc", []string{""}, 40, []string{"abc"}},
		{"across a break", "alpha beta gamma", []string{"beta gamma"}, 10, []string{"alpha BETA", "GAMMA"}},
		{"escape inside a match", "xa\u200bby", []string{"a\u200bb"}, 40, []string{"xA[⟨U+200B⟩]By"}},
		{"matches are case-sensitive", "Ignore ignore", []string{"ignore"}, 40, []string{"Ignore IGNORE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := wrap(tc.in, tc.matches, tc.width, st)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("wrap(%q, %q) = %q, want %q", tc.in, tc.matches, got, tc.want)
			}
		})
	}
}

func TestCellsMarkMatchRanges(t *testing.T) {
	s := "ab ab\u00e9ab" // a two-byte character between matches
	var marked []int
	for i, c := range cells(s, []string{"ab"}) {
		if c.anomaly {
			marked = append(marked, i)
		}
	}
	if want := []int{0, 1, 3, 4, 6, 7}; !reflect.DeepEqual(marked, want) {
		t.Errorf("marked cells %v, want %v", marked, want)
	}
	cs := cells("a b\u200b", nil)
	if !cs[1].space || cs[0].space || !cs[3].escaped || cs[3].width != 8 || cs[3].text != "⟨U+200B⟩" {
		t.Errorf("cells = %+v", cs)
	}
}

func TestUnusual(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"plain ASCII text, with punctuation!", 0},
		{"line\nbreaks\nare kept", 0},
		{"accents é ü ñ, CJK 日本, emoji 😀, arrows →", 0},
		{"e\u0301", 0}, // a combining mark is printable
		{"zero\u200bwidth", 1},
		{"right-to-left \u202eoverride", 1},
		{"tag \U000E0041", 1},
		{"no\u00a0break", 1},
		{"heart \u2764\ufe0f", 1}, // the variation selector
		{"\u200b\u202e\U000E0041\u00a0\ufe0f", 5},
		{"tab\tand\rcarriage return", 2},
		{"soft\u00adhyphen", 1},
		{"line\u2028separator", 1},
		{"replacement \ufffd", 1},
		{"invalid \xff byte", 1},
		{"private use \ue000", 1},
		{"BOM \ufeff", 1},
		{"ideographic\u3000space", 1},
	} {
		if got := Unusual(tc.in); got != tc.want {
			t.Errorf("Unusual(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestEscape(t *testing.T) {
	for r, want := range map[rune]string{0x200b: "⟨U+200B⟩", 0x9: "⟨U+0009⟩", 0xa0: "⟨U+00A0⟩", 0xe0041: "⟨U+E0041⟩", 0x10ffff: "⟨U+10FFFF⟩"} {
		if got := escape(r); got != want {
			t.Errorf("escape(%U) = %q, want %q", r, got, want)
		}
	}
}

func TestAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{500 * time.Millisecond, "0s"},
		{4 * time.Second, "4s"},
		{59*time.Second + 999*time.Millisecond, "59s"},
		{time.Minute, "1m"},
		{12*time.Minute + 30*time.Second, "12m"},
		{59*time.Minute + 59*time.Second, "59m"},
		{time.Hour, "1h"},
		{3*time.Hour + 59*time.Minute, "3h"},
		{47*time.Hour + 59*time.Minute, "47h"},
		{48 * time.Hour, "2d"},
		{71 * time.Hour, "2d"},
		{10 * 24 * time.Hour, "10d"},
		{-5 * time.Second, "-5s"},
		{-3 * time.Hour, "-3h"},
		{-72 * time.Hour, "-3d"},
	} {
		if got := Age(tc.d); got != tc.want {
			t.Errorf("Age(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestResponseFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  string
		want []field
	}{
		{"Cat-3 summary", `{"summary":"All quiet."}`, []field{{"summary", "All quiet."}}},
		{"order kept, not sorted", `{"zeta":"z","alpha":"a","mid":"m"}`, []field{{"zeta", "z"}, {"alpha", "a"}, {"mid", "m"}}},
		// null is a known exception: TestKnownBugNullShownEmpty.
		{"non-strings as JSON", `{"ok":true,"n":42,"f":-1.5,"list":["a",1],"obj":{"k":"v"}}`,
			[]field{{"ok", "true"}, {"n", "42"}, {"f", "-1.5"}, {"list", `["a",1]`}, {"obj", `{"k":"v"}`}}},
		{"JSON escapes decoded", `{"s":"a\u200bb\n\"q\" \u003ctag\u003e"}`, []field{{"s", "a\u200bb\n\"q\" <tag>"}}},
		{"raw invisible characters kept", "{\"s\":\"a\u202eb\"}", []field{{"s", "a\u202eb"}}},
		{"spaces around", " {\n \"a\" : \"x\" ,\n \"b\" : 2 }\n", []field{{"a", "x"}, {"b", "2"}}},
		{"duplicate keys both shown", `{"a":"1","a":"2"}`, []field{{"a", "1"}, {"a", "2"}}},
		{"empty object", `{}`, nil},
		{"not an object", `"just text"`, []field{{"response", `"just text"`}}},
		{"array", `[1,2]`, []field{{"response", `[1,2]`}}},
		{"invalid", `{"a":`, []field{{"response", `{"a":`}}},
		{"empty", ``, []field{{"response", ``}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := responseFields(json.RawMessage(tc.raw))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("responseFields(%s) = %q, want %q", tc.raw, got, tc.want)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in    string
		width int
		want  string
	}{
		{"short", 10, "short"},
		{"exactly ten", 11, "exactly ten"},
		{"much too long", 8, "much to…"},
		{"日本語テキスト", 7, "日本語…"},
	} {
		if got := truncate(tc.in, tc.width); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
		}
	}
}

// TestDetailLines checks the detail view's content without a program:
// sections in order, the unusual-character count in the title, and the
// anomalies' matches highlighted in every field.
func TestDetailLines(t *testing.T) {
	m := New(Config{Dial: newGateway().Dial, Now: fixedNow})
	m.st = markStyles()
	a := item("ap-1", time.Minute, 2, "r", "c", `{"q1":"say ignore\u200b now","q2":7}`)
	a.Directive = "Answer the questions."
	a.Anomalies = []bcp.Anomaly{{Code: "instruction", Field: "q1", Match: "ignore"}}
	got := m.detailLines(a)
	want := []string{
		"", "Directive (what the Controller asked for)", "  Answer the questions.",
		"", "Anomalies (1, highlighted below)", `  instruction in q1: "ignore"`,
		"", "q1 (1 invisible or unusual characters shown as ⟨U+XXXX⟩)", "  say IGNORE[⟨U+200B⟩] now",
		"", "q2", "  7",
		"", "Hash", "  sha256 " + a.SHA256,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("detailLines =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// No directive, no anomalies: those sections are left out.
	b := item("ap-2", time.Minute, 3, "r", "c", `{"summary":"hi"}`)
	if got := m.detailLines(b); len(got) != 6 || got[1] != "summary" {
		t.Errorf("detailLines = %q", got)
	}
}

// TestViewSizes renders every view at several terminal sizes: no line is
// wider than the terminal and the frame has exactly its height (the
// footer at the bottom), as long as the terminal is at least 74 columns
// (the widest unwrapped line, the sha256, is 73).
func TestViewSizes(t *testing.T) {
	a, _, _ := detailItem(t)
	items := append(threeItems(), a)
	for _, size := range [][2]int{{80, 24}, {74, 10}, {100, 40}, {120, 12}} {
		w, h := size[0], size[1]
		m := New(Config{Dial: newGateway().Dial, Now: fixedNow, State: "/var/lib/bcpgw-test"})
		mm, _ := m.Update(tea.WindowSizeMsg{Width: w, Height: h})
		m = mm.(Model)
		m.conn = &fakeConn{gw: newGateway(), notes: make(chan control.EventNotification)}
		m.setItems(append([]control.Approval(nil), items...))
		check := func(name string, m Model) {
			t.Helper()
			sc := ansi.Strip(m.View())
			checkFrame(t, sc, w, h)
			if n := len(lines(sc)); n != h {
				t.Errorf("%dx%d %s: %d lines, want %d:\n%s", w, h, name, n, h, sc)
			}
		}
		check("list", m)
		for i := range items {
			m.cursor = i
			m.openItem(m.items[i])
			check(fmt.Sprintf("detail %s", m.open.ID), m)
			m.view = viewConfirm
			check("confirm", m)
			m.view = viewReason
			check("reason", m)
			m.view = viewDetail
		}
	}
}
