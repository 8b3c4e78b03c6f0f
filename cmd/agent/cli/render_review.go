package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/store"
)

// printReview writes the review summary a user decides on.
func printReview(w io.Writer, rv *orchestrator.Review) {
	fmt.Fprintf(w, "\nTask %s: %s\n", rv.Task, oneLine(rv.Prompt, 100))
	fmt.Fprintf(w, "  branch   %s (from %s)\n", rv.Branch, rv.Base)
	if rv.BaseMoved {
		fmt.Fprintf(w, "  note     %s has new commits since the task started\n", rv.BaseBranch)
	}
	fmt.Fprintf(w, "  model    %s, tokens %d in / %d out\n", rv.Model, rv.Tokens.Prompt, rv.Tokens.Completion)
	fmt.Fprintf(w, "\nCommits (%d):\n", len(rv.Commits))
	if len(rv.Commits) == 0 {
		fmt.Fprintln(w, "  (none: the agent changed nothing)")
	}
	for _, c := range rv.Commits {
		fmt.Fprintf(w, "  %.10s %s\n", c.ID, c.Subject)
	}
	fmt.Fprintf(w, "\nFiles: %s\n", rv.Stat.String())
	for _, f := range rv.Stat.Files {
		switch {
		case f.Mode == "120000":
			fmt.Fprintf(w, "  %s %s -> %s (symlink)\n", f.Status, f.Path, f.LinkTarget)
			continue
		case f.Binary:
			fmt.Fprintf(w, "  %s %s (binary)\n", f.Status, f.Path)
			continue
		}
		fmt.Fprintf(w, "  %s %s +%d -%d\n", f.Status, f.Path, f.Added, f.Deleted)
	}
	if len(rv.Uncommitted) > 0 {
		fmt.Fprintf(w, "  uncommitted in the worktree: %s\n", strings.Join(rv.Uncommitted, ", "))
	}
	fmt.Fprintf(w, "\nCommands (%d):\n", len(rv.Commands))
	printCommands(w, rv.Commands)
	switch {
	case rv.Tests == nil:
		fmt.Fprintln(w, "\nTests: not run")
	case rv.Tests.Passed:
		fmt.Fprintf(w, "\nTests: passed (%s; %d test run(s))\n", oneLine(rv.Tests.Command, 80), rv.Tests.Runs)
	default:
		fmt.Fprintf(w, "\nTests: FAILED (%s exited %s; %d test run(s))\n", oneLine(rv.Tests.Command, 80), exitText(rv.Tests.ExitCode), rv.Tests.Runs)
	}
	if n := rv.Network; len(n.Allow) == 0 {
		fmt.Fprintln(w, "Network: none (the sandbox had no network)")
	} else {
		fmt.Fprintf(w, "Network: allowed to %s; %d connection(s) allowed, %d denied (log %s)\n",
			strings.Join(n.Allow, ", "), n.Allowed, n.Denied, n.EgressLog)
	}
	for _, warn := range rv.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if rv.Result != "" {
		fmt.Fprintf(w, "\nAgent: %s\n", oneLine(rv.Result, 300))
	}
	fmt.Fprintln(w)
}

func exitText(code *int) string {
	if code == nil {
		return "?"
	}
	return fmt.Sprint(*code)
}

func printCommands(w io.Writer, cmds []store.Command) {
	if len(cmds) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, c := range cmds {
		mark := "ok  "
		switch {
		case c.CutShort || c.Running:
			mark = "CUT "
		case c.TimedOut:
			mark = "TIME"
		case c.OOMKilled:
			mark = "OOM "
		case c.ExitCode == nil || *c.ExitCode != 0:
			mark = "FAIL"
		}
		test := ""
		if orchestrator.IsTestCommand(c.Command) {
			test = "  [test]"
		}
		fmt.Fprintf(w, "  %s exit %-3s %6dms  $ %s%s\n", mark, exitText(c.ExitCode), c.DurationMS, oneLine(c.Command, 100), test)
	}
}

// writeJSONLine writes v as one JSON line.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
