package bcp

import (
	"regexp"
	"strings"
)

// AnomalyCode names a kind of suspicious content in Cat-2 or Cat-3 text.
type AnomalyCode string

// The anomaly codes.
const (
	AnomalyInstruction  AnomalyCode = "instruction"   // ignore, disregard, you must, system prompt, ...
	AnomalyURL          AnomalyCode = "url"           // scheme://..., www.example.org, javascript:
	AnomalyCodeFence    AnomalyCode = "code_fence"    // ``` or ~~~
	AnomalyMarkdownLink AnomalyCode = "markdown_link" // [text](target), ![alt](src), [ref]: target
	AnomalyHTMLTag      AnomalyCode = "html_tag"      // <tag ...>, </tag>, <!--
	AnomalyRoleMarker   AnomalyCode = "role_marker"   // system:, assistant:, <|im_start|>, [INST]
	AnomalyBase64       AnomalyCode = "base64"        // a long run of base64-like characters
)

// Anomaly is one kind of suspicious content found in one answer. Field is
// the question id (Cat-2) or "summary" (Cat-3); Match is a short excerpt of
// the normalized text that triggered it.
type Anomaly struct {
	Code  AnomalyCode `json:"code"`
	Field string      `json:"field"`
	Match string      `json:"match"`
}

// detector finds one kind of anomaly.
type detector struct {
	code AnomalyCode
	re   *regexp.Regexp
	// accept, when set, filters matches (a regexp cannot say "contains a
	// digit and a letter" compactly).
	accept func(string) bool
	// hints are literals, in lower case, at least one of which every match
	// contains. Go's regexp engine has no DFA, so checking for them first
	// (strings.Contains is fast) skips most regexp runs on clean text.
	// Empty means always run the regexp.
	hints []string
	// words, when set, replaces hints: the regexp runs only if one of the
	// text's words (runs of letters, lower-cased) passes it.
	words func(word string) bool
}

// detectors run in this order; each reports at most once per answer. All
// are RE2 expressions, which run in time linear in the input, so hostile
// text cannot make detection slow.
var detectors = []detector{
	// Word stems catch inflections (ignoring, disregarded, overrides);
	// \s+ between the words of a phrase catches line breaks in Cat-3.
	{code: AnomalyInstruction, re: regexp.MustCompile(`(?i)\b(?:ignor|disregard|forget|forgot|overrid|pretend|jailbreak)\w*|\binstead\b|\byou\s+(?:should|must|need\s+to|have\s+to|are\s+now|will\s+now|shall)\b|\bsystem\s+prompt|\b(?:previous|prior|above|earlier|new|these)\s+instructions?\b|\bfrom\s+now\s+on\b|\bact\s+as\b|\bdo\s+not\s+(?:tell|reveal|mention|inform)\b`), words: instructionWord},
	// A bare domain counts when a path follows it (evil.example/x).
	{code: AnomalyURL, re: regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]{1,15}://\S+|\bwww\.[a-z0-9-]+\.[a-z]{2,}\S*|\b(?:javascript|vbscript|data):[^\s,;]+|\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}/\S*`),
		hints: []string{"://", "www.", "script:", "data:", "/"}},
	{code: AnomalyCodeFence, re: regexp.MustCompile("```|~~~"), hints: []string{"```", "~~~"}},
	{code: AnomalyMarkdownLink, re: regexp.MustCompile(`!?\[[^\]\n]{0,200}\]\([^)\n]{0,500}\)|(?m)^\s*\[[^\]\n]{1,200}\]:\s*\S`), hints: []string{"]"}},
	// After the tag name, white space or a slash (<img/src=x onerror=...>).
	{code: AnomalyHTMLTag, re: regexp.MustCompile(`</?[A-Za-z][A-Za-z0-9:-]*(?:[\s/][^<>]{0,500})?>|<!--`), hints: []string{"<"}},
	{code: AnomalyRoleMarker, re: regexp.MustCompile(`(?i)(?:^|\n)\s*(?:system|assistant|user|human|developer|tool)\s*:|\b(?:system|assistant|developer)\s*:|<\||\|>|\[/?inst\]|<</?sys>>`),
		hints: []string{":", "<|", "|>", "inst]", "sys>>"}},
	{code: AnomalyBase64, re: regexp.MustCompile(`[A-Za-z0-9+/_-]{40,}={0,2}`), accept: looksEncoded}, // see hasLongWord
}

// looksEncoded accepts a long run only if it mixes letters and digits, so
// that a long hyphenated word is not flagged.
func looksEncoded(s string) bool {
	return strings.ContainsAny(s, "0123456789") &&
		strings.ContainsAny(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
}

// detectAnomalies returns the anomalies of one normalized answer.
func detectAnomalies(field, text string) []Anomaly {
	return detect(field, text, isASCII(text))
}

// detect runs the detectors, skipping those whose hints are absent when
// prefilter is set. The prefilter is only sound for ASCII text: (?i) in a
// regexp also folds characters such as U+017F (ſ) to s, which
// strings.ToLower leaves alone.
func detect(field, text string, prefilter bool) []Anomaly {
	var out []Anomaly
	lower := strings.ToLower(text)
	for _, d := range detectors {
		if prefilter && !d.mayMatch(lower, text) {
			continue
		}
		for _, m := range d.re.FindAllString(text, -1) {
			if d.accept == nil || d.accept(m) {
				out = append(out, Anomaly{Code: d.code, Field: field, Match: excerpt(strings.TrimSpace(m))})
				break
			}
		}
	}
	return out
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// hasLongWord reports whether s has a run of at least n bytes without
// white space.
func hasLongWord(s string, n int) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == ' ' || c == '\n' {
			run = 0
		} else if run++; run >= n {
			return true
		}
	}
	return false
}

// instructionStems and instructionWords are where every alternative of
// the instruction detector starts: a match begins at a word boundary with
// one of these stems, or with one of these whole words.
var (
	instructionStems = []string{"ignor", "disregard", "forget", "forgot", "overrid", "pretend", "jailbreak"}
	instructionWords = map[string]bool{
		"instead": true, "you": true, "system": true, "previous": true, "prior": true, "above": true,
		"earlier": true, "new": true, "these": true, "from": true, "act": true, "do": true,
	}
)

func instructionWord(w string) bool {
	if instructionWords[w] {
		return true
	}
	for _, s := range instructionStems {
		if strings.HasPrefix(w, s) {
			return true
		}
	}
	return false
}

// mayMatch is the prefilter: false only if the regexp cannot match.
func (d detector) mayMatch(lower, text string) bool {
	switch {
	case d.words != nil:
		for _, w := range strings.FieldsFunc(lower, func(r rune) bool { return r < 'a' || r > 'z' }) {
			if d.words(w) {
				return true
			}
		}
		return false
	case d.code == AnomalyBase64:
		return hasLongWord(text, 40)
	}
	return containsAny(lower, d.hints)
}

// containsAny reports whether s contains one of subs; no subs means yes.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return len(subs) == 0
}

// excerpt cuts s to at most maxQuoted characters.
func excerpt(s string) string {
	n := 0
	for i := range s {
		if n == maxQuoted {
			return s[:i] + "..."
		}
		n++
	}
	return s
}
