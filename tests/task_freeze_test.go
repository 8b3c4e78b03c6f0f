package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
)

// The freeze tests play a process that outlived its tool call in the
// sandbox (one that took over the toolbox, or escaped its sweep): the test
// starts it with `docker exec` in the task's running sandbox, as the
// sandbox's user, so no toolbox sweep can end it. It waits, on inotify,
// for the host's first touch of a watched path and then swaps a workspace
// directory for a symlink to a host path, at the one moment that makes a
// host step running as root act on the host file. Each test runs the same
// attack with the defence and, as its control, without it.

var (
	attackerOnce sync.Once
	attackerBin  string
	attackerErr  error
)

// attackerBinary builds tests/testdata/attacker (static) once.
func attackerBinary(t *testing.T) string {
	t.Helper()
	attackerOnce.Do(func() {
		dir := filepath.Join(Binaries(t), "attacker-bin")
		if attackerErr = os.MkdirAll(dir, 0o755); attackerErr != nil {
			return
		}
		attackerBin = filepath.Join(dir, "attacker")
		cmd := exec.Command("go", "build", "-trimpath", "-o", attackerBin, "./tests/testdata/attacker")
		cmd.Dir = ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			attackerErr = fmt.Errorf("building the attacker: %v\n%s", err, out)
		}
	})
	if attackerErr != nil {
		t.Fatal(attackerErr)
	}
	return attackerBin
}

// waitReadyScript is a bash command that waits (bounded) until the
// attacker says its watch is in place.
const waitReadyScript = `i=0; while [ ! -e /tmp/attacker-ready ] && [ $i -lt 1500 ]; do sleep 0.1; i=$((i+1)); done; ls /tmp/attacker-ready`

// plantAttacker waits for the test's sandbox whose workspace holds mark
// (a path relative to the workspace), copies the attacker into the
// workspace (the sandbox's tmpfs mounts are noexec; the attacker deletes
// its binary as it starts) and starts it detached, as the sandbox user,
// with args.
func plantAttacker(t *testing.T, env *AgentEnv, mark string, args ...string) {
	t.Helper()
	if !slices.Contains(env.Env, "AGENT_SANDBOX_DISK=0") {
		// The disk bound's periodic measurement freezes the sandbox; a
		// `docker exec` of this test landing in one would be refused
		// ("paused"), or, started as the pause begins, wedge the engine.
		t.Fatal("plantAttacker needs AGENT_SANDBOX_DISK=0 in the task's environment")
	}
	bin := attackerBinary(t)
	deadline := time.Now().Add(2 * time.Minute)
	var id, user string
	for time.Now().Before(deadline) {
		cs, err := LabelledContainers(t.Context(), RequireEngine(t), env.Label)
		if err == nil {
			for _, ct := range cs {
				ws := ct.Labels[sandbox.LabelWorkspace]
				if ct.State == "running" && ws != "" {
					if _, err := os.Lstat(filepath.Join(ws, mark)); err == nil {
						id, user = ct.ID, ct.Labels[sandbox.LabelUser]
					}
				}
			}
		}
		if id != "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if id == "" {
		t.Fatalf("no running sandbox of this test with %s in its workspace", mark)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cp := exec.Command("docker", "exec", "-i", "-u", user, id, "sh", "-c", "cat > /workspace/.attacker && chmod 755 /workspace/.attacker")
	cp.Stdin = f
	if out, err := cp.CombinedOutput(); err != nil {
		t.Fatalf("copying the attacker into the sandbox: %v\n%s", err, out)
	}
	run := append([]string{"exec", "-d", "-u", user, id, "/workspace/.attacker",
		"-ready", "/tmp/attacker-ready", "-probe", "/tmp/attacker-probe"}, args...)
	if out, err := exec.Command("docker", run...).CombinedOutput(); err != nil {
		t.Fatalf("starting the attacker: %v\n%s", err, out)
	}
}

// startTask starts `agent task` in the background; wait returns its exit
// code and output.
func startTask(t *testing.T, env *AgentEnv, repo, script, prompt string) (wait func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := env.Command(ctx, repo, "task", "--llm", "script:"+script, "--approve", "keep", env.LabelFlag(), prompt)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return func() (int, string) {
		defer cancel()
		err := cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String()
	}
}

// rootOnlyDir makes a directory only root can enter, holding rel with
// content, and returns the directory.
func rootOnlyDir(t *testing.T, rel, content string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the attack targets files only root may read or own: run as root")
	}
	dir := filepath.Join(t.TempDir(), "rootonly")
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// commitRaceScript: the agent writes a large a/big (git needs a while to
// hash it) and b/secret, then waits for the attacker. When host git opens
// a/big to stage it, the attacker swaps b for a symlink to a root-only
// host directory; git then stages b/secret through it.
const commitRaceScript = `model: commit-race
turns:
  - tool_calls:
      - name: bash
        arguments:
          timeout: 200
          command: "mkdir -p a b && head -c 33554432 /dev/urandom > a/big && echo agent-content > b/secret && ` + waitReadyScript + `"
  - expect: {last_role: tool, tool_result_contains: "/tmp/attacker-ready"}
    text: "Done."
`

// TestFreezeBeforeCommit: a process left running in the sandbox cannot
// make host git read a root-only host file into the task branch, because
// the sandbox is frozen while git runs. Control: with the freeze off, the
// same attack puts the host file's content on the branch.
func TestFreezeBeforeCommit(t *testing.T) {
	c := RequireEngine(t)
	for _, tc := range []struct {
		name, unsafe string
		leak         bool
	}{
		{"frozen", "", false},
		{"control-no-freeze", "no-freeze", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := NewAgentEnv(t, c)
			env.Env = append(env.Env, "AGENT_SANDBOX_DISK=0") // see plantAttacker
			if tc.unsafe != "" {
				env.Env = append(env.Env, "AGENT_TEST_UNSAFE="+tc.unsafe)
			}
			repo := NewSampleRepo(t)
			secret := "TOPSECRET-" + env.Label
			host := rootOnlyDir(t, "secret", secret)
			wait := startTask(t, env, repo, writeScript(t, commitRaceScript), "Write some files")
			plantAttacker(t, env, "b/secret", "-watch", "/workspace/a/big", "-mask", "open", "-swap", "/workspace/b", "-to", host)
			code, out := wait()
			if code != 0 {
				t.Fatalf("agent task: exit %d\n%s", code, out)
			}
			// The attacker swapped b in every run (after the thaw, when
			// frozen): the review lists what it left in the worktree.
			if !strings.Contains(out, "b.real/secret") {
				t.Errorf("the attacker did not swap b, so this run proves nothing:\n%s", out)
			}
			rec := onlyTask(t, env.StateDir)
			got, err := GitErr(repo, "show", rec.Branch+":b/secret")
			leaked := err == nil && strings.Contains(got, secret)
			if tc.leak && !leaked {
				t.Fatalf("control failed: without the freeze the attacker did not get the host file into the branch (b/secret = %q, %v), so this test proves nothing\n%s", got, err, out)
			}
			if !tc.leak {
				if leaked {
					t.Fatalf("host git read a root-only host file into the task branch:\n%s", got)
				}
				if got != "agent-content" {
					t.Errorf("b/secret on the branch = %q (%v), want the agent's content", got, err)
				}
				if grep, _ := GitErr(repo, "grep", "-l", secret, rec.Branch); grep != "" {
					t.Errorf("the secret is on the branch: %s", grep)
				}
			}
		})
	}
}

