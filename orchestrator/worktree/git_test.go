package worktree

import (
	"slices"
	"strings"
	"testing"
)

func TestGitEnvIsScrubbed(t *testing.T) {
	for _, k := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_COUNT", "GIT_EXEC_PATH", "GIT_EXTERNAL_DIFF", "GIT_SSH_COMMAND"} {
		t.Setenv(k, "/evil")
	}
	t.Setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
	env := gitEnv("GIT_INDEX_FILE=/ours")
	for _, kv := range env {
		if strings.Contains(kv, "/evil") || strings.HasPrefix(kv, "GIT_CONFIG_KEY") {
			t.Errorf("leaked into git's environment: %s", kv)
		}
	}
	for _, want := range []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_ATTR_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_INDEX_FILE=/ours"} {
		if !slices.Contains(env, want) {
			t.Errorf("missing %s", want)
		}
	}
}

func TestHardeningFlags(t *testing.T) {
	joined := strings.Join(hardening, " ")
	for _, want := range []string{"core.hooksPath=/dev/null", "core.fsmonitor=false", "diff.external=", "commit.gpgsign=false", "tag.gpgsign=false", "protocol.allow=never"} {
		if !strings.Contains(joined, want) {
			t.Errorf("hardening lacks %s", want)
		}
	}
}

func TestValidRev(t *testing.T) {
	for _, bad := range []string{"", "-x", "--output=/tmp/f", "a\nb", "a\x00b", strings.Repeat("a", 2000)} {
		if validRev(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, ok := range []string{"HEAD", "main", "v1.0", "HEAD~2", "abc123", "origin/main"} {
		if err := validRev(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
}
