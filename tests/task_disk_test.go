package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// diskScript: the agent writes a small file, then a 100 MiB one, and
// keeps its command running for sleep seconds.
func diskScript(sleep int) string {
	return fmt.Sprintf(`model: disk
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: kept.txt, content: "work before the flood\n"}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {timeout: 60, command: "head -c 104857600 /dev/zero > big.bin && sleep %d && echo flood-finished"}}
  - expect: {last_role: tool}
    text: "Done."
`, sleep)
}

// TestDiskBound: a task whose command writes past sandbox.disk is stopped
// while the command still runs, with a message naming the bound, and the
// work before it is committed on the branch without the offending file.
// Control: without the bound the same task runs to the end and commits
// the large file.
func TestDiskBound(t *testing.T) {
	c := RequireEngine(t)

	env := NewAgentEnv(t, c)
	env.Env = append(env.Env, "AGENT_SANDBOX_DISK=20m")
	repo := NewSampleRepo(t)
	start := time.Now()
	code, out, errOut := env.Run(repo, "task", "--llm", "script:"+writeScript(t, diskScript(30)), "--approve", "keep", env.LabelFlag(), "Fill the disk")
	took := time.Since(start)
	t.Logf("took %s\n%s", took, errOut)
	if code == 0 {
		t.Fatalf("the task crossed its disk bound and still succeeded:\n%s\n%s", out, errOut)
	}
	if !strings.Contains(errOut, "past its bound of 20.0 MiB (sandbox.disk)") || !strings.Contains(errOut, "big.bin") {
		t.Errorf("no clear message about the disk bound:\n%s", errOut)
	}
	if took > 25*time.Second {
		t.Errorf("the task was not stopped while its command ran (took %s)", took)
	}
	rec := onlyTask(t, env.StateDir)
	if got := Git(t, repo, "show", rec.Branch+":kept.txt"); got != "work before the flood" {
		t.Errorf("the work before the flood is not on the branch: %q", got)
	}
	if _, err := GitErr(repo, "cat-file", "-e", rec.Branch+":big.bin"); err == nil {
		t.Error("the file past the bound was committed")
	}

	// Control: no bound, the same task runs to the end.
	env2 := NewAgentEnv(t, c)
	env2.Env = append(env2.Env, "AGENT_SANDBOX_DISK=0")
	repo2 := NewSampleRepo(t)
	code, out, errOut = env2.Run(repo2, "task", "--llm", "script:"+writeScript(t, diskScript(1)), "--approve", "keep", env2.LabelFlag(), "Fill the disk")
	if code != 0 {
		t.Fatalf("control failed: without a bound the task did not finish: exit %d\n%s\n%s", code, out, errOut)
	}
	rec2 := onlyTask(t, env2.StateDir)
	if _, err := GitErr(repo2, "cat-file", "-e", rec2.Branch+":big.bin"); err != nil {
		t.Errorf("control failed: without a bound the large file is not on the branch: %v", err)
	}
}

// subDiskScript: a sub-agent floods its own workspace; the parent sees it
// stopped and finishes.
const subDiskScript = `model: subdisk
slots: 1
turns:
  - tool_calls:
      - name: spawn_agents
        arguments:
          tasks:
            - {name: flood, prompt: "Flood the disk."}
  - expect: {last_contains: "Flood the disk."}
    tool_calls:
      - {name: write_file, arguments: {path: sub-kept.txt, content: "sub work\n"}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {timeout: 60, command: "head -c 104857600 /dev/zero > big.bin && sleep 30 && echo flood-finished"}}
  - expect: {last_role: tool}
    text: "Flooded."
  - expect: {last_role: tool, tool_result_contains: "the sub-agent was stopped"}
    text: "The sub-agent hit the disk bound."
`

// TestSubAgentDiskBound: a sub-agent whose command writes past
// sandbox.disk is stopped while it runs; the parent is told, and the
// sub-agent's work before it is kept on its branch, without the file.
func TestSubAgentDiskBound(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	env.Env = append(env.Env, "AGENT_SANDBOX_DISK=20m")
	repo := NewSampleRepo(t)
	start := time.Now()
	out := mustRun(t, env, repo, "task", "--llm", "script:"+writeScript(t, subDiskScript), "--approve", "keep", env.LabelFlag(), "Delegate the flood")
	if took := time.Since(start); took > 25*time.Second {
		t.Errorf("the sub-agent was not stopped while its command ran (took %s)", took)
	}
	rec := onlyTask(t, env.StateDir)
	branches := strings.Fields(Git(t, repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/"+rec.Branch+"-sub-*"))
	if len(branches) != 1 {
		t.Fatalf("want the sub-agent's branch kept, have %v\n%s", branches, out)
	}
	if got := Git(t, repo, "show", branches[0]+":sub-kept.txt"); got != "sub work" {
		t.Errorf("the sub-agent's work before the flood is not on its branch: %q", got)
	}
	if _, err := GitErr(repo, "cat-file", "-e", branches[0]+":big.bin"); err == nil {
		t.Error("the file past the bound was committed")
	}
}

// TestHostFreeFloor: with a free-space floor above what the host has, a
// running task is stopped within seconds with a message naming the
// floor; the work before it is on the branch. (The control is
// TestDiskBound's: under the default floor the same kind of task runs to
// the end.)
func TestHostFreeFloor(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	env.Env = append(env.Env, "AGENT_SANDBOX_MIN_FREE=1000000t")
	repo := NewSampleRepo(t)
	script := `model: floor
turns:
  - tool_calls:
      - {name: write_file, arguments: {path: kept.txt, content: "before\n"}}
  - expect: {last_role: tool}
    tool_calls:
      - {name: bash, arguments: {timeout: 60, command: "sleep 30 && echo slept"}}
  - expect: {last_role: tool}
    text: "Done."
`
	start := time.Now()
	code, out, errOut := env.Run(repo, "task", "--llm", "script:"+writeScript(t, script), "--approve", "keep", env.LabelFlag(), "Wait")
	if code == 0 {
		t.Fatalf("the task ran below the free-space floor:\n%s\n%s", out, errOut)
	}
	if !strings.Contains(errOut, "(sandbox.min_free): the task was stopped") {
		t.Errorf("no clear message about the floor:\n%s", errOut)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the task was not stopped while its command ran (took %s)", took)
	}
	rec := onlyTask(t, env.StateDir)
	if got := Git(t, repo, "show", rec.Branch+":kept.txt"); got != "before" {
		t.Errorf("the work before is not on the branch: %q", got)
	}
}
