package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	ip := netip.MustParseAddr
	tests := []struct {
		in   string
		want Destination
		str  string // String(), when it differs from in
	}{
		{"api.openai.com", Destination{Host: "api.openai.com"}, ""},
		{"api.openai.com:443", Destination{Host: "api.openai.com", Port: 443}, ""},
		{"API.OpenAI.com.", Destination{Host: "api.openai.com"}, "api.openai.com"},
		{"  api.openai.com:443 ", Destination{Host: "api.openai.com", Port: 443}, "api.openai.com:443"},
		{"localhost", Destination{Host: "localhost"}, ""},
		{"localhost:11434", Destination{Host: "localhost", Port: 11434}, ""},
		{"my_host.internal", Destination{Host: "my_host.internal"}, ""},
		{"xn--bcher-kva.de", Destination{Host: "xn--bcher-kva.de"}, ""},
		{"web1.example.org", Destination{Host: "web1.example.org"}, ""},
		{"*.example.org", Destination{Host: "example.org", Wildcard: true}, ""},
		{"*.Example.ORG:443", Destination{Host: "example.org", Wildcard: true, Port: 443}, "*.example.org:443"},
		{"127.0.0.1", Destination{Host: "127.0.0.1", Addr: ip("127.0.0.1")}, ""},
		{"127.0.0.1:11434", Destination{Host: "127.0.0.1", Addr: ip("127.0.0.1"), Port: 11434}, ""},
		{"10.1.2.3:65535", Destination{Host: "10.1.2.3", Addr: ip("10.1.2.3"), Port: 65535}, ""},
		{"::1", Destination{Host: "::1", Addr: ip("::1")}, ""},
		{"[::1]", Destination{Host: "::1", Addr: ip("::1")}, "::1"},
		{"[::1]:11434", Destination{Host: "::1", Addr: ip("::1"), Port: 11434}, ""},
		{"2001:DB8::1", Destination{Host: "2001:db8::1", Addr: ip("2001:db8::1")}, "2001:db8::1"},
		// An IPv4-mapped address is its IPv4 address, with or without a port.
		{"::ffff:10.0.0.1", Destination{Host: "10.0.0.1", Addr: ip("10.0.0.1")}, "10.0.0.1"},
		{"[::ffff:10.0.0.1]:80", Destination{Host: "10.0.0.1", Addr: ip("10.0.0.1"), Port: 80}, "10.0.0.1:80"},
		{"169.254.169.254:80", Destination{Host: "169.254.169.254", Addr: ip("169.254.169.254"), Port: 80}, ""},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
		str := tt.str
		if str == "" {
			str = tt.in
		}
		if got.String() != str {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.in, got.String(), str)
		}
		if got.IsIP() != tt.want.Addr.IsValid() {
			t.Errorf("Parse(%q).IsIP() = %v", tt.in, got.IsIP())
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in, want string // want: in the error
	}{
		{"", "empty destination"},
		{"   ", "empty destination"},
		{"https://api.openai.com", "not a URL"},
		{"api.openai.com/v1", "no path"},
		{"user@host", "no path, user or spaces"},
		{"a b", "no path, user or spaces"},
		{"host:", `port "" is not a number`},
		{"host:0", `port "0"`},
		{"host:65536", `port "65536"`},
		{"host:+80", `port "+80"`},
		{"host:-1", `port "-1"`},
		{"host:http", `port "http"`},
		{"host:99999999999999999999", "is not a number from 1 to 65535"},
		{"host:80:90", "not a host name"},
		{"[::1", "unbalanced brackets"},
		{"::1]", "unbalanced brackets"},
		{"[::1:80", "unbalanced brackets"},
		{"[1.2.3.4]", "brackets are for IPv6 only"},
		{"[1.2.3.4]:80", "brackets are for IPv6 only"},
		{"[example.org]:80", "is not an IPv6 address"},
		{"[]:80", "is not an IPv6 address"},
		{"::1:80x", `port "80x"`},
		{"fe80::1%eth0", "zone"},
		{"[fe80::1%eth0]:80", "zone"},
		{"0.0.0.0", "unspecified"},
		{"0.0.0.0:8080", "unspecified"},
		{"::", "unspecified"},
		{"[::]:80", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"[ff02::1]:80", "multicast"},
		{":80", "not a host name"},
		{".", "not a host name"},
		{"a..b", "empty or overlong label"},
		{strings.Repeat("a", 64) + ".org", "empty or overlong label"},
		{strings.Repeat("a.", 127) + "org", "not a host name"},
		{"-a.org", "starts or ends with '-'"},
		{"a-.org", "starts or ends with '-'"},
		{"bücher.de", "xn--"},
		{"a!b.org", "not a host name"},
		{"*", "allowed only as a leading"},
		{"*.*.example.org", "allowed only as a leading"},
		{"a*.example.org", "allowed only as a leading"},
		{"*.com", "a wildcard needs a domain with at least two labels"},
		{"*.", "not a host name"},
		// Numbers that some resolvers read as IPv4 addresses.
		{"127.1", "the last label is a number"},
		{"2130706433", "the last label is a number"},
		{"2130706433:80", "the last label is a number"},
		{"0x7f.1", "the last label is a number"},
		{"01.2.3.4", "the last label is a number"},
		{"*.1.2.3", "the last label is a number"},
		{"1.2.3.4.5", "the last label is a number"},
	}
	for _, tt := range tests {
		d, err := Parse(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, %v; want an error with %q", tt.in, d, err, tt.want)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		dest, host string
		port       int
		want       bool
	}{
		{"api.openai.com", "api.openai.com", 443, true},
		{"api.openai.com", "api.openai.com", 80, true},
		{"api.openai.com", "API.OPENAI.COM.", 443, true},
		{"api.openai.com", "x.api.openai.com", 443, false},
		{"api.openai.com", "openai.com", 443, false},
		{"api.openai.com", "api.openai.com.evil.org", 443, false},
		{"api.openai.com:443", "api.openai.com", 443, true},
		{"api.openai.com:443", "api.openai.com", 80, false},
		{"*.example.org", "a.example.org", 443, true},
		{"*.example.org", "a.b.example.org", 1, true},
		{"*.example.org", "example.org", 443, false},
		{"*.example.org", "aexample.org", 443, false},
		{"*.example.org", "a.example.org.evil", 443, false},
		{"*.example.org", ".example.org", 443, false},   // not a name
		{"*.example.org", "a..example.org", 443, false}, // not a name
		{"*.example.org:443", "a.example.org", 443, true},
		{"*.example.org:443", "a.example.org", 8443, false},
		{"127.0.0.1:11434", "127.0.0.1", 11434, true},
		{"127.0.0.1:11434", "127.0.0.1", 11435, false},
		{"127.0.0.1:11434", "[::ffff:127.0.0.1]", 11434, true},
		{"127.0.0.1:11434", "::ffff:127.0.0.1", 11434, true},
		{"127.0.0.1:11434", "localhost", 11434, false}, // a name is not the address it resolves to
		{"localhost:11434", "127.0.0.1", 11434, false},
		{"localhost:11434", "localhost", 11434, true},
		{"::1", "[::1]", 8080, true},
		{"::1", "::1", 8080, true},
		{"::1", "[::1", 8080, false},
		{"[::1]:80", "[::1]", 81, false},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1", 80, true},
		{"fe80::1", "fe80::1%eth0", 80, false}, // Parse refuses zones; so does Match
		{"10.0.0.1", "10.0.0.1", 0, false},     // not a port
		{"10.0.0.1", "10.0.0.1", 65536, false},
		{"example.org", "", 80, false},
		{"example.org", "example.org", -1, false},
		{"a.example.org", "*.example.org", 443, false}, // a client cannot ask for a pattern
		{"a.example.org", "a.example.org", 443, true},
	}
	for _, tt := range tests {
		d, err := Parse(tt.dest)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.dest, err)
		}
		if got := d.Match(tt.host, tt.port); got != tt.want {
			t.Errorf("%q.Match(%q, %d) = %v, want %v", tt.dest, tt.host, tt.port, got, tt.want)
		}
	}
}

