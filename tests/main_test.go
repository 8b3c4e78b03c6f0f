package tests

import (
	"os"
	"testing"
)

// TestMain removes the binaries built for this package's tests (see
// Binaries) when all suites are done.
func TestMain(m *testing.M) {
	code := m.Run()
	cleanupBinaries()
	os.Exit(code)
}
