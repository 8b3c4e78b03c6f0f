package orchestrator

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/orchestrator/store"
)

// askPrefix marks an ask_user call among a task's recorded commands; only
// those nobody could answer are kept, so the review can say the agent
// decided alone.
const (
	askPrefix     = "[ask_user] "
	askUnanswered = "[ask_user: no user available] "
)

func askQuestion(args string) string {
	var a struct {
		Question string `json:"question"`
	}
	if json.Unmarshal([]byte(args), &a) != nil || a.Question == "" {
		return args
	}
	return a.Question
}

// askRecord turns a pending ask_user entry into the command to record, and
// says whether to record it: only when no user was available. Any other
// pending entry is recorded as it is.
func askRecord(cmd, resultText string) (string, bool) {
	q, ok := strings.CutPrefix(cmd, askPrefix)
	if !ok {
		return cmd, true
	}
	if !strings.Contains(resultText, agent.NoUserAnswer) {
		return "", false
	}
	return askUnanswered + q, true
}

// unansweredQuestions is the review's warning about questions the agent
// asked with nobody there to answer.
func unansweredQuestions(cmds []store.Command) []string {
	n := 0
	for _, c := range cmds {
		if strings.HasPrefix(c.Command, askUnanswered) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return []string{fmt.Sprintf("the agent asked %d question(s) with no user available to answer (ask_user); it decided on its own: see the commands list", n)}
}

// SetUser sets the person who answers ask_user and approves plans (see
// Options.User); call it before a run starts.
func (o *Orchestrator) SetUser(u agent.User) { o.opts.User = u }
