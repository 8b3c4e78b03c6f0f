package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Egress is a network allowlist: the only destinations a sandbox may reach,
// through the host-side proxy. The zero value (no rules) denies everything;
// there is deliberately no way to write "allow all".
//
// Rule syntax (see ParseEgressRule):
//
//	example.com          the name example.com, ports 80 and 443
//	example.com:8443     the name example.com, port 8443 only
//	example.com:*        the name example.com, any port
//	*.example.com        every name below example.com (a.example.com,
//	                     a.b.example.com), NOT example.com itself; list both
//	                     when both are wanted
//	127.0.0.1:8080       that exact address and port
//	[::1]:8080, [::1]    an IPv6 address (brackets required with a port)
//
// Names are matched case-insensitively with one trailing dot ignored.
// An IP address is reachable only when a rule names that exact address:
// a name rule never matches a request for an IP literal, and a name that
// resolves to a loopback, private, link-local, multicast, unspecified or
// otherwise non-public address is refused (DecideIP) unless a rule names
// that address too — which defeats DNS rebinding onto the host or its LAN.
type Egress struct {
	rules []EgressRule
}

// EgressRule is one parsed allowlist entry.
type EgressRule struct {
	// Raw is the rule as written; Decision.Rule reports it.
	Raw string
	// Host is the normalised name (lower case, no trailing dot) without the
	// "*." of a wildcard; empty for an address rule.
	Host string
	// Wildcard is set for "*.domain": it matches names strictly below Host.
	Wildcard bool
	// Addr is the address of an IP rule (IPv4-mapped IPv6 unmapped); the
	// zero Addr for a name rule.
	Addr netip.Addr
	// Ports are the ports allowed; nil means any port ("host:*").
	Ports []int
}

// Decision is the outcome of one egress check.
type Decision struct {
	// Allowed is true when a rule permits the destination.
	Allowed bool `json:"allowed"`
	// Rule is the rule that allowed it, as written; empty when denied.
	Rule string `json:"rule,omitempty"`
	// Reason says briefly why, in words fit for a 403 body and a log line.
	Reason string `json:"reason"`
}

// defaultPorts are what a rule without a port allows: the web. Anything
// else (ssh, smtp, a database) must be asked for by port, so that allowing
// a code host for HTTPS does not also open a mail relay on it.
var defaultPorts = []int{80, 443}

// ParseEgress parses an allowlist. An empty list is valid and denies all.
// Duplicate rules are kept (harmless); every invalid rule is reported.
func ParseEgress(rules []string) (Egress, error) {
	var e Egress
	var errs []error
	for _, r := range rules {
		pr, err := ParseEgressRule(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e.rules = append(e.rules, pr)
	}
	if len(errs) > 0 {
		return Egress{}, errors.Join(errs...)
	}
	return e, nil
}

// MustParseEgress is ParseEgress for constant rules in tests and defaults;
// it panics on an invalid rule.
func MustParseEgress(rules ...string) Egress {
	e, err := ParseEgress(rules)
	if err != nil {
		panic(err)
	}
	return e
}

// Rules returns the parsed rules in order.
func (e Egress) Rules() []EgressRule { return slices.Clone(e.rules) }

// Empty reports whether the allowlist has no rules (and so denies all).
func (e Egress) Empty() bool { return len(e.rules) == 0 }

// String is the rules as written, comma-separated.
func (e Egress) String() string {
	raw := make([]string, len(e.rules))
	for i, r := range e.rules {
		raw[i] = r.Raw
	}
	return strings.Join(raw, ",")
}

// ParseEgressRule parses one rule (see Egress for the syntax).
func ParseEgressRule(raw string) (EgressRule, error) {
	s := strings.TrimSpace(raw)
	bad := func(why string) (EgressRule, error) {
		return EgressRule{}, fmt.Errorf("egress rule %q: %s", raw, why)
	}
	switch {
	case s == "":
		return bad("empty; name a host such as example.com or *.example.com")
	case s == "*" || strings.HasPrefix(s, "*:") || s == "*.*":
		return bad("allowing every host is not supported; list the hosts the task needs")
	case strings.Contains(s, "://"):
		return bad("write a host, not a URL (example.com, not https://example.com)")
	case strings.ContainsAny(s, "/@?#% \t"):
		return bad("write a host with an optional :port, nothing else")
	}
	r := EgressRule{Raw: raw, Ports: defaultPorts}

	host, portText, hasPort := splitRuleHostPort(s)
	if hasPort {
		if portText == "*" {
			r.Ports = nil
		} else {
			p, err := parsePort(portText)
			if err != nil {
				return bad(err.Error())
			}
			r.Ports = []int{p}
		}
	}
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return bad("unclosed [ in an IPv6 address")
		}
		host = host[1 : len(host)-1]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return bad("brackets hold an IPv6 address, e.g. [::1]:8080")
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return bad("an IPv6 zone (%...) is not allowed")
		}
		r.Addr = a.Unmap()
		return r, nil
	}
	if strings.HasPrefix(host, "*.") {
		r.Wildcard = true
		host = host[2:]
	}
	name, err := normalizeName(host)
	if err != nil {
		return bad(err.Error())
	}
	if r.Wildcard && !strings.Contains(name, ".") {
		// "*.com" or "*.internal" would allow a whole top-level domain.
		return bad("a wildcard needs at least two labels after *. (e.g. *.example.com)")
	}
	r.Host = name
	return r, nil
}

