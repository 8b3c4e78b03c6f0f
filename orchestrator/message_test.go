package orchestrator

import (
	"context"
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/store"
)

func TestMergeCommitMessage(t *testing.T) {
	task := &store.Task{
		ID: "abc123", Branch: "agent/add-pagination-abc123", BaseBranch: "main", Model: "qwen",
		Prompt: "Add pagination to the users endpoint, with a page size of 50 by default and a maximum of 500",
		Result: "Added ?page and ?per_page to /users.\x1b]0;pwned\x07 Tests pass.",
	}
	msg := mergeCommitMessage(context.Background(), task, false, nil)
	lines := strings.Split(msg, "\n")
	if len([]rune(lines[0])) > 72 || !strings.HasPrefix(lines[0], "Merge agent task abc123: Add pagination") {
		t.Errorf("subject %q", lines[0])
	}
	if lines[1] != "" {
		t.Errorf("no blank line after the subject: %q", msg)
	}
	for _, want := range []string{"Task:\nAdd pagination to the users endpoint", "Agent summary:\nAdded ?page", "Agent-Task: abc123\n", "Agent-Model: qwen\n"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.ContainsAny(msg, "\x1b\x07") {
		t.Errorf("model text reached the message with controls: %q", msg)
	}
	for _, l := range lines {
		if len([]rune(l)) > 72 {
			t.Errorf("line over 72 columns: %q", l)
		}
	}
	// The old subject was the prompt cut at about 50 characters.
	if strings.HasSuffix(lines[0], "...") && len(lines[0]) < 60 {
		t.Errorf("subject cut short: %q", lines[0])
	}
}
