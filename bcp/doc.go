// Package bcp is the pure core of the Bandwidth-Constrained Protocol: the
// shapes a Controller may ask for (specs), what each shape can carry at most
// (bits), and the validation that stands between an untrusted Reader's bytes
// and a clean Controller.
//
// Everything here is a pure function of its arguments: no I/O, no goroutines
// and no mutable package state, so the package is easy to read, test and
// fuzz, and the gateway can call it from any goroutine.
//
// # Categories
//
// Cat-1 specs are typed fields (boolean, enum, bounded integer): a few bits,
// no room for an injected sentence. Cat-2 specs are short answers with word
// limits and formats. Cat-3 is a free-text summary that a person approves
// before it is delivered.
//
// # Validation
//
// [Validate] parses a response strictly (one JSON object, no duplicate keys
// at any depth, at most [MaxDepth] levels, at most [MaxResponseBytes] bytes),
// checks it against the spec, and returns the normalized response in the
// spec's field order. The Controller only ever sees that normalized value,
// never the Reader's raw bytes.
//
// Text is checked for hygiene before it is normalized: control characters
// (only newline is allowed, and only in Cat-3), Unicode format characters
// (zero-width characters, bidi controls, the tag block used for invisible
// "ASCII smuggling"), private-use characters, noncharacters, the
// supplementary variation selectors (another invisible carrier) and U+FFFD
// (what a broken escape such as a lone surrogate decodes to) are refused,
// never stripped.
//
// Normalization is Unicode NFC, runs of white space collapsed to one space,
// and trimming; Cat-3 keeps line breaks (at most one blank line in a row).
//
// Where the protocol text is silent this package chooses, and documents:
//   - A word is at most [MaxWordRunes] characters long. Bits are charged at
//     11 per word, an estimate for ordinary words; without a bound on word
//     length one "word" (unspaced script, base64) could carry any amount,
//     so the cap keeps the real maximum finite and close to the estimate.
//   - short_list items are separated by commas, none may be empty, and the
//     normalized list is joined with ", ".
//   - person_name also accepts the typographic apostrophe U+2019 and
//     combining marks, so names such as O’Brien or decomposed accents pass.
//   - integer answers (Cat-2 format integer) accept a JSON integer or a
//     string with JSON integer syntax and are delivered as a canonical
//     decimal string.
//   - A Cat-3 response may use the key "response" as an alias; it is always
//     delivered as "summary".
//
// # Anomalies
//
// Cat-2 and Cat-3 text is scanned for signs of an injection attempt
// (instruction-like language, URLs, code fences, Markdown links, HTML tags,
// chat-role markers, long base64-like runs). Anomalies do not refuse a
// response by themselves: a Cat-2 spec's [OnAnomaly] policy decides, and
// Cat-3 shows them to the reviewer.
package bcp
