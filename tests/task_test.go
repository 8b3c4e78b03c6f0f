package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/localagent/agent/sandbox"
)

// TestTaskScripts drives the built agent through the scripts in
// testdata/task: `agent task` with a scripted model on a sample repository
// and each decision, the task commands, and bad input.
//
// Each script gets its own state directory ($AGENT_STATE_DIR), config home
// and sandbox label ($LABEL, a --label flag for agent task/resume/shell);
// the containers carrying that label are removed when the script ends.
// Extra commands:
//
//	mkrepo DIR           a git repository holding demo/sample, one commit on main
//	branchof REPO        sets $BRANCH to the repository's only agent/* branch
//	taskid               sets $TASK to the id of the only task
//	taskstate STATE      the only task's record is in STATE
//	expand FILE          replaces $VARS in FILE with the script's environment
func TestTaskScripts(t *testing.T) {
	runScripts(t, filepath.Join("testdata", "task"))
}

// runScripts runs the testscript files of dir with the environment and
// commands TestTaskScripts describes.
func runScripts(t *testing.T, dir string) {
	c := RequireEngine(t)
	bin := Binaries(t)
	testscript.Run(t, testscript.Params{
		Dir: dir,
		// AGENT_TEST_UPDATE_GOLDEN=1 rewrites the golden sections (cmp
		// against stdout) of the scripts instead of failing.
		UpdateScripts: os.Getenv("AGENT_TEST_UPDATE_GOLDEN") != "",
		Setup: func(env *testscript.Env) error {
			label := UniqueLabel(t) + "-" + filepath.Base(env.WorkDir)
			env.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			env.Setenv("AGENT_STATE_DIR", filepath.Join(env.WorkDir, ".state"))
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, ".config"))
			env.Setenv("AGENT_SANDBOX_IMAGE", "agent/busybox:latest")
			env.Setenv("LABEL", "--label="+sandbox.LabelTest+"="+label)
			env.Setenv("DEMO", filepath.Join(ModuleRoot(), "demo"))
			env.Setenv("GIT_AUTHOR_NAME", "test")
			env.Setenv("GIT_AUTHOR_EMAIL", "test@localhost")
			env.Setenv("GIT_COMMITTER_NAME", "test")
			env.Setenv("GIT_COMMITTER_EMAIL", "test@localhost")
			env.Defer(func() { _ = removeLabelled(c, label) })
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"jsonkeys": cmdJSONKeys,
			"maxwidth": cmdMaxWidth,
			"noesc":    cmdNoEsc,
			"helpall":  cmdHelpAll,
			"exitcode": cmdExitCode,
			"mkrepo": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: mkrepo DIR")
				}
				out, err := exec.Command(filepath.Join(ModuleRoot(), "demo", "setup.sh"), ts.MkAbs(args[0])).CombinedOutput()
				if err != nil {
					ts.Fatalf("demo/setup.sh: %v\n%s", err, out)
				}
			},
			"branchof": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: branchof REPO")
				}
				out, err := GitErr(ts.MkAbs(args[0]), "for-each-ref", "--format=%(refname:short)", "refs/heads/agent/")
				if err != nil {
					ts.Fatalf("git for-each-ref: %v: %s", err, out)
				}
				bs := strings.Fields(out)
				if len(bs) != 1 {
					ts.Fatalf("want exactly one agent/* branch, have %q", bs)
				}
				ts.Setenv("BRANCH", bs[0])
			},
			"taskid": func(ts *testscript.TestScript, neg bool, args []string) {
				ts.Setenv("TASK", onlyTask(ts, ts.Getenv("AGENT_STATE_DIR")).ID)
			},
			"taskstate": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: taskstate STATE")
				}
				if got := onlyTask(ts, ts.Getenv("AGENT_STATE_DIR")).State; (string(got) == args[0]) == neg {
					ts.Fatalf("task state is %s", got)
				}
			},
			"expand": func(ts *testscript.TestScript, neg bool, args []string) {
				for _, f := range args {
					p := ts.MkAbs(f)
					b, err := os.ReadFile(p)
					ts.Check(err)
					ts.Check(os.WriteFile(p, []byte(os.Expand(string(b), ts.Getenv)), 0o644))
				}
			},
		},
	})
}