// applyRaceScript: the parent makes x/y and waits for the attacker; a
// sub-agent writes x/y/f and a large zz/big. When host git apply creates
// x/y/f in the parent's workspace, the attacker swaps x for a symlink to a
// root-only host directory holding y/f; handing x/y/f to the sandbox user
// then changes the owner of the host file.
const applyRaceScript = `model: apply-race
slots: 1
turns:
  - tool_calls:
      - name: bash
        arguments:
          timeout: 200
          command: "mkdir -p x/y && ` + waitReadyScript + `"
  - expect: {last_role: tool, tool_result_contains: "/tmp/attacker-ready"}
    tool_calls:
      - name: spawn_agents
        arguments:
          tasks:
            - {name: w, prompt: "Write x/y/f."}
  - expect: {last_contains: "Write x/y/f."}
    tool_calls:
      - {name: bash, arguments: {command: "mkdir -p x/y zz && echo sub > x/y/f && head -c 33554432 /dev/urandom > zz/big && echo written"}}
  - expect: {last_role: tool}
    text: "Wrote."
  - expect: {last_role: tool}
    text: "Done."
`

// TestFreezeWhileApplyingSubAgent: a process left running in the parent's
// sandbox cannot make the host chown a root-owned host file while a
// sub-agent's work is applied: the parent is frozen, and the hand-over
// never follows a symlink. Controls: with both defences off the host file
// changes owner; with only the no-follow walk on, it does not either.
func TestFreezeWhileApplyingSubAgent(t *testing.T) {
	c := RequireEngine(t)
	for _, tc := range []struct {
		name, unsafe string
		chowned      bool
	}{
		{"frozen", "", false},
		{"no-follow-only", "no-freeze", false},
		{"control-both-off", "no-freeze,follow-symlinks", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := NewAgentEnv(t, c)
			env.Env = append(env.Env, "AGENT_SANDBOX_DISK=0") // see plantAttacker
			if tc.unsafe != "" {
				env.Env = append(env.Env, "AGENT_TEST_UNSAFE="+tc.unsafe)
			}
			repo := NewSampleRepo(t)
			host := rootOnlyDir(t, "y/f", "root's file\n")
			wait := startTask(t, env, repo, writeScript(t, applyRaceScript), "Split the work")
			plantAttacker(t, env, "x/y", "-watch", "/workspace/x/y", "-mask", "create", "-swap", "/workspace/x", "-to", host)
			code, out := wait()
			if code != 0 {
				t.Fatalf("agent task: exit %d\n%s", code, out)
			}
			// The attacker swapped x in every run (after the thaw, when
			// frozen): the task's final commit holds the link.
			if !strings.Contains(out, "the task adds a symlink x -> "+host) {
				t.Errorf("the attacker did not swap x, so this run proves nothing:\n%s", out)
			}
			if tc.name == "no-follow-only" && !strings.Contains(out, "a path component is a symlink") {
				t.Errorf("with the freeze off the hand-over did not meet the symlink, so this run proves nothing:\n%s", out)
			}
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(host, "y", "f"), &st); err != nil {
				t.Fatal(err)
			}
			chowned := st.Uid != 0
			switch {
			case tc.chowned && !chowned:
				t.Fatalf("control failed: with the defences off the host file kept its owner, so this test proves nothing\n%s", out)
			case !tc.chowned && chowned:
				t.Fatalf("the host handed a root-owned host file to uid %d through the sandbox's symlink\n%s", st.Uid, out)
			}
		})
	}
}

