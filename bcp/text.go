package bcp

import (
	"fmt"
	"net/mail"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// MaxWordRunes is the longest a single word may be, in characters. See the
// package documentation for why words are bounded at all.
const MaxWordRunes = 48

// checkHygiene refuses text that carries characters a person cannot see or
// that can steer a model or a terminal: control characters (newline is
// allowed only when allowNewline), format characters (Cf: zero-width
// characters, bidi controls, the tag block), private-use characters,
// noncharacters, supplementary variation selectors and U+FFFD.
func checkHygiene(s string, allowNewline bool) error {
	pos := 0
	for _, r := range s {
		pos++
		var what string
		switch {
		case r >= 0x20 && r < 0x7f:
			continue // printable ASCII: the common case, no table lookups
		case r == '\n' && allowNewline:
			continue
		case r == utf8.RuneError:
			what = "a replacement character (from a broken escape such as a lone surrogate)"
		case unicode.Is(unicode.Cc, r):
			what = "a control character"
		case unicode.Is(unicode.Cf, r), r >= 0xE0000 && r <= 0xE007F:
			what = "an invisible format character"
		case unicode.Is(unicode.Co, r):
			what = "a private-use character"
		case unicode.Is(unicode.Variation_Selector, r):
			// All of them: even VS1-16 carry hidden bits, four per
			// character; an emoji reads the same without one.
			what = "an invisible variation selector"
		case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r), r == 0x2800:
			// Characters that render as nothing or blank (combining
			// grapheme joiner, Hangul fillers, the blank braille pattern).
			what = "an invisible character"
		case r >= 0xFDD0 && r <= 0xFDEF, r&0xFFFE == 0xFFFE:
			what = "a Unicode noncharacter"
		default:
			continue
		}
		return fmt.Errorf("contains %s (U+%04X) at character %d", what, r, pos)
	}
	return nil
}

// normalizeLine applies NFC, collapses white-space runs to one space and
// trims.
func normalizeLine(s string) string { return collapseSpace(norm.NFC.String(s)) }

// collapseSpace collapses white-space runs to one space and trims.
func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

// normalizeText is normalizeLine for text that keeps its line breaks: each
// line is normalized, at most one blank line is kept in a row, and blank
// lines at either end are dropped.
func normalizeText(s string) string {
	var (
		out   []string
		blank = 0
	)
	for _, line := range strings.Split(norm.NFC.String(s), "\n") {
		text := collapseSpace(line) // already NFC: the whole text was
		if text == "" {
			blank++
			continue
		}
		if len(out) > 0 && blank > 0 {
			out = append(out, "")
		}
		blank = 0
		out = append(out, text)
	}
	return strings.Join(out, "\n")
}

// checkDelivered checks the text that will be delivered: hygiene once
// more (NFC's stream-safe form inserts U+034F after 30 combining marks),
// then the word limit and the per-word length bound.
func checkDelivered(text string, allowNewline bool, max int) error {
	if err := checkHygiene(text, allowNewline); err != nil {
		return fmt.Errorf("after normalization %w", err)
	}
	return checkWords(strings.Fields(text), max)
}

// checkWordCount refuses text with more than max words before any
// normalization is spent on it. NFC never adds or removes white space, so
// the count is the same as after normalization.
func checkWordCount(s string, max int) error {
	n, in := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			in = false
		} else if !in {
			in = true
			n++
		}
	}
	if n > max {
		return fmt.Errorf("has %d words; the limit is %d", n, max)
	}
	return nil
}

// checkWords enforces a word limit and the per-word length bound.
func checkWords(words []string, max int) error {
	if len(words) > max {
		return fmt.Errorf("has %d words; the limit is %d", len(words), max)
	}
	for i, w := range words {
		if n := utf8.RuneCountInString(w); n > MaxWordRunes {
			return fmt.Errorf("word %d is %d characters long; the limit is %d", i+1, n, MaxWordRunes)
		}
	}
	return nil
}

// integerSyntax is JSON's integer literal: no sign but '-', no leading
// zeros, no fraction, no exponent.
var integerSyntax = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// dateSyntax is the shape of an ISO 8601 calendar date; time.Parse then
// checks that the date exists.
var dateSyntax = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)

// parseInteger parses text with integer syntax within the optional bounds.
func parseInteger(text string, min, max *int64) (int64, error) {
	if !integerSyntax.MatchString(text) {
		return 0, fmt.Errorf("must be an integer, got %s", quote(text))
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("integer %s is out of range", quote(text))
	}
	if min != nil && n < *min {
		return 0, fmt.Errorf("%d is below the minimum %d", n, *min)
	}
	if max != nil && n > *max {
		return 0, fmt.Errorf("%d is above the maximum %d", n, *max)
	}
	return n, nil
}

// checkFormat checks a normalized Cat-2 answer against its format and
// returns the delivered form.
func checkFormat(q Question, text string) (string, error) {
	switch q.Format {
	case "", ShortText:
		return text, nil
	case ShortList:
		// Empty items (a trailing comma, ",,") are dropped; at least one
		// item must remain.
		var items []string
		for _, item := range strings.Split(text, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
		if len(items) == 0 {
			return "", fmt.Errorf("is not a short_list: no non-empty item (items are separated by commas)")
		}
		return strings.Join(items, ", "), nil
	case PersonName:
		letters := 0
		for _, r := range text {
			switch {
			case unicode.IsLetter(r):
				letters++
			case unicode.Is(unicode.M, r), r == ' ', r == '-', r == '\'', r == '.', r == '\u2019':
			default:
				return "", fmt.Errorf("is not a person_name: %s is not allowed (letters, spaces, - ' . only)", quote(string(r)))
			}
		}
		if letters == 0 {
			return "", fmt.Errorf("is not a person_name: it has no letters")
		}
		return text, nil
	case Date:
		if !dateSyntax.MatchString(text) {
			return "", fmt.Errorf("is not a date (YYYY-MM-DD): %s", quote(text))
		}
		if _, err := time.Parse("2006-01-02", text); err != nil {
			return "", fmt.Errorf("is not a real date (YYYY-MM-DD): %s", quote(text))
		}
		return text, nil
	case Email:
		if !validEmail(text) {
			return "", fmt.Errorf("is not an email address: %s", quote(text))
		}
		return text, nil
	case IntegerFmt:
		n, err := parseInteger(text, q.Min, q.Max)
		if err != nil {
			return "", err
		}
		return strconv.FormatInt(n, 10), nil
	}
	return "", fmt.Errorf("unknown format %q", q.Format)
}

var (
	emailLocal = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$")
	emailLabel = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	emailTLD   = regexp.MustCompile(`^[A-Za-z]{2,63}$`)
)

// validEmail accepts a bare ASCII address local@domain.tld: no display
// name, no comments, no quoted local part, no IP literal.
func validEmail(s string) bool {
	if len(s) > 254 || strings.Count(s, "@") != 1 {
		return false
	}
	if a, err := mail.ParseAddress(s); err != nil || a.Address != s || a.Name != "" {
		return false
	}
	local, domain, _ := strings.Cut(s, "@")
	if len(local) > 64 || !emailLocal.MatchString(local) {
		return false
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 || !emailTLD.MatchString(labels[len(labels)-1]) {
		return false
	}
	for _, l := range labels {
		if !emailLabel.MatchString(l) {
			return false
		}
	}
	return true
}
