package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseEgressRule(t *testing.T) {
	ok := []struct {
		raw      string
		host     string
		wildcard bool
		addr     string
		ports    []int // nil = any
	}{
		{"example.com", "example.com", false, "", []int{80, 443}},
		{"Example.COM.", "example.com", false, "", []int{80, 443}},
		{"  example.com  ", "example.com", false, "", []int{80, 443}},
		{"example.com:8443", "example.com", false, "", []int{8443}},
		{"example.com:*", "example.com", false, "", nil},
		{"*.example.com", "example.com", true, "", []int{80, 443}},
		{"*.example.com:22", "example.com", true, "", []int{22}},
		{"xn--bcher-kva.example", "xn--bcher-kva.example", false, "", []int{80, 443}},
		{"my_host.internal", "my_host.internal", false, "", []int{80, 443}},
		{"127.0.0.1:8080", "", false, "127.0.0.1", []int{8080}},
		{"203.0.113.7", "", false, "203.0.113.7", []int{80, 443}},
		{"[::1]:8080", "", false, "::1", []int{8080}},
		{"[::1]", "", false, "::1", []int{80, 443}},
		{"::1", "", false, "::1", []int{80, 443}},
		{"[2001:db8::1]:*", "", false, "2001:db8::1", nil},
		{"[::ffff:127.0.0.1]:80", "", false, "127.0.0.1", []int{80}},
	}
	for _, c := range ok {
		r, err := ParseEgressRule(c.raw)
		if err != nil {
			t.Errorf("ParseEgressRule(%q): %v", c.raw, err)
			continue
		}
		var addr string
		if r.Addr.IsValid() {
			addr = r.Addr.String()
		}
		if r.Host != c.host || r.Wildcard != c.wildcard || addr != c.addr || !equalInts(r.Ports, c.ports) || r.Raw != c.raw {
			t.Errorf("ParseEgressRule(%q) = %+v; want host %q wildcard %v addr %q ports %v", c.raw, r, c.host, c.wildcard, c.addr, c.ports)
		}
	}

	bad := []struct{ raw, want string }{
		{"", "empty"},
		{"*", "every host"},
		{"*:443", "every host"},
		{"*.*", "every host"},
		{"*.com", "two labels"},
		{"https://example.com", "not a URL"},
		{"example.com/path", "nothing else"},
		{"user@example.com", "nothing else"},
		{"example.com:0", "1 to 65535"},
		{"example.com:65536", "1 to 65535"},
		{"example.com:080", "1 to 65535"},
		{"example.com:http", "1 to 65535"},
		{"example.com:", "1 to 65535"},
		{"a..example.com", "empty label"},
		{"-a.example.com", "starts or ends"},
		{"exa mple.com", "nothing else"},
		{"ex!ample.com", "not allowed"},
		{"a.*.example.com", "not allowed"},
		{"*example.com", "not allowed"},
		{"127.1", "numeric"},
		{"0x7f.0.0.1", "numeric"},
		{"2130706433", "numeric"},
		{"[example.com]:80", "IPv6"},
		{"[127.0.0.1]:80", "IPv6"},
		{"[::1", "unclosed"},
		{"[fe80::1%25eth0]", "nothing else"},
		{"fe80::1%eth0", "nothing else"},
		{strings.Repeat("a", 64) + ".com", "63"},
	}
	for _, c := range bad {
		_, err := ParseEgressRule(c.raw)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseEgressRule(%q) error = %v; want one containing %q", c.raw, err, c.want)
		}
	}
}

func TestParseEgressReportsEveryBadRule(t *testing.T) {
	_, err := ParseEgress([]string{"ok.example", "*", "a..b"})
	if err == nil || !strings.Contains(err.Error(), `"*"`) || !strings.Contains(err.Error(), `"a..b"`) {
		t.Fatalf("err = %v; want both bad rules named", err)
	}
	e, err := ParseEgress(nil)
	if err != nil || !e.Empty() {
		t.Fatalf("ParseEgress(nil) = %v, %v; want an empty allowlist", e, err)
	}
}

