package tests

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTaskWarmPool: with sandbox.pool on, the first task of a state
// directory creates its sandbox and leaves a started one waiting; the
// next task claims it (its sandbox reads the task's files: the scripted
// model checks); `agent sandbox ls` shows the waiting member; `agent gc`
// keeps it while the pool is on and removes it once it is off.
func TestTaskWarmPool(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	env.Env = append(env.Env, "AGENT_SANDBOX_POOL=1")
	repo := writeRepo(t, map[string]string{"README": "pooled hello\n"})
	script := writeScript(t, "turns:\n  - tool_calls:\n      - {name: read_file, arguments: {path: README}}\n"+
		"  - expect: {last_role: tool, tool_result_contains: \"pooled hello\"}\n    text: done\n")
	task := func() string {
		code, _, stderr := env.Run(repo, "task", "--llm", "script:"+script, "--approve", "discard", env.LabelFlag(), "read the readme")
		if code != 0 {
			t.Fatalf("task: exit %d\n%s", code, stderr)
		}
		return stderr
	}
	if out := task(); strings.Contains(out, "warm pool") {
		t.Fatalf("the first task found a warm sandbox in a new state directory:\n%s", out)
	}
	if out := task(); !strings.Contains(out, "warm pool") {
		t.Fatalf("the second task did not claim the warm sandbox:\n%s", out)
	}
	var ls struct {
		Sandboxes []struct {
			ID, Pool string
		} `json:"sandboxes"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, env, repo, "sandbox", "ls", "--json")), &ls); err != nil {
		t.Fatal(err)
	}
	idle := ""
	for _, sb := range ls.Sandboxes {
		if sb.Pool == "idle" {
			idle = sb.ID
		}
	}
	if idle == "" {
		t.Fatalf("sandbox ls shows no idle pool member: %+v", ls)
	}
	if out := mustRun(t, env, repo, "gc"); strings.Contains(out, idle[:10]) {
		t.Fatalf("gc removed the idle member while the pool is on:\n%s", out)
	}
	env.Env = append(env.Env, "AGENT_SANDBOX_POOL=0")
	if out := mustRun(t, env, repo, "gc"); !strings.Contains(out, "removed warm pool sandbox "+idle[:10]) {
		t.Fatalf("gc with the pool off did not remove the idle member %s:\n%s", idle[:10], out)
	}
}