// splitRuleHostPort splits "host:port", "[v6]:port", "[v6]" and a bare IPv6
// address (which has colons but no port).
func splitRuleHostPort(s string) (host, port string, hasPort bool) {
	if strings.HasPrefix(s, "[") {
		if i := strings.LastIndex(s, "]:"); i >= 0 {
			return s[:i+1], s[i+2:], true
		}
		return s, "", false
	}
	if strings.Count(s, ":") > 1 {
		return s, "", false // a bare IPv6 address
	}
	if h, p, ok := strings.Cut(s, ":"); ok {
		return h, p, true
	}
	return s, "", false
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || s[0] == '+' || s[0] == '0' {
		return 0, fmt.Errorf("port %q must be a number from 1 to 65535 (or * for any)", s)
	}
	return p, nil
}

// normalizeName lower-cases a DNS name, drops one trailing dot and checks
// that it is a plain ASCII name (internationalised names in their xn--
// form). A name that is really a numeric address in disguise ("127.1",
// "0x7f.1", "2130706433") is refused: resolvers and inet_aton read those as
// IP addresses, so they would slip an address past the name rules.
func normalizeName(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" {
		return "", errors.New("empty host name")
	}
	if len(h) > 253 {
		return "", errors.New("host name longer than 253 characters")
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" {
			return "", errors.New("empty label (two dots in a row)")
		}
		if len(l) > 63 {
			return "", errors.New("label longer than 63 characters")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("label %q starts or ends with '-'", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("character %q is not allowed in a host name", c)
			}
		}
	}
	if numericLabel(labels[len(labels)-1]) {
		return "", errors.New("looks like a numeric IP address in a non-standard form; write addresses as a.b.c.d or [v6]")
	}
	return h, nil
}

