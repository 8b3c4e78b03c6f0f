package cli

import (
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/orchestrator/store"
)

// completeTaskIDs offers the ids of recorded tasks (not discarded ones),
// with their state and prompt as the description. It reads the records
// only: no Docker, no git.
func completeTaskIDs(f *Factory) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		st, err := store.Open(filepath.Join(f.conf.stateDir(), "tasks"))
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ts, err := st.List()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, t := range ts {
			if t.State == store.Discarded || !strings.HasPrefix(t.ID, toComplete) || containsStr(args, t.ID) {
				continue
			}
			out = append(out, cobra.CompletionWithDesc(t.ID, string(t.State)+": "+oneLine(t.Prompt, 50)))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// completeApprove offers the --approve values.
func completeApprove(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return []cobra.Completion{
		cobra.CompletionWithDesc("ask", "show the review form (a terminal is needed)"),
		cobra.CompletionWithDesc("merge", "merge commit into the base branch"),
		cobra.CompletionWithDesc("squash", "one commit on the base branch"),
		cobra.CompletionWithDesc("merge-if-green", "merge only if the last test run passed"),
		cobra.CompletionWithDesc("squash-if-green", "squash only if the last test run passed"),
		cobra.CompletionWithDesc("keep", "keep the branch for review"),
		cobra.CompletionWithDesc("discard", "remove branch and worktree"),
	}, cobra.ShellCompDirectiveNoFileComp
}
