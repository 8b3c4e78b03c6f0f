package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
)

// chatUser answers ask_user in a chat: the question is shown in the
// conversation and the user's next line is the answer (an option's number
// or its text, or free text). present_plan keeps its chat meaning: the plan
// is the turn's answer and the next message carries it out.
type chatUser struct {
	// ask shows the question and returns the answer; ok is false when the
	// user gave none (end of input, Ctrl-C).
	ask func(ctx context.Context, prompt string) (answer string, ok bool)
}

var _ agent.User = (*chatUser)(nil)

func (u *chatUser) ReviewPlan(context.Context, string) (agent.PlanReview, error) {
	return agent.PlanReview{}, agent.ErrUserCancelled
}

func (u *chatUser) Ask(ctx context.Context, question string, options []string) (string, error) {
	clean := make([]string, 0, len(options))
	for _, o := range options {
		if o = strings.TrimSpace(termtext.Text(o)); o != "" {
			clean = append(clean, o)
		}
	}
	ans, ok := u.ask(ctx, askPrompt(termtext.Text(question), clean))
	if !ok {
		return "", agent.ErrUserCancelled
	}
	return pickOption(ans, options), nil
}

// askPrompt is the question as the chat shows it.
func askPrompt(question string, options []string) string {
	var b strings.Builder
	b.WriteString("the agent asks: " + question)
	for i, o := range options {
		fmt.Fprintf(&b, "\n  %d) %s", i+1, o)
	}
	if len(options) > 0 {
		b.WriteString("\nanswer with a number or your own words:")
	} else {
		b.WriteString("\nyour answer:")
	}
	return b.String()
}

// pickOption turns "2" into the second option; anything else is the
// answer as typed.
func pickOption(ans string, options []string) string {
	ans = strings.TrimSpace(ans)
	if n, err := strconv.Atoi(ans); err == nil && n >= 1 && n <= len(options) {
		return options[n-1]
	}
	return ans
}
