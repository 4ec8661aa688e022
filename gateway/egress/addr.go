package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bcpgw/bcpgw/internal/netpolicy"
)

// target is the destination a client asked for.
type target struct {
	host string     // lower-case name without a trailing dot, or the address
	addr netip.Addr // set when host is an address (IPv4-mapped unmapped)
	port int
}

func (t target) String() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// parseTarget reads host:port as a CONNECT request or a URL's authority
// writes it. defaultPort is used when the port is absent (0: required).
// Names must be names a list could hold (netpolicy.CheckName): anything
// else is malformed, and is never looked up.
func parseTarget(hostport string, defaultPort int) (target, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		if defaultPort == 0 || !strings.Contains(err.Error(), "missing port") {
			return target{}, fmt.Errorf("%q is not host:port", clip(hostport))
		}
		host, portStr = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), strconv.Itoa(defaultPort)
	}
	port := 0
	for _, r := range portStr {
		if r < '0' || r > '9' || port > 65535 {
			port = -1
			break
		}
		port = port*10 + int(r-'0')
	}
	if portStr == "" || port < 1 || port > 65535 {
		return target{}, fmt.Errorf("%q: the port is not a number from 1 to 65535", clip(hostport))
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return target{}, fmt.Errorf("%q: an address with a zone is not a destination", clip(hostport))
		}
		a = a.Unmap()
		return target{host: a.String(), addr: a, port: port}, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if err := netpolicy.CheckName(name); err != nil {
		return target{}, fmt.Errorf("%q: %v", clip(host), err)
	}
	return target{host: name, port: port}, nil
}

// clip shortens what a client wrote for a message or a record.
func clip(s string) string {
	const most = 100
	if len(s) > most {
		return s[:most] + "..."
	}
	return s
}

// Address ranges a name may not lead to, whatever the list says: the
// gateway's host (loopback, and the unspecified address, which reaches
// it), link-local addresses (the cloud metadata service at
// 169.254.169.254 among them), broadcast and multicast. Private ranges
// are not here: see the package doc.
var forbiddenByName = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `unspecified ("this network")`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local, cloud metadata"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	// The local-use NAT64 prefix (RFC 8215) embeds IPv4 in a way only
	// the local network knows: judged unknowable, refused.
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
}

// hostAddr reports whether a is an address of one of this host's own
// interfaces: a name leading there reaches the services the gateway's
// host listens to on every address (0.0.0.0), loopback's twins.
func hostAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// nat64 carries an IPv4 address that a NAT64 gateway connects to: it is
// judged by that address.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// forbidden returns why a name may not lead to a, or "".
func forbidden(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	for _, f := range forbiddenByName {
		if f.prefix.Contains(a) {
			return f.what
		}
	}
	if nat64.Contains(a) {
		b := a.As16()
		if why := forbidden(netip.AddrFrom4([4]byte(b[12:16]))); why != "" {
			return "NAT64 of " + why
		}
	}
	return ""
}

// loopback is what the name localhost means. It is not looked up: the
// resolver's answer for it is not the operator's word (RFC 6761 6.3).
var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}

// refusal is why a connection is not made: the status and Proxy-Status
// error type (RFC 9209) the client is answered, the outcome, and the
// reason in words.
type refusal struct {
	status  int
	errType string
	outcome Outcome
	reason  string
}

func (r *refusal) Error() string { return r.reason }

// addresses returns the addresses to dial for t, which the list allowed:
// t's own address, loopback for localhost, or the checked answer of the
// resolver, IPv4 first.
func (p *Proxy) addresses(ctx context.Context, t target) ([]netip.Addr, *refusal) {
	switch {
	case t.addr.IsValid():
		return []netip.Addr{t.addr}, nil
	case t.host == "localhost":
		return loopback, nil
	}
	addrs, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", t.host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no address")
	}
	if err != nil {
		r := &refusal{502, "dns_error", OutcomeFailed, fmt.Sprintf("cannot look up %s: %v", t.host, err)}
		if isTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
			r.status, r.errType = 504, "dns_timeout"
		}
		return nil, r
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		a = a.Unmap()
		// One forbidden answer refuses the name: a name that mixes a
		// public and a loopback address is a rebinding attempt, not a
		// service.
		why := forbidden(a)
		if why == "" && hostAddr(a) {
			why = "an address of the gateway's own host"
		}
		if why != "" {
			return nil, &refusal{403, "destination_ip_prohibited", OutcomeRefused,
				fmt.Sprintf("%s resolves to %s (%s): a name may not lead there; list the address itself to allow it", t.host, a, why)}
		}
		out = append(out, a)
	}
	// IPv4 first: a host without IPv6 routes fails an IPv6 dial only
	// after its timeout.
	slices.SortStableFunc(out, func(a, b netip.Addr) int { return cmp.Compare(btoi(a.Is6()), btoi(b.Is6())) })
	return slices.Compact(out), nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// dial connects to the first of addrs that answers before ctx's
// deadline, giving each a fair share of what is left (at least 2s, as
// net.Dialer does).
func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, netip.AddrPort, *refusal) {
	var firstErr error
	var first netip.AddrPort
	for i, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(port))
		actx := ctx
		if left := len(addrs) - i; left > 1 {
			if deadline, ok := ctx.Deadline(); ok {
				share := max(time.Until(deadline)/time.Duration(left), 2*time.Second)
				var acancel context.CancelFunc
				actx, acancel = context.WithTimeout(ctx, share)
				defer acancel()
			}
		}
		c, err := p.cfg.Dial(actx, "tcp", ap.String())
		if err == nil {
			return c, ap, nil
		}
		if firstErr == nil {
			firstErr, first = err, ap
		}
		if ctx.Err() != nil {
			break
		}
	}
	r := &refusal{502, "destination_unavailable", OutcomeFailed, fmt.Sprintf("cannot connect to %s: %v", first, firstErr)}
	switch {
	case errors.Is(firstErr, syscall.ECONNREFUSED):
		r.errType = "connection_refused"
	case errors.Is(firstErr, context.DeadlineExceeded) || isTimeout(firstErr):
		r.status, r.errType = 504, "connection_timeout"
	case errors.Is(firstErr, syscall.ENETUNREACH) || errors.Is(firstErr, syscall.EHOSTUNREACH):
		r.errType = "destination_ip_unroutable"
	}
	return nil, first, r
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
