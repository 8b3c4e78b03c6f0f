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
// It must never import Docker, the orchestrator or anything that would not
// build with CGO_ENABLED=0 for linux.
package toolbox
