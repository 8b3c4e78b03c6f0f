package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"unicode"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
)

// mergeCommitMessage is the message of the commit a merge or squash makes,
// written from the task like a person would: a subject from the task's
// first line (up to 72 characters, cut at a word), a body with the whole
// task when it is longer, the agent's summary, the squashed commits, and
// trailers naming the task and the model. Text from the model is stripped
// of control characters: `git log` prints messages to terminals raw.
func mergeCommitMessage(ctx context.Context, t *store.Task, squash bool, repo *worktree.Repo) string {
	var b strings.Builder
	subject := messageText(subjectLine(t.Prompt, 72, 40))
	if squash {
		b.WriteString(subject + "\n\n")
	} else {
		head := fmt.Sprintf("Merge agent task %s: ", t.ID)
		b.WriteString(head + messageText(subjectLine(t.Prompt, 72-len(head), 20)) + "\n\n")
		b.WriteString(fmt.Sprintf("Merges branch %s into %s.\n\n", t.Branch, t.BaseBranch))
	}
	if strings.Contains(strings.TrimSpace(t.Prompt), "\n") || len([]rune(t.Prompt)) > 72 || !squash {
		b.WriteString("Task:\n" + wrapText(messageText(strings.TrimSpace(t.Prompt)), 72) + "\n\n")
	}
	if s := strings.TrimSpace(t.Result); s != "" {
		b.WriteString("Agent summary:\n" + wrapText(messageText(cutRunes(s, 2000)), 72) + "\n\n")
	}
	if squash {
		if cs, err := repo.Log(ctx, t.BaseCommit, t.Branch); err == nil && len(cs) > 0 {
			b.WriteString("Squashed commits of " + t.Branch + ":\n")
			for i := len(cs) - 1; i >= 0; i-- {
				b.WriteString("  " + short(cs[i].ID) + " " + messageText(cs[i].Subject) + "\n")
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("Agent-Task: " + t.ID + "\n")
	b.WriteString("Agent-Model: " + messageText(t.Model) + "\n")
	return b.String()
}

// messageText drops control characters (other than newline and tab) from
// text bound for a commit message.
func messageText(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if unicode.IsControl(r) || r == 0x202e || r == 0x202d || (r >= 0x2066 && r <= 0x2069) {
			return -1
		}
		return r
	}, s)
}

// wrapText wraps paragraphs at width columns (words longer than a line stay
// whole); existing line breaks are kept.
func wrapText(s string, width int) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		words := strings.Fields(line)
		if len(words) == 0 {
			out = append(out, "")
			continue
		}
		cur := words[0]
		for _, w := range words[1:] {
			if len([]rune(cur))+1+len([]rune(w)) > width {
				out = append(out, cur)
				cur = w
				continue
			}
			cur += " " + w
		}
		out = append(out, cur)
	}
	return strings.Join(out, "\n")
}
