// Package sandbox owns the Docker engine seam and the hardened workspace
// container: its spec (cap-drop ALL, no-new-privileges, seccomp, read-only
// root, tmpfs, limits, init, unprivileged user, network none, labels), exec
// through the Engine API, and the client side of the toolbox protocol (one
// long-lived exec carrying framed requests, with one exec per call as the
// fallback).
//
// It must never touch workspace files from the host on the agent's behalf,
// never mount docker.sock, never run privileged or in a host namespace.
package sandbox
