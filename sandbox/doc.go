// Package sandbox owns the Docker engine seam and the hardened workspace
// container: its spec (cap-drop ALL, no-new-privileges, seccomp, read-only
// root, tmpfs, limits, init, unprivileged user, network none, labels), exec
// through the Engine API, and the client side of the toolbox protocol (one
// long-lived exec carrying framed requests, with one exec per call as the
// fallback).
//
// Entry points: Connect (or New over an existing client) checks the engine
// and explains what to fix; Engine.Create starts a sandbox from a Spec;
// Sandbox.Tool runs one agent tool, Sandbox.Exec/Run run a command;
// Engine.Get/List/Remove find and remove sandboxes by their labels;
// Engine.Bench measures the whole path against the docker CLI.
//
// Everything a sandbox sends back is untrusted: a session accepts exactly
// one answer per request it sent (random ids) and frames of at most
// toolbox.MaxResponseBytes, and ends on anything else; the per-call
// fallback and Run bound what they keep the same way.
//
// Backend is what the orchestrator sees of an engine (Engine is the Docker
// implementation; sandboxtest.Local an in-process one for unit tests); each
// Sandbox reaches its backend only through the Driver it was bound with, so
// no engine SDK type crosses this package's API.
//
// It must never touch workspace files from the host on the agent's behalf
// (the one exception is handing a root-owned workspace to the unprivileged
// sandbox user at create, without following symlinks, unless
// Spec.RefuseChown forbids it), never mount
// docker.sock, never run privileged or in a host namespace, never pull an
// image, and never print to the terminal.
package sandbox
