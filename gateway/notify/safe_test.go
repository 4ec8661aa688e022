package notify

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestDefang(t *testing.T) {
	for in, want := range map[string]string{
		"see https://example.com/a?b=c":    "see hxxps://example[.]com/a?b=c",
		"HTTP://Example.COM":               "HxxP://Example[.]COM",
		"ftp://files.example.org/x":        "fxp://files[.]example[.]org/x",
		"gopher://x.example":               "gopher[://]x[.]example",
		"javascript:alert(1)":              "javascript[:]alert(1)",
		"mail bob@example.com now":         "mail bob@example[.]com now",
		"www.example.co.uk":                "www[.]example[.]co[.]uk",
		"at 10.0.0.1:80":                   "at 10[.]0[.]0[.]1:80",
		"version 1.2.3 and 3.14":           "version 1.2.3 and 3.14",
		"e.g. this":                        "e.g. this",
		"example。com":                      "example[.]com",
		"xn--80ak6aa92e.xn--p1ai":          "xn--80ak6aa92e[.]xn--p1ai",
		"already hxxps://example[.]com ok": "already hxxps://example[.]com ok",
	} {
		if got := Defang(in); got != want {
			t.Errorf("Defang(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSafe(t *testing.T) {
	got, clipped := Safe("line one\u200b\nline\u202etwo\x1b[31m", 0)
	if want := "line one⟨U+200B⟩\nline⟨U+202E⟩two⟨U+001B⟩[31m"; got != want || clipped != 0 {
		t.Errorf("Safe = %q, %d; want %q", got, clipped, want)
	}
	if got := SafeLine("a\nb\U000E0041", 0); got != "a⟨U+000A⟩b⟨U+E0041⟩" {
		t.Errorf("SafeLine = %q", got)
	}
	// Clipping never cuts an escape in two, and counts what it left out.
	s := strings.Repeat("x", 8) + "\u200b" + "tail"
	got, clipped = Safe(s, 10)
	if got != "xxxxxxxx…" || clipped != utf8.RuneCountInString("⟨U+200B⟩tail") {
		t.Errorf("Safe clipped = %q, %d", got, clipped)
	}
}

func TestContentText(t *testing.T) {
	for in, want := range map[string]string{
		`{"summary":"two\nlines"}`:             "two\nlines",
		`{"topic":"x","count":"3"}`:            "topic: x\ncount: 3",
		`{"urgent":true,"level":"high","n":4}`: "urgent: true\nlevel: high\nn: 4",
		`not json`:                             "not json",
	} {
		if got := contentText([]byte(in)); got != want {
			t.Errorf("contentText(%s) = %q, want %q", in, got, want)
		}
	}
}

// Every character that does not print as itself (controls, format
// characters, private use, unassigned code points, spaces other than
// U+0020) is made visible: the whole Basic Multilingual Plane, the tag
// and variation selector blocks and a sample of the other planes go
// through Safe at once, and what comes out is checked against a notion
// of "visible" written independently of the one Safe uses.
func TestSafeShowsEveryInvisibleCharacter(t *testing.T) {
	var b strings.Builder
	for r := rune(0); r < 0x110000; r++ {
		switch {
		case r >= 0xD800 && r <= 0xDFFF:
			continue
		case r > 0xFFFF && !(r >= 0xE0000 && r <= 0xE01EF) && r%61 != 0:
			continue
		}
		b.WriteRune(r)
		b.WriteByte(' ')
	}
	out, _ := Safe(b.String(), 0)
	for _, r := range out {
		if r != ' ' && r != '\n' && !isVisibleText(string(r)) {
			t.Errorf("U+%04X is rendered as itself", r)
		}
	}
	if !strings.Contains(out, "⟨U+E0041⟩") || !strings.Contains(out, "⟨U+200B⟩") {
		t.Error("tag and zero-width characters are not shown as escapes")
	}
}

// isVisibleText is a loose, independent notion of "prints as itself".
func isVisibleText(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S) && !unicode.Is(unicode.Variation_Selector, r)
}