func TestEgressDecide(t *testing.T) {
	e := MustParseEgress(
		"example.com",
		"*.pkg.example.org",
		"git.example.net:22",
		"any.example.net:*",
		"127.0.0.1:8080",
		"[::1]:9090",
		"203.0.113.7:443",
		"localhost:5000",
	)
	cases := []struct {
		host  string
		port  int
		allow bool
		rule  string // when allowed
		why   string // substring of the reason when denied
	}{
		// Names, case and trailing dots.
		{"example.com", 443, true, "example.com", ""},
		{"EXAMPLE.com", 80, true, "example.com", ""},
		{"example.com.", 443, true, "example.com", ""},
		{"example.com..", 443, false, "", "invalid host"},
		{"example.com", 22, false, "", "port 22"},
		{"example.com", 8443, false, "", "port 8443"},
		{"www.example.com", 443, false, "", "not in the egress allowlist"},
		{"example.com.evil.test", 443, false, "", "not in the egress allowlist"},
		{"evilexample.com", 443, false, "", "not in the egress allowlist"},
		// Wildcards match below the domain, at any depth, never the bare domain.
		{"a.pkg.example.org", 443, true, "*.pkg.example.org", ""},
		{"a.b.pkg.example.org", 443, true, "*.pkg.example.org", ""},
		{"pkg.example.org", 443, false, "", "not in the egress allowlist"},
		{"xpkg.example.org", 443, false, "", "not in the egress allowlist"},
		// Ports.
		{"git.example.net", 22, true, "git.example.net:22", ""},
		{"git.example.net", 443, false, "", "port 443"},
		{"any.example.net", 31337, true, "any.example.net:*", ""},
		{"example.com", 0, false, "", "invalid port"},
		{"example.com", 65536, false, "", "invalid port"},
		// IP literals: only the exact address and port a rule names.
		{"127.0.0.1", 8080, true, "127.0.0.1:8080", ""},
		{"127.0.0.1", 8081, false, "", "loopback"},
		{"127.0.0.2", 8080, false, "", "loopback"},
		{"::ffff:127.0.0.1", 8080, true, "127.0.0.1:8080", ""},
		{"[::ffff:127.0.0.1]", 8080, true, "127.0.0.1:8080", ""},
		{"::ffff:127.0.0.1", 8081, false, "", "loopback"},
		{"::1", 9090, true, "[::1]:9090", ""},
		{"[::1]", 9090, true, "[::1]:9090", ""},
		{"[0:0:0:0:0:0:0:1]", 9090, true, "[::1]:9090", ""},
		{"[::1]", 8080, false, "", "loopback"},
		{"[::1", 9090, false, "", "invalid host"},
		{"::1]", 9090, false, "", "invalid host"},
		{"[127.0.0.1]", 8080, false, "", "invalid host"},
		{"fe80::1%eth0", 80, false, "", "link-local"},
		{"203.0.113.7", 443, true, "203.0.113.7:443", ""},
		{"0.0.0.0", 8080, false, "", "unspecified"},
		{"[::]", 8080, false, "", "unspecified"},
		{"169.254.169.254", 80, false, "", "link-local"},
		{"10.0.0.1", 80, false, "", "private"},
		{"192.168.1.1", 443, false, "", "private"},
		{"[fd00::1]", 443, false, "", "private"},
		{"224.0.0.1", 80, false, "", "multicast"},
		{"8.8.8.8", 443, false, "", "IP address 8.8.8.8 is not allowed"},
		// IPv4 in the forms inet_aton accepts are not names.
		{"127.1", 8080, false, "", "numeric"},
		{"0x7f000001", 8080, false, "", "numeric"},
		{"2130706433", 8080, false, "", "numeric"},
		{"017700000001", 8080, false, "", "numeric"},
		// Junk.
		{"", 80, false, "", "invalid host"},
		{"exa mple.com", 80, false, "", "invalid host"},
		{"example.com\x00.evil", 80, false, "", "invalid host"},
		// A name rule for localhost allows the name; DecideIP still refuses
		// what it resolves to unless the address is named (see below).
		{"localhost", 5000, true, "localhost:5000", ""},
	}
	for _, c := range cases {
		d := e.Decide(c.host, c.port)
		if d.Allowed != c.allow {
			t.Errorf("Decide(%q, %d) = %+v; want allowed=%v", c.host, c.port, d, c.allow)
			continue
		}
		if c.allow && d.Rule != c.rule {
			t.Errorf("Decide(%q, %d) rule = %q; want %q", c.host, c.port, d.Rule, c.rule)
		}
		if !c.allow && (d.Rule != "" || !strings.Contains(d.Reason, c.why)) {
			t.Errorf("Decide(%q, %d) = %+v; want a denial saying %q", c.host, c.port, d, c.why)
		}
		if d.Reason == "" {
			t.Errorf("Decide(%q, %d) has no reason", c.host, c.port)
		}
	}
}

