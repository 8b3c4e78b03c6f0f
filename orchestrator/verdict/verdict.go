package verdict

import (
	"fmt"
	"regexp"
	"strings"
)

// Status is the verdict of a test run.
type Status string

const (
	// Passed: the command exited 0, nothing hides its exit code and its
	// output carries no failure summary.
	Passed Status = "passed"
	// Failed: a non-zero exit code, or the test runner's own summary in
	// the output says tests failed (whatever the exit code).
	Failed Status = "failed"
	// Masked: the command exited 0 but something after the test command
	// (`|| true`, `; echo done`, `&`) decides the exit code.
	Masked Status = "masked"
	// Unknown: no trustworthy run exists (none ran, or it did not finish).
	Unknown Status = "unknown"
)

// Result is a verdict and why.
type Result struct {
	Status Status `json:"status"`
	// Reason says what decided a verdict other than a plain exit code
	// ("" when the exit code alone decided).
	Reason string `json:"reason,omitempty"`
}

// Passed reports whether the verdict is passed.
func (r Result) Passed() bool { return r.Status == Passed }

// Judge decides one run of a test command: exitCode is nil when the command did not finish; output is
// what it printed (its tail is what counts: runners print their summary
// last).
func Judge(command string, exitCode *int, output string) Result {
	if exitCode == nil {
		return Result{Status: Unknown, Reason: "the command did not finish"}
	}
	if line := FailureSummary(output); line != "" {
		r := Result{Status: Failed, Reason: "the output says tests failed: " + line}
		if *exitCode == 0 {
			r.Reason += " (although the command exited 0)"
		}
		return r
	}
	if *exitCode != 0 {
		return Result{Status: Failed}
	}
	if why := Masking(command); why != "" {
		return Result{Status: Masked, Reason: why}
	}
	return Result{Status: Passed}
}

// testCommand matches the usual ways to run a project's tests.
var testCommand = regexp.MustCompile(`(^|[\s;&|(!])(` + `go\s+test|gotestsum|` +
	`(python[0-9.]*\s+-m\s+)?(pytest|unittest|nose2?|tox)|` +
	`(npm|pnpm|yarn|bun)\s+(run\s+)?test|npx\s+(jest|vitest|mocha)|jest|vitest|mocha|` +
	`cargo\s+(test|nextest)|make(\s+-\S+)*\s+(test|check|tests)|ctest|meson\s+test|ninja\s+test|` +
	`mvn\s+(\S+\s+)*test|gradle\w*\s+test|\./gradlew\s+test|` +
	`(bundle\s+exec\s+)?(rspec|rake\s+test)|dotnet\s+test|mix\s+test|phpunit|bats|` +
	`(\./|sh\s+|bash\s+)\S*test\S*\.sh|deno\s+test|zig\s+build\s+test|swift\s+test` +
	`)(\s|$|;|&|\|)`)

// IsTestCommand reports whether a shell command runs tests.
func IsTestCommand(cmd string) bool { return testCommand.MatchString(cmd) }

// summaries are test runners' own words for failed tests. Each must match
// only output that reports a failure: a passing run never prints them.
var summaries = []*regexp.Regexp{
	// go test
	regexp.MustCompile(`(?m)^\s*--- FAIL: .*$`),
	regexp.MustCompile(`(?m)^FAIL(\s.*)?$`),
	// pytest: "=== 2 failed, 3 passed in 0.1s ===", "1 error in 0.2s",
	// "Interrupted: 1 error during collection"
	regexp.MustCompile(`(?m)^.*\b[1-9][0-9]* (failed|errors?)\b.*\bin [0-9.]+m?s\b.*$`),
	regexp.MustCompile(`(?m)^.*\berrors? during collection\b.*$`),
	// unittest
	regexp.MustCompile(`(?m)^FAILED \((failures|errors)=[0-9]+.*$`),
	// cargo test / nextest
	regexp.MustCompile(`(?m)^.*test result: FAILED\b.*$`),
	regexp.MustCompile(`(?m)^error: (test failed|[0-9]+ targets? failed|could not compile)\b.*$`),
	// make
	regexp.MustCompile(`(?m)^(g?make|mingw32-make)(\[[0-9]+\])?: \*\*\* .*Error [0-9]+.*$`),
	// npm, jest, vitest, mocha
	regexp.MustCompile(`(?m)^npm (ERR!|error) (Test failed|code ELIFECYCLE|Lifecycle script .* failed).*$`),
	regexp.MustCompile(`(?m)^\s*Tests?( Suites|( Files)?)?:?\s+[1-9][0-9]* failed\b.*$`),
	regexp.MustCompile(`(?m)^\s*[1-9][0-9]* failing\s*$`),
	// ctest, meson
	regexp.MustCompile(`(?m)^.*tests passed, [1-9][0-9]* tests? failed out of [0-9]+.*$`),
	regexp.MustCompile(`(?m)^The following tests FAILED:.*$`),
	regexp.MustCompile(`(?m)^Fail:\s+[1-9][0-9]*\s*$`),
	// rspec, minitest
	regexp.MustCompile(`(?m)^.*\b[0-9]+ examples?, [1-9][0-9]* failures?\b.*$`),
	regexp.MustCompile(`(?m)^.*\b[0-9]+ runs, [0-9]+ assertions, ([1-9][0-9]* failures|[0-9]+ failures, [1-9][0-9]* errors)\b.*$`),
	// maven, gradle
	regexp.MustCompile(`(?m)^.*\bBUILD FAIL(URE|ED)\b.*$`),
	// TAP (bats, prove)
	regexp.MustCompile(`(?m)^not ok [0-9]+\b.*$`),
	// dotnet, deno
	regexp.MustCompile(`(?m)^\s*Failed!\s+- Failed:\s+[1-9].*$`),
	regexp.MustCompile(`(?m)^.*\bFAILED \| [0-9]+ passed \| [1-9][0-9]* failed\b.*$`),
}

