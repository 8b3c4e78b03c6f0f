package tests

import (
	"os"
	"strings"
	"testing"
)

// TestMain removes the binaries built for this package's tests (see
// Binaries) when all suites are done. The agent runs the tests start see
// no AGENT_* settings (nor NO_COLOR, PAGER, COLUMNS) of the shell that
// started `go test`: an exported AGENT_STATE_DIR or AGENT_LLM_URL would
// change what they test. AGENT_TEST_* are the suite's own knobs.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "AGENT_") && !strings.HasPrefix(k, "AGENT_TEST_")) ||
			k == "NO_COLOR" || k == "PAGER" || k == "COLUMNS" {
			_ = os.Unsetenv(k)
		}
	}
	code := m.Run()
	cleanupBinaries()
	os.Exit(code)
}
