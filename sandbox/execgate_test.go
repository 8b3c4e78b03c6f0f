package sandbox_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// TestFreezeRacingExecStarts: tool execs keep starting while the sandbox
// is frozen and thawed again and again. Docker 20.10 wedges a container
// paused while an exec of it is starting (every later call on it blocks
// until its cgroup is thawed by hand); the engine's gate keeps its own
// pauses away from its own starting execs, so every thaw here answers and
// the sandbox keeps running tools.
//
// Control (AGENT_TEST_EXEC_GATE_CONTROL=1, as root: it wedges a container
// and then thaws it through the cgroup file system): without the gate a
// thaw hangs within a few dozen rounds.
func TestFreezeRacingExecStarts(t *testing.T) {
	e := sandboxtest.RequireDocker(t)
	if e.SignalFreeze {
		t.Skip("the race is the cgroup pause's; this engine freezes with signals")
	}
	control := os.Getenv("AGENT_TEST_EXEC_GATE_CONTROL") == "1"
	if control {
		if os.Geteuid() != 0 {
			t.Skip("the control wedges a container; only root can thaw it again")
		}
		sandbox.WithoutExecGate(e)
	}
	sb := sandboxtest.FreshMaker(e).New(t, sandbox.Spec{})
	ctx := t.Context()
	if _, err := sb.Run(ctx, "true"); err != nil {
		t.Fatal(err)
	}
	rounds := 60
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range rounds {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				_, _ = sb.Run(ectx, "true") // refused while paused: fine
			}()
		}
		time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond)
		fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		ferr := sb.Freeze(fctx)
		terr := sb.Thaw(fctx)
		cancel()
		if ferr != nil || terr != nil {
			if control {
				thawByHand(t, sb.ID)
				t.Logf("control: the engine wedged in round %d (freeze: %v, thaw: %v)", i+1, ferr, terr)
				return
			}
			t.Fatalf("round %d: freeze: %v, thaw: %v", i+1, ferr, terr)
		}
	}
	if control {
		t.Errorf("control: %d rounds without the gate and the engine never wedged", rounds)
	}
	wg.Wait()
	if _, err := sb.Run(ctx, "true"); err != nil {
		t.Fatalf("after %d rounds the sandbox runs no command: %v", rounds, err)
	}
}

// thawByHand thaws a wedged container's cgroup v1 freezer directly.
func thawByHand(t *testing.T, id string) {
	matches, _ := filepath.Glob("/sys/fs/cgroup/freezer/*/" + id + "*/freezer.state")
	for _, m := range matches {
		if err := os.WriteFile(m, []byte("THAWED"), 0); err != nil {
			t.Logf("thawing %s: %v", m, err)
		}
	}
}