// FailureSummary returns the first line of output in which a test
// runner reports failed tests, or "".
func FailureSummary(output string) string {
	best, at := "", -1
	for _, re := range summaries {
		if loc := re.FindStringIndex(output); loc != nil && (at < 0 || loc[0] < at) {
			best, at = strings.TrimSpace(output[loc[0]:loc[1]]), loc[0]
		}
	}
	if len(best) > 200 {
		best = best[:200]
	}
	return best
}

// Masking says why the exit code of command does not come from its last
// test command, or "" when it does: something after the test command
// runs whatever the tests did (`; echo done`, `; true`), runs when they
// fail (`|| true`, `|| :`, `|| exit 0`, `|| echo failed`), or the test
// runs in the background or negated. Pipes are not masking here: the
// bash tool runs with pipefail. A command with no test segment is "".
func Masking(command string) string {
	segs := split(command)
	last := -1
	for i, s := range segs {
		if IsTestCommand(s.text) {
			last = i
		}
	}
	if last < 0 {
		return ""
	}
	t := segs[last]
	if strings.HasPrefix(t.text, "!") {
		return fmt.Sprintf("`%s` negates the test command's exit code", trim(t.text))
	}
	if t.op == "&" {
		return "the test command runs in the background (`&`): the exit code is not the tests'"
	}
	for _, s := range segs[last+1:] {
		// s.prev is the operator before s.
		switch s.prev {
		case "&&":
			// Runs only when everything before passed: a failure
			// still decides the exit code.
			continue
		case "||", ";", "\n", "&":
			if keepsFailure(s.text, s.prev) {
				return ""
			}
			return fmt.Sprintf("`%s %s` after the test command decides the exit code", displayOp(s.prev), trim(s.text))
		}
	}
	return ""
}

// keepsFailure reports whether a command run after a failed test keeps
// the exit status a failure: `exit 1`, `false`, `exit $?` (after `;`).
func keepsFailure(cmd, op string) bool {
	f := strings.Fields(strings.Trim(cmd, "() \t"))
	if len(f) == 0 {
		return op != "&"
	}
	switch {
	case f[0] == "false":
		return true
	case f[0] == "exit" && (len(f) == 1 || f[1] == "$?" || f[1] == `"$?"`):
		return op != "&" // exits with the test's status
	case f[0] == "exit":
		// exit 1 keeps a failure; exit 0 hides it; exit $rc cannot be
		// told from here, and is taken as hiding it.
		return f[1] != "0" && !strings.ContainsAny(f[1], "$`")
	}
	return false
}

func displayOp(op string) string {
	if op == "\n" {
		return ";"
	}
	return op
}

func trim(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

// segment is one command of a shell list with the operators around it.
type segment struct {
	text     string
	prev, op string // the list operators before and after it ("" at the ends)
}

// split cuts a shell command line into the commands of its lists at
// `;`, `&&`, `||`, `&` and newlines outside quotes (pipes stay inside a
// segment, `2>&1` and `&>` are redirections). Grouping parentheses and
// braces are dropped: `(go test || true)` masks like `go test || true`.
func split(cmd string) []segment {
	var segs []segment
	var b strings.Builder
	prev := ""
	flush := func(op string) {
		text := strings.TrimSpace(strings.Trim(strings.TrimSpace(b.String()), "(){}"))
		text = strings.TrimSpace(text)
		b.Reset()
		if text == "" {
			if op != "" && len(segs) > 0 && segs[len(segs)-1].op == "" {
				segs[len(segs)-1].op = op
			}
			if op != "" {
				prev = op
			}
			return
		}
		segs = append(segs, segment{text: text, prev: prev, op: op})
		prev = op
	}
	var quote byte
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' && i+1 < len(cmd) {
				b.WriteByte(c)
				i++
				c = cmd[i]
			} else if c == quote {
				quote = 0
			}
			b.WriteByte(c)
			continue
		case c == '\\' && i+1 < len(cmd):
			b.WriteByte(c)
			i++
			b.WriteByte(cmd[i])
			continue
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || cmd[i-1] == ' ' || cmd[i-1] == '\t' || cmd[i-1] == '\n' || cmd[i-1] == ';'):
			// A comment runs to the end of the line.
			for i < len(cmd) && cmd[i] != '\n' {
				i++
			}
			i--
			continue
		case c == ';':
			if i+1 < len(cmd) && cmd[i+1] == ';' { // ;; of case
				b.WriteString(";;")
				i++
				continue
			}
			flush(";")
			continue
		case c == '\n':
			flush("\n")
			continue
		case c == '&' && i+1 < len(cmd) && cmd[i+1] == '&':
			flush("&&")
			i++
			continue
		case c == '|' && i+1 < len(cmd) && cmd[i+1] == '|':
			flush("||")
			i++
			continue
		case c == '&':
			// >&, <&, &> and |& are redirections, not a background job.
			if (i > 0 && (cmd[i-1] == '>' || cmd[i-1] == '<' || cmd[i-1] == '|')) || (i+1 < len(cmd) && cmd[i+1] == '>') {
				break
			}
			flush("&")
			continue
		}
		b.WriteByte(c)
	}
	flush("")
	return segs
}
