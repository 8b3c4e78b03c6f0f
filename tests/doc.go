// Package tests holds the end-to-end, security, fault and benchmark suites
// that drive the built agent binary against the real Docker engine.
package tests
