// Package toolbox is the helper that runs inside every sandbox container.
//
// It is compiled into a small static binary (cmd/agent-toolbox) that the
// sandbox bind-mounts read-only into any image — scratch, busybox, alpine,
// debian — so the user's own image works unchanged. It performs the file
// tools (read, write, edit, list, glob, grep) and runs commands with a
// timeout that kills the whole process group.
//
// Because it runs inside the container, every path it touches resolves in
// the container's mount namespace: a symlink in the workspace that points at
// a host path reaches the container's file of that name, never the host's.
//
// The binary has four modes: "idle" (the container's main process and init,
// reaping orphans and blocking until SIGTERM; with
// -egress-listen/-egress-socket it also runs the egress forwarder), "serve" (one long-lived exec carrying
// newline-delimited Request/Response frames; see Server.Serve), "call" (one
// request per exec, the fallback; see Server.Call) and "forward" (the
// egress forwarder alone: a TCP listener on the container's loopback
// copying bytes to the host proxy's unix socket; see Forward). Server is
// usable in-process with any Root, which is how the unit tests run.
//
// Commands run as SHELL -c (/bin/bash where the image has it, else /bin/sh,
// unless a shell is given), with pipefail where the shell has it, in their
// own process group. Timeouts, cancels
// and the end of every call SIGKILL that group until it is empty; the
// binary is also a child subreaper (Server.KillOrphans), so processes that
// left the group (setsid) are re-parented to it and ended once no command
// runs. Output is one capped head+tail buffer (memory stays fixed however
// much a command prints), and an OOM kill is told apart from other SIGKILLs
// through the memory cgroup's oom_kill counter. A fork bomb cannot stop the
// toolbox: a session runs at most MaxConcurrent requests at once and
// reserves the OS threads that needs up front, its pipes wait in Go's
// poller, and the file tools need no new process.
//
// Every mode first makes its process not dumpable (Protect): the commands
// it runs share its uid, and must not be able to attach to it, write its
// memory or open its /proc entries (the session channel is its stdout).
//
// Build it static (it must run in a scratch image as any unprivileged UID
// with a read-only root filesystem):
//
//	CGO_ENABLED=0 go build -o bin/agent-toolbox ./cmd/agent-toolbox
//
// It must never import Docker, the orchestrator or anything that would not
// build with CGO_ENABLED=0 for linux.
package toolbox
