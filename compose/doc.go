// Package compose renders and validates the compose file of the
// llama-server stack, for users who run it with docker compose instead of
// `agent llm up`. The rendered service is the same hardened container:
// model directory read-only, port on 127.0.0.1 only, GPU reservation,
// capabilities dropped, read-only root, and a /health healthcheck that
// needs no curl or wget in the image.
//
// It knows nothing of Docker's API and imports no other package of this
// project: the caller describes the stack as a plain Stack value.
package compose
