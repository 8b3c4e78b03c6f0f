package orchestrator

import (
	"fmt"
	"regexp"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/environment"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/verdict"
)

// missingProgram is the program an exit-127 bash call could not find,
// from the first line of its output.
func missingProgram(e event.Event) string {
	if e.ExitCode == nil || *e.ExitCode != 127 {
		return ""
	}
	if p := environment.MissingProgram(e.Text); p != "" {
		return p
	}
	return "?"
}

// claimsPassing matches a final message that says the tests pass.
var claimsPassing = regexp.MustCompile(`(?i)\b(all\s+)?(the\s+)?(unit\s+)?tests?\s+(now\s+|all\s+)?(pass(es|ed|ing)?|succeed(s|ed)?|are\s+(passing|green|ok))\b|\btests?:\s*(pass|ok)\b`)

var negation = regexp.MustCompile(`(?i)\b(not|never|no|cannot|can't|couldn't|could not|didn't|don't|doesn't|unable|fail\w*|until|once|if|make)\b[^.!?\n]*$`)

// claimsPass reports whether a message says the tests pass, leaving out
// "could not make the tests pass" and the like.
func claimsPass(msg string) bool {
	for _, m := range claimsPassing.FindAllStringIndex(msg, -1) {
		start := max(0, m[0]-40)
		if !negation.MatchString(msg[start:m[0]]) {
			return true
		}
	}
	return false
}

// environmentWarnings are the review's notes about the sandbox's
// toolchain: programs that were missing (exit 127), and a final message
// that claims passing tests the recorded runs contradict.
func environmentWarnings(t *store.Task, tests *TestRun) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range t.Commands {
		if c.Missing == "" || seen[c.Missing] {
			continue
		}
		seen[c.Missing] = true
		if c.Missing == "?" {
			out = append(out, fmt.Sprintf("%q exited 127 (a program was not found in the sandbox): add the Debian package that provides it to packages: in %s", c.Command, environment.File))
			continue
		}
		out = append(out, fmt.Sprintf("%q exited 127: %s", c.Command, environment.MissingNote("sh: 1: " + c.Missing + ": not found")[len("note: "):]))
	}
	if claimsPass(t.Result) {
		switch {
		case tests == nil:
			out = append(out, "the agent's final message says the tests pass, but it ran no test command")
		case tests.Passed:
		case tests.Source == SourceHost && tests.Verdict == verdict.Failed:
			out = append(out, fmt.Sprintf("the agent's final message says the tests pass, but the test command (%s) failed", tests.Command))
		case tests.Verdict == verdict.Failed:
			out = append(out, fmt.Sprintf("the agent's final message says the tests pass, but its last test run (%s) failed", tests.Command))
		default:
			out = append(out, fmt.Sprintf("the agent's final message says the tests pass, but the test verdict is %s (%s)", tests.Verdict, tests.Command))
		}
	}
	return out
}
