package orchestrator

import "testing"

func TestGitSubcommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--git-dir=/r/.git", "-c", "core.hooksPath=/dev/null", "--no-pager", "rev-parse", "--verify", "HEAD"}, "rev-parse"},
		{[]string{"-C", "/repo", "-c", "checkout.workers=8", "worktree", "add"}, "worktree"},
		{[]string{"--version"}, "?"},
	} {
		if got := gitSubcommand(c.args); got != c.want {
			t.Errorf("gitSubcommand(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}
