package egress

// Switches for the control runs of the security tests (also those of
// package egress_test, which drive the proxy from inside a sandbox): each
// turns one defence off, to show that the attack it stops works without
// it.

// KeepMapped makes the proxy judge resolved addresses as the resolver
// returned them (IPv4-mapped for names from /etc/hosts).
func KeepMapped(c *Config) { c.keepMapped = true }

// NoTunnelGuard makes the proxy relay a tunnel to a name without checking
// its TLS SNI or HTTP Host.
func NoTunnelGuard(c *Config) { c.noTunnelGuard = true }

// NoParserLog leaves requests the HTTP parser rejects unlogged.
func NoParserLog(c *Config) { c.noParserLog = true }