func TestAllowsAndParseList(t *testing.T) {
	list, err := ParseList([]string{"api.openai.com", "*.example.org:443", "127.0.0.1:11434"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		port int
		want string // the destination that allowed it, "" for none
	}{
		{"api.openai.com", 443, "api.openai.com"},
		{"www.example.org", 443, "*.example.org:443"},
		{"www.example.org", 80, ""},
		{"127.0.0.1", 11434, "127.0.0.1:11434"},
		{"127.0.0.1", 22, ""},
		{"evil.org", 443, ""},
	}
	for _, tt := range tests {
		d, ok := Allows(list, tt.host, tt.port)
		if ok != (tt.want != "") || (ok && d.String() != tt.want) {
			t.Errorf("Allows(%s:%d) = %v, %v; want %q", tt.host, tt.port, d, ok, tt.want)
		}
	}
	if _, ok := Allows(nil, "api.openai.com", 443); ok {
		t.Error("an empty list allows something")
	}
	if _, err := ParseList([]string{"a.org", "bad host", "c.org"}); err == nil || !strings.Contains(err.Error(), `"bad host"`) {
		t.Errorf("ParseList error %v, want the bad entry named", err)
	}
	if got, err := ParseList(nil); err != nil || len(got) != 0 {
		t.Errorf("ParseList(nil) = %v, %v", got, err)
	}
}

// A destination reads back as itself from its String, and matches a
// connection to itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"api.openai.com", "*.example.org:443", "127.0.0.1:11434", "[::1]:80", "::ffff:1.2.3.4",
		"[::ffff:1.2.3.4]:80", "fe80::1%eth0", "127.1", "a..b", "[::1", "host:+80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(d.String())
		if err != nil || again != d {
			t.Fatalf("Parse(%q) = %#v; Parse(%q) = %#v, %v", s, d, d.String(), again, err)
		}
		port := d.Port
		if port == 0 {
			port = 443
		}
		host := d.Host
		if d.Wildcard {
			host = "x." + host
		}
		if !d.Match(host, port) {
			t.Fatalf("%#v does not match %s port %d", d, host, port)
		}
	})
}
