// Package sandboxtest helps tests that need real sandboxes: it builds the
// toolbox binary once, connects to the engine (failing, not skipping, when
// the engine is down outside -short), and creates sandboxes labelled with a
// per-test label that its cleanup removes — and only those, since other
// tests run concurrently on the same engine.
//
// It must never remove resources by the project's shared labels alone.
package sandboxtest
