package tests

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator/store"
)

// TestRandomKills is the random-kill campaign (`make test-kill`, KILLS=N):
// N times, one step of a task's life — the task itself (through review to
// merge), a merge, a merge over the user's staged change, a discard — is
// killed with SIGKILL at a random moment of its run; then only the
// README's recovery table is followed (`agent gc`, then `agent resume` for
// an interrupted or failed task, the same command again for a killed merge
// or discard, `agent merge` for a task in review) and the end is checked:
// the agent's work merged (or the task discarded), the user's staged
// change byte-identical, nothing left behind. The counts (converged,
// stuck: a recovery command failed, lost: the work is gone) are logged;
// any stuck or lost run fails the test. Skipped unless AGENT_TEST_KILLS is set.
func TestRandomKills(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AGENT_TEST_KILLS"))
	if n <= 0 {
		t.Skip("random-kill campaign; set AGENT_TEST_KILLS=N (make test-kill KILLS=N) to run it")
	}
	RequireEngine(t)
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("AGENT_TEST_KILLS_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (AGENT_TEST_KILLS_SEED=%d repeats this campaign)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	steps := []string{"task", "merge", "merge-staged", "discard"}
	// How long each step takes unkilled here: the kill moments are drawn
	// from [0, 1.2 × that), so that some kills land after the step ended
	// (those runs check that a finished step converges too).
	took := map[string]time.Duration{}
	counts := map[string]int{}
	for _, step := range steps {
		took[step] = max(killRun(t, step, -1, counts), time.Millisecond)
	}
	for i := 0; i < n; i++ {
		step := steps[rng.IntN(len(steps))]
		at := time.Duration(rng.Int64N(int64(took[step]) * 12 / 10))
		killRun(t, step, at, counts)
	}
	t.Logf("random kills: %d runs (%d unkilled to time the steps, then %d with a kill drawn), %d killed before they ended, %d converged, %d stuck, %d lost, %d left garbage",
		n+len(steps), len(steps), n, counts["killed"], counts["converged"], counts["stuck"], counts["lost"], counts["garbage"])
	if counts["stuck"]+counts["lost"]+counts["garbage"] > 0 {
		t.Errorf("not every run converged: %v", counts)
	}
}

// killRun runs step in a fresh environment, killing it after at (never
// when at < 0: then it returns how long the step took), follows the
// recovery table and checks the end, counting the outcome.
func killRun(t *testing.T, step string, at time.Duration, counts map[string]int) time.Duration {
	var took time.Duration
	name := step + "@" + at.Round(time.Millisecond).String()
	if at < 0 {
		name = step + "-unkilled"
	}
	t.Run(name, func(t *testing.T) {
		cl := RequireEngine(t)
		env := NewAgentEnv(t, cl)
		repo := NewSampleRepo(t)
		llm := "script:" + writeScript(t, faultScript)
		args := []string{"task", "--llm", llm, "--approve", "merge", env.LabelFlag(), "Write a note"}
		if step != "task" {
			mustRun(t, env, repo, "task", "--llm", llm, "--approve", "keep", env.LabelFlag(), "Write a note")
			id := onlyTask(t, env.StateDir).ID
			args = []string{"merge", id}
			if step == "discard" {
				args = []string{"discard", "--yes", id}
			}
		}
		staged := ""
		if step == "merge-staged" {
			staged = "the user's own staged line\n"
			if err := os.WriteFile(filepath.Join(repo, "STAGED.txt"), []byte(staged), 0o644); err != nil {
				t.Fatal(err)
			}
			Git(t, repo, "add", "STAGED.txt")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := env.Command(ctx, repo, args...)
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killed := false
		if at >= 0 {
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(at):
				killed = cmd.Process.Kill() == nil
				<-done
			}
		} else if err := cmd.Wait(); err != nil {
			t.Fatalf("unkilled %s: %v", step, err)
		}
		took = time.Since(start)
		if killed {
			counts["killed"]++
		}

		stuck := func(args ...string) bool {
			t.Helper()
			code, out, errOut := env.Run(repo, args...)
			if code != 0 {
				t.Errorf("recovery `agent %s`: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
				counts["stuck"]++
				return true
			}
			return false
		}
		// The recovery table.
		if stuck("gc") {
			return
		}
		rec := onlyTask(t, env.StateDir)
		switch {
		case rec.State == store.Interrupted || rec.State == store.Failed:
			if stuck("resume", "--llm", llm, "--approve", "merge", env.LabelFlag(), rec.ID) {
				return
			}
		case step == "discard" && !rec.State.Final():
			if stuck("discard", "--yes", rec.ID) {
				return
			}
		case !rec.State.Final():
			if stuck("merge", rec.ID) {
				return
			}
		}
		if stuck("gc") {
			return
		}
		rec = loadRecord(t, env, rec.ID)
		want := store.Merged
		if step == "discard" {
			want = store.Discarded
		}
		if rec.State != want {
			t.Errorf("task is %s after the recovery, want %s", rec.State, want)
			counts["stuck"]++
			return
		}
		if want == store.Merged {
			if got, err := GitErr(repo, "show", "main:note.txt"); err != nil || got != "the agent's work" {
				t.Errorf("the agent's work is not on main: %q %v", got, err)
				counts["lost"]++
				return
			}
		}
		if staged != "" {
			b, err := os.ReadFile(filepath.Join(repo, "STAGED.txt"))
			if idx, _ := GitErr(repo, "show", ":STAGED.txt"); err != nil || string(b) != staged || idx+"\n" != staged {
				t.Errorf("the user's staged change is not as it was: %q (index %q) %v", b, idx, err)
				counts["lost"]++
				return
			}
			Git(t, repo, "rm", "-q", "-f", "STAGED.txt")
		}
		before := t.Failed()
		assertNothingLeft(t, cl, env, repo)
		if !before && t.Failed() {
			counts["garbage"]++
			return
		}
		counts["converged"]++
	})
	return took
}
