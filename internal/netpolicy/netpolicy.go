// Package netpolicy holds the grammar of the egress destinations an agent
// definition may allow (sandbox.network: [...]) and the match of one
// connection against them. The definitions loader checks the syntax with
// Parse; the gateway's egress proxy matches each connection with Allows.
//
// A destination is one of:
//
//	api.openai.com          a host name, any port
//	api.openai.com:443      a host name and one port
//	*.example.org           any name below example.org (not example.org itself), any port
//	*.example.org:443       the same, one port
//	127.0.0.1:11434         an IP address, with or without a port
//	[::1]:11434             an IPv6 address (brackets when a port follows)
//
// Names are compared case-insensitively, without a trailing dot. Names
// must be ASCII (write an internationalized name in its xn-- form), and
// a name whose last label is all digits ("127.1", "2130706433") is
// refused: no top-level domain is numeric, and some resolvers read such
// a name as an IPv4 address, which would let a name stand for an address
// the list does not show. An IP entry must be a unicast address: the
// unspecified and multicast addresses name no destination, and an IPv6
// zone (fe80::1%eth0) names an interface of the gateway's host, not a
// destination. An IPv4-mapped IPv6 address (::ffff:10.0.0.1) is its
// IPv4 address.
package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Destination is one allowed destination.
type Destination struct {
	// Host is the lower-case name without "*." (for a wildcard), or the
	// address in its canonical form.
	Host string
	// Wildcard: Host's subdomains match, Host itself does not.
	Wildcard bool
	// Addr is set when Host is an IP address.
	Addr netip.Addr
	// Port is 0 for any port.
	Port int
}

// String returns the destination as it would be written.
func (d Destination) String() string {
	h := d.Host
	if d.Wildcard {
		h = "*." + h
	}
	if d.Addr.Is6() && d.Port != 0 {
		h = "[" + h + "]"
	}
	if d.Port != 0 {
		h += ":" + strconv.Itoa(d.Port)
	}
	return h
}

// IsIP reports whether the destination names an address rather than a
// host name.
func (d Destination) IsIP() bool { return d.Addr.IsValid() }

