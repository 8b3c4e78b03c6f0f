// Command agent-toolbox is the helper that runs inside every sandbox
// container (see package sandbox/toolbox): the container's idle main
// process, a request session, or one call.
//
// It writes only protocol frames to stdout and diagnostics to stderr, and
// imports nothing but the standard library and the toolbox package: the
// binary is static and runs in any image, even scratch.
//
// Build it static, as the sandbox mounts it into images that may have no C
// library at all:
//
//	CGO_ENABLED=0 go build -o bin/agent-toolbox ./cmd/agent-toolbox
package main
