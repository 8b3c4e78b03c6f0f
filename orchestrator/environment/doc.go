// Package environment turns a repository's `.agent/environment.yaml` (or
// the user's per-repository or default one) into a sandbox image with the
// project's toolchain, and keeps the repository's dependency caches.
//
// The definition comes with the code and is not trusted. Its Debian
// packages are installed from the user's configured mirror in a container
// whose only way out is an egress proxy allowing that mirror; its setup
// steps run in a hardened sandbox (the same spec as a task's) whose network
// is what the user's configuration allows for environment builds, never
// what the repository asks for. Images are named by a hash of the
// definition, its base image and the lock files it depends on, and reused
// while that hash matches. Nothing is ever pulled.
//
// Dependency caches live under the state directory, one directory per
// repository and ecosystem; they are never shared between repositories.
package environment
