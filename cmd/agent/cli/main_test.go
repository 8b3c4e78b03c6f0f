package cli

import (
	"os"
	"strings"
	"testing"
)

// TestMain runs the tests in an environment of their own: AGENT_*
// variables, NO_COLOR, PAGER and COLUMNS of the shell that started `go
// test` would change what configuration and output the tests see (an
// exported AGENT_STATE_DIR once made the project-config test fail). Each
// test sets what it needs itself.
func TestMain(m *testing.M) {
	// The benchmark that runs tasks as separate processes runs the agent
	// command it finds in os.Executable: under test, this binary. `go test`
	// starts it with -test.* flags first; a first argument that is not a
	// flag is a command (`task ...`), which must never run the suite again
	// (the suite would start the benchmark again, without end).
	if os.Getenv("AGENT_TEST_AS_AGENT") == "1" || runAsAgent(os.Args[1:]) {
		os.Exit(Main(os.Args[1:], System()))
	}
	dir := clearCallerEnv()
	code := m.Run()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}

func runAsAgent(args []string) bool {
	return len(args) > 0 && !strings.HasPrefix(args[0], "-")
}

func clearCallerEnv() string {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "AGENT_") && !strings.HasPrefix(k, "AGENT_TEST_")) ||
			k == "NO_COLOR" || k == "PAGER" || k == "COLUMNS" || k == "XDG_STATE_HOME" || k == "XDG_CONFIG_HOME" {
			_ = os.Unsetenv(k)
		}
	}
	// The user's own config must not apply either.
	dir, err := os.MkdirTemp("", "agent-cli-test-config-*")
	if err != nil {
		return ""
	}
	_ = os.Setenv("XDG_CONFIG_HOME", dir)
	_ = os.Setenv("XDG_STATE_HOME", dir+"/state")
	return dir
}
