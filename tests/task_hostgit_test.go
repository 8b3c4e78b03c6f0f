package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostileScript is a scripted model whose agent, inside the sandbox, plants
// what would take over host git if host git ever looked at it: a `.git`
// (a directory, or a pointer file to a crafted git dir) whose config sets
// core.fsmonitor, diff.external, a textconv, a filter and a merge driver
// (selected by a .gitattributes it also writes) and hooks — each one
// touching a sentinel file on the host.
func hostileScript(sentinel string, pointerFile bool) string {
	gitdir := ".git"
	pointer := ""
	if pointerFile {
		gitdir = ".evil"
		pointer = `printf 'gitdir: .evil\n' > .git; `
	}
	touch := "touch " + sentinel
	cmd := fmt.Sprintf(`set -e; G=%[1]s; mkdir -p $G/hooks $G/objects $G/refs/heads; %[2]s`+
		`printf 'ref: refs/heads/main\n' > $G/HEAD; `+
		`printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "%[3]s; false"\n\thooksPath = hooks\n[diff]\n\texternal = "%[3]s; false"\n[diff "evil"]\n\ttextconv = "%[3]s; cat"\n[filter "evil"]\n\tclean = "%[3]s; cat"\n\tsmudge = "%[3]s; cat"\n\trequired = true\n[merge "evil"]\n\tdriver = "%[3]s; false"\n' > $G/config; `+
		`for h in pre-commit post-commit commit-msg post-checkout post-merge reference-transaction post-index-change; do printf '#!/bin/sh\n%[3]s\n' > $G/hooks/$h; chmod +x $G/hooks/$h; done; `+
		`printf '* filter=evil diff=evil merge=evil\n' > .gitattributes; `+
		`echo 'Hello from the agent' > greet.txt; ls -a`, gitdir, pointer, touch)
	return fmt.Sprintf(`model: hostile
turns:
  - tool_calls:
      - name: bash
        arguments:
          command: %q
  - expect: {last_role: tool, tool_result_contains: "greet.txt"}
    text: "Planted."
`, cmd)
}

// TestHostGitSafety: after the task's commit, review, diff and merge, the
// sentinel does not exist; control: the same planted files make a plain
// `git status` in the worktree directory create it.
func TestHostGitSafety(t *testing.T) {
	c := RequireEngine(t)
	for _, pointer := range []bool{false, true} {
		name := map[bool]string{false: "git-dir", true: "git-pointer-file"}[pointer]
		t.Run(name, func(t *testing.T) {
			env := NewAgentEnv(t, c)
			repo := NewSampleRepo(t)
			sentinel := filepath.Join(t.TempDir(), "pwned")
			script := filepath.Join(t.TempDir(), "model.yaml")
			if err := os.WriteFile(script, []byte(hostileScript(sentinel, pointer)), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := env.Run(repo, "task", "--llm", "script:"+script, "--approve", "keep", env.LabelFlag(), "Say hello")
			if code != 0 {
				t.Fatalf("agent task: exit %d\n%s\n%s", code, out, errOut)
			}
			if !strings.Contains(out, "the agent wrote a .git into its workspace") {
				t.Errorf("the review does not warn about the planted .git:\n%s", out)
			}
			id := onlyTask(t, env.StateDir).ID
			wt := filepath.Join(env.StateDir, "worktrees", id)
			for _, args := range [][]string{{"tasks"}, {"diff", id}, {"log", id}} {
				if code, out, errOut := env.Run(repo, args...); code != 0 {
					t.Fatalf("agent %v: exit %d\n%s\n%s", args, code, out, errOut)
				}
			}
			// Keep a copy of exactly what the agent left, for the control
			// (owned by the caller, as the files of a non-root user's
			// sandbox are: running as root, the sandbox ran as another uid
			// and git's ownership check would refuse the original).
			ctl := filepath.Join(t.TempDir(), "copy")
			if out, err := exec.Command("cp", "-R", wt, ctl).CombinedOutput(); err != nil {
				t.Fatalf("copying the worktree: %v\n%s", err, out)
			}
			if code, out, errOut := env.Run(repo, "merge", id); code != 0 {
				t.Fatalf("agent merge: exit %d\n%s\n%s", code, out, errOut)
			}
			if _, err := os.Stat(sentinel); err == nil {
				t.Fatal("host git ran a program the agent planted in its workspace")
			}
			// .git is never committed; the merge brought only plain files.
			files := Git(t, repo, "ls-tree", "-r", "--name-only", "main")
			for _, f := range strings.Split(files, "\n") {
				if f == ".git" || strings.HasPrefix(f, ".git/") {
					t.Errorf("main contains %s", f)
				}
			}
			if got := Git(t, repo, "show", "main:greet.txt"); got != "Hello from the agent" {
				t.Errorf("merged greet.txt = %q", got)
			}

			// Control: the same files make a plain `git status` in that
			// directory run the planted program.
			st := exec.Command("git", "status")
			st.Dir = ctl
			_ = st.Run()
			if _, err := os.Stat(sentinel); err != nil {
				t.Fatal("control failed: plain git status in the agent's directory did not run the planted program, so this test proves nothing")
			}
		})
	}
}