// Parse reads one destination. The error says what is wrong in words an
// operator can act on.
func Parse(s string) (Destination, error) {
	raw := s
	s = strings.TrimSpace(s)
	if s == "" {
		return Destination{}, fmt.Errorf("empty destination")
	}
	if strings.Contains(s, "://") {
		return Destination{}, fmt.Errorf("%q: write a host or host:port, not a URL", raw)
	}
	if strings.ContainsAny(s, "/?#@ ") {
		return Destination{}, fmt.Errorf("%q: write a host or host:port (no path, user or spaces)", raw)
	}
	if strings.Contains(s, "%") {
		return Destination{}, fmt.Errorf("%q: an IPv6 zone (%%name) is not allowed: it names an interface of the gateway's host", raw)
	}
	// A bare IPv6 address has colons but no port and no brackets.
	if a, err := netip.ParseAddr(s); err == nil && a.Is6() {
		return addrDestination(raw, a, 0)
	}
	host, port := s, 0
	if i := strings.LastIndex(s, ":"); i >= 0 && !strings.HasSuffix(s, "]") {
		p, err := parsePort(s[i+1:])
		if err != nil {
			return Destination{}, fmt.Errorf("%q: %v", raw, err)
		}
		host, port = s[:i], p
	}
	if strings.HasPrefix(host, "[") || strings.HasSuffix(host, "]") {
		if !strings.HasPrefix(host, "[") || !strings.HasSuffix(host, "]") {
			return Destination{}, fmt.Errorf("%q: unbalanced brackets", raw)
		}
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil || !a.Is6() {
			return Destination{}, fmt.Errorf("%q: %s is not an IPv6 address (brackets are for IPv6 only)", raw, host)
		}
		return addrDestination(raw, a, port)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Is6() {
			return Destination{}, fmt.Errorf("%q: put an IPv6 address in brackets before a port, e.g. [::1]:8080", raw)
		}
		return addrDestination(raw, a, port)
	}
	d := Destination{Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		d.Wildcard, host = true, rest
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if err := CheckName(host); err != nil {
		return Destination{}, fmt.Errorf("%q: %v", raw, err)
	}
	if d.Wildcard && !strings.Contains(host, ".") {
		return Destination{}, fmt.Errorf("%q: a wildcard needs a domain with at least two labels (*.example.org), not a top-level domain", raw)
	}
	d.Host = host
	return d, nil
}

// addrDestination is the destination of address a: IPv4-mapped addresses
// are unmapped, since the connection goes to the IPv4 address (and a
// client may write either form), and addresses that name no single
// destination are refused.
func addrDestination(raw string, a netip.Addr, port int) (Destination, error) {
	a = a.Unmap()
	switch {
	case a.IsUnspecified():
		return Destination{}, fmt.Errorf("%q: the unspecified address is not a destination (write 127.0.0.1 for this host)", raw)
	case a.IsMulticast():
		return Destination{}, fmt.Errorf("%q: a multicast address is not a destination", raw)
	}
	return Destination{Host: a.String(), Addr: a, Port: port}, nil
}

// parsePort reads a port: decimal digits only (strconv.Atoi would take
// "+80"), from 1 to 65535.
func parsePort(s string) (int, error) {
	p := 0
	for _, r := range s {
		if r < '0' || r > '9' || p > 65535 {
			p = -1
			break
		}
		p = p*10 + int(r-'0')
	}
	if s == "" || p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return p, nil
}

// CheckName reports whether h is a host name a destination may name:
// lower-case ASCII labels of letters, digits, '-' and '_', the last one
// not all digits (see the package doc), without a trailing dot. Parse
// applies it to the names it reads; the egress proxy applies it to the
// names clients ask for, so that a name no list could hold is refused as
// malformed rather than looked up.
func CheckName(h string) error {
	if h == "" || len(h) > 253 {
		return fmt.Errorf("not a host name")
	}
	labels := strings.Split(h, ".")
	for _, label := range labels {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("not a host name (empty or overlong label)")
		}
		if strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
			return fmt.Errorf("not a host name (a label starts or ends with '-')")
		}
		for _, r := range label {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			case r == '*':
				return fmt.Errorf("'*' is allowed only as a leading \"*.\"")
			case r >= 'A' && r <= 'Z':
				return fmt.Errorf("not a host name (upper-case %q: names are compared in lower case)", r)
			case r > 0x7f:
				return fmt.Errorf("not a host name (%q: write an internationalized name in its ASCII xn-- form)", r)
			default:
				return fmt.Errorf("not a host name (%q)", r)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return fmt.Errorf("not a host name (the last label is a number: write an IP address in its usual form, e.g. 127.0.0.1)")
	}
	return nil
}

// ParseList reads every destination, returning the first error.
func ParseList(list []string) ([]Destination, error) {
	out := make([]Destination, 0, len(list))
	for _, s := range list {
		d, err := Parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Match reports whether a connection to host:port is this destination.
// host is a name or an address as the client wrote it (IPv6 with or
// without brackets). A port outside 1-65535, a name that is not one
// (CheckName, after lower-casing and dropping a trailing dot) and an
// address with a zone match nothing.
func (d Destination) Match(host string, port int) bool {
	if port < 1 || port > 65535 || (d.Port != 0 && d.Port != port) {
		return false
	}
	if h, ok := strings.CutPrefix(host, "["); ok {
		if host, ok = strings.CutSuffix(h, "]"); !ok {
			return false
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return d.Addr.IsValid() && a.Zone() == "" && d.Addr == a.Unmap()
	}
	if d.Addr.IsValid() {
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if CheckName(host) != nil {
		return false
	}
	if d.Wildcard {
		return strings.HasSuffix(host, "."+d.Host)
	}
	return host == d.Host
}

// Allows returns the first destination of list that host:port matches.
func Allows(list []Destination, host string, port int) (Destination, bool) {
	for _, d := range list {
		if d.Match(host, port) {
			return d, true
		}
	}
	return Destination{}, false
}
