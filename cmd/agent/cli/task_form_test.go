package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
)

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestTaskFormDecides runs `agent task` in process with the demo's
// scripted model, a real sandbox and the real approval form fed with
// keystrokes through a pipe (the streams claim to be a terminal), and
// checks that each choice does what it says to the repository.
func TestTaskFormDecides(t *testing.T) {
	label, _ := taskEnv(t)
	script := filepath.Join(moduleRoot(), "demo", "script.yaml")

	tests := []struct {
		name  string
		keys  []string
		check func(t *testing.T, repo, base string)
		// code is the process exit code the run ends with.
		code int
	}{
		{"merge", []string{keyUp, keyUp, keyEnter}, func(t *testing.T, repo, base string) {
			if got := gitOut(t, repo, "rev-list", "--parents", "-n1", "main"); len(strings.Fields(got)) != 3 {
				t.Errorf("main is not a merge commit: %s", got)
			}
			if b, _ := os.ReadFile(filepath.Join(repo, "greet.sh")); !bytes.Contains(b, []byte("${1:-world}")) {
				t.Error("checkout not updated")
			}
		}, 0},
		{"squash", []string{keyUp, keyEnter}, func(t *testing.T, repo, base string) {
			if got := gitOut(t, repo, "rev-list", "--parents", "-n1", "main"); len(strings.Fields(got)) != 2 || gitOut(t, repo, "rev-parse", "main~1") != base {
				t.Errorf("main is not one squash commit on the base: %s", got)
			}
		}, 0},
		{"keep", []string{keyEnter}, func(t *testing.T, repo, base string) {
			if gitOut(t, repo, "rev-parse", "main") != base {
				t.Error("main moved")
			}
			if gitOut(t, repo, "branch", "--list", "agent/*") == "" {
				t.Error("branch gone")
			}
		}, 0},
		{"ctrl-c keeps, exits 130", []string{keyDown, keyCtrlC}, func(t *testing.T, repo, base string) {
			if gitOut(t, repo, "rev-parse", "main") != base || gitOut(t, repo, "branch", "--list", "agent/*") == "" {
				t.Error("ctrl-c did not keep the branch")
			}
		}, ExitInterrupted},
		{"discard, confirmed", []string{keyDown, keyEnter, waitFor + "unmerged commit", "y", keyEnter}, func(t *testing.T, repo, base string) {
			if gitOut(t, repo, "rev-parse", "main") != base || gitOut(t, repo, "branch", "--list", "agent/*") != "" {
				t.Error("discard left the branch or moved main")
			}
		}, 0},
		{"discard, declined", []string{keyDown, keyEnter, waitFor + "unmerged commit", keyEnter}, func(t *testing.T, repo, base string) {
			if gitOut(t, repo, "branch", "--list", "agent/*") == "" {
				t.Error("declined discard removed the branch")
			}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repo, base := demoRepo(t)
			r, w := io.Pipe()
			var out, errOut syncBuffer
			ios := &IOStreams{In: r, Out: &out, ErrOut: &errOut, InTTY: true, OutTTY: true}
			f := NewFactory(ios)
			defer f.Close()
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				done <- taskRun(ctx, &TaskOptions{IO: ios, Factory: f, Prompt: "Make greet.sh greet the name given",
					Repo: repo, Approve: approveAsk, Labels: []string{sandbox.LabelTest + "=" + label},
					Run: RunFlags{LLM: "script:" + script, LLMSet: true}})
			}()
			typeKeysShown(t, w, &errOut, tt.keys...)
			select {
			case err := <-done:
				if code := exitCode(ios, err, false); code != tt.code {
					t.Fatalf("exit code %d, want %d (%v)\nstdout:\n%s\nstderr:\n%s", code, tt.code, err, out.String(), errOut.String())
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("agent task did not finish")
			}
			_ = w.Close()
			tt.check(t, repo, base)
			if gitOut(t, repo, "status", "--porcelain") != "" {
				t.Error("the user's checkout is dirty")
			}
		})
	}
}
