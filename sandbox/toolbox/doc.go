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
// The binary has three modes: "idle" (the container's main process, under
// docker-init, blocking until SIGTERM), "serve" (one long-lived exec
// carrying newline-delimited Request/Response frames; see Server.Serve) and
// "call" (one request per exec, the fallback; see Server.Call). Server is
// usable in-process with any Root, which is how the unit tests run.
//
// Build it static (it must run in a scratch image as any unprivileged UID
// with a read-only root filesystem):
//
//	CGO_ENABLED=0 go build -o bin/agent-toolbox ./cmd/agent-toolbox
//
// It must never import Docker, the orchestrator or anything that would not
// build with CGO_ENABLED=0 for linux.
package toolbox
