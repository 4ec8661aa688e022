package notify

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/bcpgw/bcpgw/internal/tui"
)

// What a notification says about an item comes from a Reader, which is
// attacker-controlled. It is shown the way the approval queue shows it
// (the same function: a phone must not show what the queue hides), and
// more carefully, since a chat app acts on text a terminal only prints:
//
//   - every character that is not plainly printable (zero-width, bidi
//     controls, tag characters, odd spaces, control characters) appears
//     as ⟨U+XXXX⟩, as in the queue (tui.Printable);
//   - links are defanged so that no chat app makes them clickable or
//     fetches a preview: hxxps://example[.]com, and a bare domain's dots
//     as [.];
//   - Slack's control characters (&, <, >) are escaped by the Slack
//     format, so text cannot form a link, a mention or a channel ping;
//   - it is clipped, with what was left out counted.

// Safe renders untrusted text for a notification: lines kept, every
// character that is not plainly printable made visible, links defanged,
// and clipped to at most limit runes (0: no limit). clipped is how many
// runes of the rendering were left out.
func Safe(s string, limit int) (out string, clipped int) {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = tui.Printable(l)
	}
	return clip(Defang(strings.Join(lines, "\n")), limit)
}

// SafeLine is Safe for a one-line place (a title, a list item): line
// breaks are made visible too.
func SafeLine(s string, limit int) string {
	out, _ := clip(Defang(tui.Printable(s)), limit)
	return out
}

var (
	schemeHTTP  = regexp.MustCompile(`(?i)\b(h)tt(ps?)://`)
	schemeFTP   = regexp.MustCompile(`(?i)\b(f)t(ps?)://`)
	schemeOther = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]{0,30})://`)
	schemeBare  = regexp.MustCompile(`(?i)\b(javascript|vbscript|data|mailto|file|tel|sms):`)
	// A run of labels joined by dots; the full stops of other scripts
	// count, since some apps read them as dots in a host name.
	dotted = regexp.MustCompile(`[\p{L}\p{N}_-]+(?:[.\x{3002}\x{FF0E}\x{FF61}][\p{L}\p{N}_-]+)+`)
	dots   = regexp.MustCompile(`[.\x{3002}\x{FF0E}\x{FF61}]`)
)

// Defang makes links in s inert: http(s):// becomes hxxp(s)://, another
// scheme's :// becomes [://], javascript: and the like [:], and the dots
// of anything that looks like a host name (its last label letters) or an
// IPv4 address become [.].
func Defang(s string) string {
	s = schemeHTTP.ReplaceAllString(s, "${1}xx${2}://")
	s = schemeFTP.ReplaceAllString(s, "${1}x${2}://")
	s = schemeOther.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(strings.ToLower(m), "hxxp") || strings.HasPrefix(strings.ToLower(m), "fxp") {
			return m
		}
		return strings.TrimSuffix(m, "://") + "[://]"
	})
	s = schemeBare.ReplaceAllString(s, "${1}[:]")
	return dotted.ReplaceAllStringFunc(s, func(m string) string {
		labels := dots.Split(m, -1)
		last := labels[len(labels)-1]
		if !hostLike(last) && !ipv4Like(labels) {
			return m
		}
		return dots.ReplaceAllString(m, "[.]")
	})
}

// hostLike reports whether label can end a host name: two or more
// letters (a top-level domain).
func hostLike(label string) bool {
	if len(label) > 4 && strings.EqualFold(label[:4], "xn--") {
		return true // a punycode top-level domain
	}
	n := 0
	for _, r := range label {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 0x7f && !isDigit(r)) {
			return false
		}
		n++
	}
	return n >= 2
}

func ipv4Like(labels []string) bool {
	if len(labels) != 4 {
		return false
	}
	for _, l := range labels {
		if l == "" || len(l) > 3 {
			return false
		}
		for _, r := range l {
			if !isDigit(r) {
				return false
			}
		}
	}
	return true
}

func isDigit(r rune) bool { return r >= '0' && r <= '9' }

// clip cuts s to limit runes, never inside a ⟨U+XXXX⟩, and ends it with
// "…".
func clip(s string, limit int) (string, int) {
	n := utf8.RuneCountInString(s)
	if limit <= 0 || n <= limit {
		return s, 0
	}
	cut, i := 0, 0
	for cut = range s {
		if i == limit-1 {
			break
		}
		i++
	}
	kept := s[:cut]
	if open := strings.LastIndex(kept, "⟨"); open > strings.LastIndex(kept, "⟩") {
		kept = kept[:open]
	}
	return kept + "…", n - utf8.RuneCountInString(kept)
}
