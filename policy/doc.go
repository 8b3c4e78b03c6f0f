// Package policy is pure data and decisions: resource limits, permission
// rules, egress allowlist matching, seccomp and capability sets expressed as
// OCI runtime-spec types. It performs no I/O and imports nothing of the
// project, so every other package can depend on it.
package policy
