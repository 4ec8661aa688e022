// Package runtime is the wire protocol between the gateway and an agent's
// runtime process, and a small SDK for writing runtimes in Go.
//
// A runtime is a subprocess. The gateway writes one JSON object per line to
// its stdin and reads one JSON object per line from its stdout; stderr is
// free-form log text. Every object has a "type" field. The message types
// and field names follow the existing BCP runtime protocol, so a runtime
// written for it works unchanged; fields documented as new are additions
// a runtime may ignore.
//
// This package knows message shapes only: it imports the bcp package for
// the spec shapes carried in messages, and nothing else of bcpgw.
//
// Query specs are decoded strictly ([QuerySpec], [DecodeQueryRequest]): an
// unknown, duplicate or mistyped key is a problem with its path, never
// dropped, because a dropped key can be a dropped limit. Specs are read in
// the protocol's spelling and in TriOnyx's (a question's "name" and
// "format", an enum's "options"), and written to Readers in both
// ([Query], [ActiveSubscription]), so a runtime written for either reads
// the whole spec. [Result] reads token counts from usage{} or from the top
// level, where TriOnyx's runtime writes them.
//
// The codec ([Decoder], [Encoder]) bounds every line. A line longer than
// the limit, or one that is not a JSON object with a string "type", is
// reported as a *[LineError] and skipped: the stream never loses its place.
package runtime