// TestDiffWhileTaskRuns: `agent diff` of a task that is still running
// reads its worktree with the task's sandbox frozen and thaws it after:
// the diff shows the uncommitted work, the sandbox runs again, and the
// task finishes.
func TestDiffWhileTaskRuns(t *testing.T) {
	c := RequireEngine(t)
	env := NewAgentEnv(t, c)
	repo := NewSampleRepo(t)
	script := `model: diff-while-running
turns:
  - tool_calls:
      - name: bash
        arguments:
          timeout: 200
          command: "echo in-progress >> README.md && echo x > progress.txt && i=0; while [ ! -e /tmp/go-on ] && [ $i -lt 1500 ]; do sleep 0.1; i=$((i+1)); done; ls /tmp/go-on"
  - expect: {last_role: tool, tool_result_contains: "/tmp/go-on"}
    text: "Done."
`
	// No disk guard: its measurements freeze the sandbox too, and the
	// events below must be the diff's alone.
	env.Env = append(env.Env, "AGENT_SANDBOX_DISK=0", "AGENT_SANDBOX_MIN_FREE=0")
	wait := startTask(t, env, repo, writeScript(t, script), "Work slowly")
	var id, ctr, user string
	deadline := time.Now().Add(2 * time.Minute)
	for id == "" && time.Now().Before(deadline) {
		cs, _ := LabelledContainers(t.Context(), c, env.Label)
		for _, ct := range cs {
			ws := ct.Labels[sandbox.LabelWorkspace]
			if _, err := os.Stat(filepath.Join(ws, "progress.txt")); err == nil && ct.State == "running" {
				id, ctr, user = filepath.Base(ws), ct.ID, ct.Labels[sandbox.LabelUser]
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if id == "" {
		t.Fatal("the task's sandbox did not start its work")
	}
	// diff runs agent diff and returns the pause/unpause events the engine
	// recorded for the sandbox meanwhile.
	diff := func(extraEnv ...string) []string {
		t.Helper()
		since := time.Now().Add(-time.Second)
		saved := env.Env
		env.Env = append(append([]string{}, env.Env...), extraEnv...)
		code, out, errOut := env.Run(repo, "diff", id)
		env.Env = saved
		if code != 0 || !strings.Contains(out, "+in-progress") {
			t.Fatalf("agent diff of the running task: exit %d\n%s\n%s", code, out, errOut)
		}
		evs, err := exec.Command("docker", "events", "--since", since.Format(time.RFC3339Nano), "--until", time.Now().Add(time.Second).Format(time.RFC3339Nano),
			"--filter", "container="+ctr, "--filter", "event=pause", "--filter", "event=unpause", "--format", "{{.Action}}").CombinedOutput()
		if err != nil {
			t.Fatalf("docker events: %v\n%s", err, evs)
		}
		return strings.Fields(string(evs))
	}
	if got := diff(); len(got) < 2 || got[0] != "pause" || got[len(got)-1] != "unpause" {
		t.Errorf("the diff did not freeze the running task's sandbox around its read: events %q", got)
	}
	// Control: with the freeze off the engine records no pause, so the
	// events above are the diff's doing.
	if got := diff("AGENT_TEST_UNSAFE=no-freeze"); len(got) != 0 {
		t.Errorf("control failed: events %q without the freeze", got)
	}
	ins, err := c.ContainerInspect(t.Context(), ctr)
	if err != nil || ins.State.Paused {
		t.Fatalf("the sandbox was left frozen after the diff (%v)", err)
	}
	if out, err := exec.Command("docker", "exec", "-u", user, ctr, "touch", "/tmp/go-on").CombinedOutput(); err != nil {
		t.Fatalf("docker exec: %v\n%s", err, out)
	}
	if code, out := wait(); code != 0 {
		t.Fatalf("the task did not finish after the diff: exit %d\n%s", code, out)
	}
}