func TestEgressEmptyDeniesEverything(t *testing.T) {
	for _, e := range []Egress{{}, MustParseEgress()} {
		for _, hp := range []struct {
			h string
			p int
		}{{"example.com", 443}, {"127.0.0.1", 80}, {"[::1]", 80}, {"localhost", 80}} {
			if d := e.Decide(hp.h, hp.p); d.Allowed || !strings.Contains(d.Reason, "empty") {
				t.Errorf("empty allowlist: Decide(%q, %d) = %+v; want denied as empty", hp.h, hp.p, d)
			}
		}
		if d := e.DecideIP(netip.MustParseAddr("93.184.215.14"), 443); d.Allowed {
			t.Errorf("empty allowlist: DecideIP(public) = %+v; want denied", d)
		}
	}
}

func TestEgressDecideIP(t *testing.T) {
	e := MustParseEgress("example.com", "127.0.0.1:8080", "[fd00::5]:443")
	cases := []struct {
		ip    string
		port  int
		allow bool
		why   string
	}{
		{"93.184.215.14", 443, true, "public address"},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", 443, true, "public address"},
		// DNS rebinding: an allowed name answering with a local address.
		{"127.0.0.1", 443, false, "loopback"},
		{"127.0.0.1", 8080, true, "127.0.0.1:8080"},
		{"127.0.0.1", 8081, false, "loopback"},
		{"::ffff:127.0.0.1", 8080, true, "127.0.0.1:8080"},
		{"::ffff:127.0.0.1", 443, false, "loopback"},
		{"::ffff:93.184.215.14", 443, false, "IPv4-mapped"},
		{"::1", 443, false, "loopback"},
		{"0.0.0.0", 443, false, "unspecified"},
		{"::", 443, false, "unspecified"},
		{"10.1.2.3", 443, false, "private"},
		{"172.16.0.1", 443, false, "private"},
		{"172.32.0.1", 443, true, "public"},
		{"192.168.0.1", 443, false, "private"},
		{"100.64.0.1", 443, false, "shared"},
		{"169.254.169.254", 80, false, "link-local"},
		{"fe80::1", 443, false, "link-local"},
		{"fd00::5", 443, true, "[fd00::5]:443"},
		{"fd00::6", 443, false, "private"},
		{"ff02::1", 443, false, "multicast"},
		{"239.1.1.1", 443, false, "multicast"},
		{"255.255.255.255", 443, false, "reserved"},
		{"64:ff9b::a00:1", 443, false, "NAT64"},
		{"2002:a00:1::", 443, false, "6to4"},
		{"2001:0:a00:1::", 443, false, "Teredo"},
		{"::a00:1", 443, false, "reserved"},
		{"4000::1", 443, false, "reserved"},
	}
	for _, c := range cases {
		d := e.DecideIP(netip.MustParseAddr(c.ip), c.port)
		if d.Allowed != c.allow || !strings.Contains(d.Reason, c.why) {
			t.Errorf("DecideIP(%s, %d) = %+v; want allowed=%v with reason containing %q", c.ip, c.port, d, c.allow, c.why)
		}
	}
}

// TestEgressKnownBypassesControl shows each bypass in TestEgressDecide is
// stopped by the rule set, not by accident: naming the exact destination
// lets the same request through.
func TestEgressKnownBypassesControl(t *testing.T) {
	for _, c := range []struct {
		rule, host string
		port       int
	}{
		{"127.0.0.1:8080", "127.0.0.1", 8080},
		{"[::1]:8080", "::1", 8080},
		{"169.254.169.254:80", "169.254.169.254", 80},
		{"8.8.8.8:443", "8.8.8.8", 443},
		{"pkg.example.org", "pkg.example.org", 443},
	} {
		if d := MustParseEgress("other.example").Decide(c.host, c.port); d.Allowed {
			t.Fatalf("without a rule, %s:%d was allowed: %+v", c.host, c.port, d)
		}
		if d := MustParseEgress(c.rule).Decide(c.host, c.port); !d.Allowed {
			t.Errorf("rule %s: Decide(%s, %d) = %+v; want allowed", c.rule, c.host, c.port, d)
		}
	}
}

func equalInts(a, b []int) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