// numericLabel reports whether a label is all decimal digits or a 0x hex
// number: no top-level domain looks like that, but inet_aton-style parsers
// read such names as addresses.
func numericLabel(l string) bool {
	if strings.HasPrefix(l, "0x") {
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

func (r EgressRule) allowsPort(port int) bool {
	return r.Ports == nil || slices.Contains(r.Ports, port)
}

func (r EgressRule) matchesName(name string) bool {
	if r.Host == "" {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(name, "."+r.Host)
	}
	return name == r.Host
}

// Decide checks a destination as the client asked for it: a host name or an
// IP literal (IPv6 with or without brackets) and a port. An allowed name
// must still pass DecideIP for every address it resolves to before the
// proxy dials it.
func (e Egress) Decide(host string, port int) Decision {
	if len(e.rules) == 0 {
		return deny("egress is not allowed: the allowlist is empty")
	}
	if port < 1 || port > 65535 {
		return deny(fmt.Sprintf("invalid port %d", port))
	}
	if strings.HasPrefix(host, "[") || strings.HasSuffix(host, "]") {
		// Brackets only ever hold an IPv6 literal.
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err != nil || !a.Is6() || !strings.HasPrefix(host, "[") || !strings.HasSuffix(host, "]") {
			return deny(fmt.Sprintf("invalid host %q: brackets hold an IPv6 address", host))
		}
		return e.decideAddr(a, port)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return e.decideAddr(a, port)
	}
	name, err := normalizeName(host)
	if err != nil {
		return deny(fmt.Sprintf("invalid host %q: %v", host, err))
	}
	nameMatched := ""
	for _, r := range e.rules {
		if !r.matchesName(name) {
			continue
		}
		if r.allowsPort(port) {
			return Decision{Allowed: true, Rule: r.Raw, Reason: "allowed by rule " + r.Raw}
		}
		nameMatched = r.Raw
	}
	if nameMatched != "" {
		return deny(fmt.Sprintf("port %d of %s is not allowed (rule %s)", port, name, nameMatched))
	}
	return deny(fmt.Sprintf("%s is not in the egress allowlist", name))
}

// DecideIP checks one address a name resolved to (or an address the proxy
// is about to dial). A public unicast address passes; any other address —
// loopback, private, link-local, multicast, unspecified, IPv4-mapped or
// -translated IPv6, documentation and reserved ranges — passes only when a
// rule names exactly that address and port. This is what stops a name in
// the allowlist from being pointed (by DNS rebinding or /etc/hosts) at the
// host, the LAN or a cloud metadata service.
func (e Egress) DecideIP(ip netip.Addr, port int) Decision {
	if len(e.rules) == 0 {
		return deny("egress is not allowed: the allowlist is empty")
	}
	if !ip.IsValid() {
		return deny("no address")
	}
	if r, ok := e.addrRule(ip, port); ok {
		return Decision{Allowed: true, Rule: r.Raw, Reason: "address named by rule " + r.Raw}
	}
	if kind := NonPublic(ip); kind != "" {
		return deny(fmt.Sprintf("%s address %s is not allowed unless a rule names it", kind, ip.WithZone("")))
	}
	return Decision{Allowed: true, Reason: "public address"}
}

// decideAddr decides a request for an IP literal: only a rule naming that
// exact address allows it, public or not.
func (e Egress) decideAddr(a netip.Addr, port int) Decision {
	if r, ok := e.addrRule(a, port); ok {
		return Decision{Allowed: true, Rule: r.Raw, Reason: "address named by rule " + r.Raw}
	}
	if kind := NonPublic(a); kind != "" {
		return deny(fmt.Sprintf("%s address %s is not allowed unless a rule names it", kind, a.WithZone("")))
	}
	return deny(fmt.Sprintf("IP address %s is not allowed unless a rule names it", a.WithZone("")))
}

func (e Egress) addrRule(a netip.Addr, port int) (EgressRule, bool) {
	if a.Zone() != "" {
		// A zone selects a link; rules never carry one.
		return EgressRule{}, false
	}
	a = a.Unmap()
	for _, r := range e.rules {
		if r.Addr.IsValid() && r.Addr == a && r.allowsPort(port) {
			return r, true
		}
	}
	return EgressRule{}, false
}

func deny(reason string) Decision { return Decision{Reason: reason} }

// nonPublic lists the ranges a name must never silently resolve to. Some
// embed an IPv4 address in IPv6 (mapped, NAT64, 6to4, Teredo), which could
// reach a private IPv4 host through a translator.
var nonPublic = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	// ::ffff:0:0/96 (IPv4-mapped) is judged by NonPublic before this table.
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64"},
	{netip.MustParsePrefix("::/8"), "reserved"}, // after NAT64, which it contains
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// globalUnicast is the only IPv6 range allocated as global unicast.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// NonPublic says what kind of non-public address ip is ("loopback",
// "private", ...) or "" for a public unicast address. An IPv4-mapped IPv6
// address is judged as the mapped kind; note that DecideIP still refuses it
// unless a rule names the address.
func NonPublic(ip netip.Addr) string {
	ip = ip.WithZone("")
	if !ip.IsValid() {
		return "invalid"
	}
	if ip.Is4In6() {
		if k := NonPublic(ip.Unmap()); k != "" {
			return k
		}
		return "IPv4-mapped"
	}
	for _, n := range nonPublic {
		if n.prefix.Contains(ip) {
			return n.kind
		}
	}
	if ip.Is6() && !globalUnicast.Contains(ip) {
		return "reserved"
	}
	return ""
}
