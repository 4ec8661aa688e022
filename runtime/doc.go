// Package runtime will hold the wire protocol between the gateway and an
// agent's runtime process: the message types of PROTOCOL.md section 4, a
// line codec with limits, and a small SDK for writing runtimes in Go.
//
// It knows message shapes only and imports nothing else of bcpgw's.
package runtime
