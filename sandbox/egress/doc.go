// Package egress is the host-side proxy through which a sandbox reaches the
// network, when its policy allows any network at all.
//
// A sandbox runs with NetworkMode none. When a task's policy.Egress has
// rules, Start creates a per-task directory (mode 0755) holding a unix
// socket; the sandbox bind-mounts that directory, and a forwarder on the
// container's loopback (agent-toolbox idle -egress-listen ...) relays the
// HTTP_PROXY traffic of commands to it. The proxy speaks HTTP CONNECT (for
// HTTPS and any TCP) and plain absolute-URI HTTP proxying.
//
// For every request it decides with the policy before anything else,
// resolves allowed names itself and re-checks every resolved address
// (policy.Egress.DecideIP: a name pointed at the host, the LAN or a
// metadata service is refused), then dials the checked address — never the
// name — with a timeout. Every allowed and denied attempt is written to the
// task's JSONL log before the connection is used, and handed to
// Config.OnRecord (which the orchestrator turns into event.Egress); if the
// log cannot be written the connection is refused. Denials answer 403 with
// a short reason. Concurrency is bounded, tunnels close when idle, and
// Close stops accepting, ends every connection and waits for its handlers.
//
// It must never dial a name it has not checked, never fall back to "allow"
// on an empty or unparsable policy, never listen on TCP (a TCP listener on
// the host could be reached by anything on it, and a CONNECT could loop back
// to it), and never import the orchestrator or the agent.
package egress
