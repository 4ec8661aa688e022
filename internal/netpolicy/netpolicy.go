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
// Names are compared case-insensitively, without a trailing dot.
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
	host, port := s, 0
	// A bare IPv6 address has colons but no port.
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil && (a.Is6() || !strings.Contains(s, ":")) {
		return Destination{Host: a.Unmap().String(), Addr: a.Unmap()}, nil
	}
	if i := strings.LastIndex(s, ":"); i >= 0 {
		p, err := strconv.Atoi(s[i+1:])
		if err != nil || p < 1 || p > 65535 {
			return Destination{}, fmt.Errorf("%q: port %q is not a number from 1 to 65535", raw, s[i+1:])
		}
		host, port = s[:i], p
	}
	if strings.HasPrefix(host, "[") != strings.HasSuffix(host, "]") {
		return Destination{}, fmt.Errorf("%q: unbalanced brackets", raw)
	}
	if strings.HasPrefix(host, "[") {
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil || !a.Is6() {
			return Destination{}, fmt.Errorf("%q: %s is not an IPv6 address", raw, host)
		}
		return Destination{Host: a.String(), Addr: a, Port: port}, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Is6() {
			return Destination{}, fmt.Errorf("%q: put an IPv6 address in brackets before a port, e.g. [::1]:8080", raw)
		}
		return Destination{Host: a.String(), Addr: a, Port: port}, nil
	}
	d := Destination{Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		d.Wildcard, host = true, rest
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if err := checkName(host); err != nil {
		return Destination{}, fmt.Errorf("%q: %v", raw, err)
	}
	if d.Wildcard && !strings.Contains(host, ".") {
		return Destination{}, fmt.Errorf("%q: a wildcard needs a domain with at least two labels (*.example.org), not a top-level domain", raw)
	}
	d.Host = host
	return d, nil
}

// checkName accepts DNS names: labels of letters, digits, '-' and '_'.
func checkName(h string) error {
	if h == "" || len(h) > 253 {
		return fmt.Errorf("not a host name")
	}
	for _, label := range strings.Split(h, ".") {
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
			default:
				return fmt.Errorf("not a host name (%q)", r)
			}
		}
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
// host is a name or an address as the client wrote it.
func (d Destination) Match(host string, port int) bool {
	if d.Port != 0 && d.Port != port {
		return false
	}
	host = strings.Trim(host, "[]")
	if a, err := netip.ParseAddr(host); err == nil {
		return d.Addr.IsValid() && d.Addr == a.Unmap()
	}
	if d.Addr.IsValid() {
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
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
