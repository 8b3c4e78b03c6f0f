package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/verdict"
	"github.com/localagent/agent/orchestrator/worktree"
)

// reviewPrinter writes lines that fit a width (0: no limit); long prose
// (warnings, the agent's summary) is wrapped, one-line facts are cut.
type reviewPrinter struct {
	w     io.Writer
	width int
	c     colors
}

func (p *reviewPrinter) line(format string, a ...any) {
	fmt.Fprintln(p.w, fit(fmt.Sprintf(format, a...), p.width))
}

// wrap writes prefix+text, continuing on indented lines within the width.
func (p *reviewPrinter) wrap(prefix, text string) {
	if p.width <= 0 {
		fmt.Fprintln(p.w, prefix+text)
		return
	}
	indent := strings.Repeat(" ", ansi.StringWidth(prefix))
	limit := max(p.width-len(indent), 20)
	for i, l := range strings.Split(ansi.Wrap(text, limit, " "), "\n") {
		if i == 0 {
			fmt.Fprintln(p.w, fit(prefix+l, p.width))
		} else {
			fmt.Fprintln(p.w, fit(indent+l, p.width))
		}
	}
}

// printReview writes the review summary a user decides on. Everything in
// it that comes from the model, the sandbox or the repository is escaped
// (termtext): prompt, subjects, file names, commands, warnings, the
// agent's summary.
func printReview(w io.Writer, rv *orchestrator.Review, width int, c colors) {
	p := &reviewPrinter{w: w, width: width, c: c}
	fmt.Fprintln(w)
	p.line("%s %s: %s", c.Bold("Task"), rv.Task, oneLine(rv.Prompt, 300))
	p.line("  branch   %s (from %s)", termtext.Line(rv.Branch), termtext.Line(rv.Base))
	if rv.BaseMoved {
		p.line("  note     %s has new commits since the task started", termtext.Line(rv.BaseBranch))
	}
	p.line("  model    %s, tokens %d in / %d out", termtext.Line(rv.Model), rv.Tokens.Prompt, rv.Tokens.Completion)
	if rv.ImageBase != "" {
		p.line("  image    %s (built on %s, from %s)", termtext.Line(rv.Image), termtext.Line(rv.ImageBase), termtext.Line(rv.ImageSource))
	} else if rv.Image != "" {
		p.line("  image    %s", termtext.Line(rv.Image))
	}
	fmt.Fprintln(w)
	p.line("%s (%d):", c.Bold("Commits"), len(rv.Commits))
	if len(rv.Commits) == 0 {
		p.line("  (none: the agent changed nothing)")
	}
	for _, cm := range rv.Commits {
		p.line("  %s %s", c.Yellow(fmt.Sprintf("%.10s", cm.ID)), oneLine(cm.Subject, 300))
	}
	fmt.Fprintln(w)
	p.line("%s: %s", c.Bold("Files"), rv.Stat.String())
	for _, f := range rv.Stat.Files {
		path := termtext.Path(f.Path)
		switch {
		case f.Mode == "120000":
			p.line("  %s %s -> %s (symlink)", f.Status, path, termtext.Path(f.LinkTarget))
		case f.Binary:
			p.line("  %s %s (binary)%s", f.Status, path, modeNote(f))
		default:
			p.line("  %s %s %s %s%s", f.Status, path, c.Green(fmt.Sprintf("+%d", f.Added)), c.Red(fmt.Sprintf("-%d", f.Deleted)), modeNote(f))
		}
	}
	if len(rv.Uncommitted) > 0 {
		p.wrap("  uncommitted in the worktree: ", strings.Join(termtext.Paths(rv.Uncommitted), ", "))
	}
	fmt.Fprintln(w)
	p.line("%s (%d):", c.Bold("Commands"), len(rv.Commands))
	printCommands(w, rv.Commands, width, c)
	fmt.Fprintln(w)
	label := "Tests: "
	if rv.Tests != nil && rv.Tests.Source == orchestrator.SourceHost {
		label = "Tests (run by agent after the last turn): "
	}
	switch {
	case rv.Tests == nil:
		p.line("Tests: not run (verdict unknown)")
	case rv.Tests.Passed:
		p.wrap(label, fmt.Sprintf("%s (%s; %d test run(s))", c.Green("passed"), oneLine(rv.Tests.Command, 80), rv.Tests.Runs))
	case rv.Tests.Verdict == verdict.Masked:
		p.wrap(label, fmt.Sprintf("%s (%s exited %s, but %s; %d test run(s))", c.Red("exit code masked"), oneLine(rv.Tests.Command, 80), exitText(rv.Tests.ExitCode), oneLine(rv.Tests.Reason, 100), rv.Tests.Runs))
	case rv.Tests.Verdict == verdict.Unknown:
		p.wrap(label, fmt.Sprintf("%s (%s: %s; %d test run(s))", c.Red("unknown"), oneLine(rv.Tests.Command, 80), oneLine(rv.Tests.Reason, 100), rv.Tests.Runs))
	default:
		why := ""
		if rv.Tests.Reason != "" {
			why = "; " + oneLine(rv.Tests.Reason, 160)
		}
		p.wrap(label, fmt.Sprintf("%s (%s exited %s%s; %d test run(s))", c.Red("FAILED"), oneLine(rv.Tests.Command, 80), exitText(rv.Tests.ExitCode), why, rv.Tests.Runs))
	}
	if rv.Tests != nil && !rv.Tests.Passed && rv.Tests.OutputTail != "" {
		for _, l := range outputTailLines(rv.Tests.OutputTail, 8) {
			p.line("  | %s", termtext.Line(l))
		}
	}
	if n := rv.Network; len(n.Allow) == 0 {
		p.line("Network: none (the sandbox had no network)")
	} else {
		p.wrap("Network: ", fmt.Sprintf("allowed to %s; %d connection(s) allowed, %d denied (log %s)",
			termtext.Line(strings.Join(n.Allow, ", ")), n.Allowed, n.Denied, termtext.Path(n.EgressLog)))
	}
	for _, warn := range rv.Warnings {
		p.wrap(c.Yellow("warning:")+" ", termtext.Line(warn))
	}
	if rv.Result != "" {
		fmt.Fprintln(w)
		p.wrap(c.Bold("Agent:")+" ", oneLine(rv.Result, 600))
	}
	fmt.Fprintln(w)
}

