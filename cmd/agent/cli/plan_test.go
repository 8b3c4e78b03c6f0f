package cli

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
)

// planScript: in plan mode a write is refused until the plan is approved
// in the form; after approval the write works, and ask_user is answered
// through a second form.
const planScript = `model: plan
n_ctx: 32768
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: early.txt, content: "too early\n"}}
  - expect: {last_role: tool, tool_result_contains: "not allowed yet: this task is in plan mode"}
    tool_calls:
      - {name: present_plan, arguments: {plan: "1. write late.txt"}}
  - expect: {last_role: tool, tool_result_contains: "The user approved the plan"}
    tool_calls:
      - {name: write_file, arguments: {path: late.txt, content: "after approval\n"}}
  - expect: {last_role: tool, tool_result_contains: "late.txt"}
    tool_calls:
      - {name: ask_user, arguments: {question: "Which greeting?", options: [Hello, Hi]}}
  - expect: {last_role: tool, tool_result_contains: "The user answered: Hi"}
    text: "Done as planned."
`

func TestPlanModeThroughForms(t *testing.T) {
	label, _ := taskEnv(t)
	script := writeScript(t, planScript)
	repo, _ := demoRepo(t)
	r, w := io.Pipe()
	var out, errOut syncBuffer
	ios := &IOStreams{In: r, Out: &out, ErrOut: &errOut, InTTY: true, OutTTY: true}
	f := NewFactory(ios)
	defer f.Close()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		done <- taskRun(ctx, &TaskOptions{IO: ios, Factory: f, Prompt: "Plan, then write", Plan: true,
			Repo: repo, Approve: approveAsk, Labels: []string{sandbox.LabelTest + "=" + label},
			Run: RunFlags{LLM: "script:" + script, LLMSet: true}})
	}()
	typeKeysShown(t, w, &errOut,
		waitFor+"Approve this plan?", keyEnter,
		waitFor+"Which greeting?", keyDown, keyEnter,
		waitFor+"what should happen to its branch", keyEnter)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("agent task did not finish")
	}
	_ = w.Close()
	branch := gitOut(t, repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/agent/")
	files := gitOut(t, repo, "ls-tree", "-r", "--name-only", branch)
	if !strings.Contains(files, "late.txt") || strings.Contains(files, "early.txt") {
		t.Errorf("branch files:\n%s", files)
	}
	if !strings.Contains(out.String(), "Done as planned.") {
		t.Errorf("stdout:\n%s", out.String())
	}
}

func TestPlanNeedsTerminal(t *testing.T) {
	ios, _, _, _ := TestStreams()
	err := taskRun(context.Background(), &TaskOptions{IO: ios, Factory: NewFactory(ios), Prompt: "x", Plan: true, Approve: "keep"})
	if err == nil || !strings.Contains(err.Error(), "--plan") {
		t.Fatalf("err = %v", err)
	}
}
