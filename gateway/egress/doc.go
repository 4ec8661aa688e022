// Package egress is the gateway's egress proxy: the only way out of a
// sandbox whose definition lists network destinations
// (sandbox.network: [api.openai.com, "*.example.org:443", ...], PROTOCOL.md
// section 8).
//
// One [Proxy] serves one agent on one unix socket. Identity comes from
// the socket a connection arrived on, as it comes from the pipe for the
// wire protocol: nothing a runtime sends can make it another agent. The
// socket is made 0600 before it is reachable; the caller chowns it to the
// sandbox's user and binds it into the sandbox, where a forwarder relays
// each TCP connection to 127.0.0.1:3128 (HTTP_PROXY, HTTPS_PROXY) to it.
//
// It speaks HTTP/1.1 proxying, which every HTTP client knows:
//
//   - CONNECT host:port opens a tunnel (HTTPS, and anything else over
//     TCP). Bytes the client sends before the answer (a TLS ClientHello)
//     are forwarded, not lost.
//   - A request in absolute form (GET http://host:port/path) is forwarded
//     to its origin with the hop-by-hop headers (RFC 9110 section 7.6.1,
//     and those the Connection header names) and every Proxy-* header
//     removed, and its answer passed back. One request per connection:
//     the answer says Connection: close, so that a connection is one
//     destination and one [Record].
//
// A destination must match the agent's list (package netpolicy), else the
// client is answered 403. A malformed request is answered 400 (431 for an
// oversized header, 408 when none comes in time); a destination that
// cannot be reached, 502 (504 on a timeout); a connection over the
// concurrency cap, 503. Each refusal carries a Proxy-Status header
// (RFC 9209) with the error type and a short reason, the same words as in
// the body, so a client and an operator can tell a refusal of the proxy
// from an answer of the destination.
//
// # Names and addresses
//
// A destination allowed by name is looked up by the proxy, and the
// address it dials is the one it checked, never the name again. A name
// that resolves to a loopback, link-local (169.254.169.254, the cloud
// metadata service, among them), unspecified, broadcast or multicast
// address is refused: DNS is not the operator's word, and a name under a
// wildcard can be made to point anywhere (DNS rebinding). Private
// addresses (RFC 1918, unique local IPv6, shared 100.64/10) are allowed
// by name: a company's own services live there, and the operator named
// them. The gateway's host itself (loopback) is reachable only through an
// entry that is an IP address (127.0.0.1:11434 for a local Ollama) or the
// name localhost, which is not looked up but means 127.0.0.1 and ::1.
//
// # Bounds
//
// A request's head is limited in size (Config.MaxHeaderBytes) and in time
// (Config.HandshakeTimeout); dialling (lookup included) is limited by
// Config.DialTimeout; a connection that carries no byte in either
// direction for Config.IdleTimeout is closed; at most Config.MaxConns
// connections are served at once, a few more are answered 503, and any
// beyond those are closed unanswered.
//
// Every goroutine has an owner: Serve owns one per connection and waits
// for them, and each connection's goroutine owns the second goroutine of
// its tunnel. Close (or the end of Serve's context) closes the socket and
// every open connection, and returns when every connection has ended and
// has been reported to Config.OnConn.
package egress
