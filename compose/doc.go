// Package compose renders and validates the compose file of the
// llama-server stack, for users who run it with docker compose.
package compose