// isBackground reports a command started with process_start (a
// sub-agent's too, after its "[name] " mark).
func isBackground(cmd string) bool {
	if strings.HasPrefix(cmd, "[") && !strings.HasPrefix(cmd, "[background] ") {
		if _, rest, ok := strings.Cut(cmd, "] "); ok {
			cmd = rest
		}
	}
	return strings.HasPrefix(cmd, "[background] ")
}

func exitText(code *int) string {
	if code == nil {
		return "?"
	}
	return fmt.Sprint(*code)
}

// printCommands lists the commands a task ran, one line each, cut to the
// width (0: no limit).
func printCommands(w io.Writer, cmds []store.Command, width int, c colors) {
	if len(cmds) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, cm := range cmds {
		mark := c.Green("ok  ")
		exit := "exit " + fmt.Sprintf("%-3s", exitText(cm.ExitCode))
		switch {
		case cm.CutShort || cm.Running:
			mark = c.Red("CUT ")
		case cm.TimedOut:
			mark = c.Red("TIME")
		case cm.OOMKilled:
			mark = c.Red("OOM ")
		case cm.ExitCode == nil && isBackground(cm.Command):
			// Started in the background: it has no exit status of its
			// own (the agent stops it, or the task's end does).
			mark, exit = c.Green("bg  "), "started "
		case cm.ExitCode == nil || *cm.ExitCode != 0:
			mark = c.Red("FAIL")
		}
		test := ""
		if orchestrator.IsTestCommand(cm.Command) {
			test = "  [test]"
		}
		fmt.Fprintln(w, fit(fmt.Sprintf("  %s %s %6dms  $ %s%s", mark, exit, cm.DurationMS, oneLine(cm.Command, 200), test), width))
	}
}

// writeJSONLine writes v as one JSON line.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(termtext.JSON(b), '\n'))
	return err
}

// printOutcome writes what a decision did, wrapped to the width.
func printOutcome(w io.Writer, message string, width int) {
	p := &reviewPrinter{w: w, width: width}
	p.wrap("", termtext.Line(message))
}

// outputTailLines returns up to n last non-empty lines of s.
func outputTailLines(s string, n int) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// modeNote makes a change of mode visible: a file made executable shows
// nothing in a line count (git: mode change 100644 => 100755).
func modeNote(f worktree.FileStat) string {
	switch {
	case f.OldMode != "" && f.Mode == "100755":
		return " (mode " + f.OldMode + " -> 100755: made executable)"
	case f.OldMode != "":
		return " (mode " + f.OldMode + " -> " + f.Mode + ")"
	case f.Status == "A" && f.Mode == "100755":
		return " (new executable)"
	}
	return ""
}
