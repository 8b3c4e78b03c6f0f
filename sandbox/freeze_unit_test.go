package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// freezeFake is an engine whose pause can fail (as runc's "unable to
// freeze" does) and whose record of the pause can lag behind the pause
// itself (as Docker 20.10's does).
type freezeFake struct {
	engine
	mu         sync.Mutex
	frozen     bool // the cgroup
	recorded   bool // the engine's record
	failPauses int  // pauses left to fail
	lag        int  // inspects before a pause is recorded
	lagLeft    int
}

func (f *freezeFake) ContainerPause(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failPauses > 0 {
		f.failPauses--
		return errors.New("OCI runtime pause failed: unable to freeze: unknown")
	}
	if f.recorded {
		return fmt.Errorf("container is already paused: %w", cerrdefs.ErrConflict)
	}
	f.frozen, f.lagLeft = true, f.lag
	return nil
}

func (f *freezeFake) ContainerUnpause(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.recorded {
		return errors.New("container is not paused")
	}
	f.frozen, f.recorded = false, false
	return nil
}

func (f *freezeFake) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen && !f.recorded {
		if f.lagLeft == 0 {
			f.recorded = true
		} else {
			f.lagLeft--
		}
	}
	st := &container.State{Running: true, Paused: f.recorded, Status: "running"}
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{State: st}}, nil
}

// TestFreezeRetriesAndWaitsForTheRecord: a pause that fails is tried
// again (up to freezeAttempts), and Freeze returns only once the engine
// records the pause, so that the Thaw after it is not refused as "not
// paused" (which would leave the sandbox frozen for good). Control: a
// Thaw right after a pause the engine has not recorded yet is refused
// and the cgroup stays frozen.
func TestFreezeRetriesAndWaitsForTheRecord(t *testing.T) {
	ctx := context.Background()
	f := &freezeFake{failPauses: freezeAttempts - 1, lag: 3}
	e := &Engine{api: f}
	if err := e.Freeze(ctx, "c"); err != nil {
		t.Fatalf("Freeze after %d failed pauses: %v", freezeAttempts-1, err)
	}
	if !f.frozen || !f.recorded {
		t.Fatal("Freeze returned before the engine recorded the pause")
	}
	if err := e.Thaw(ctx, "c"); err != nil || f.frozen {
		t.Fatalf("Thaw: %v (frozen %v)", err, f.frozen)
	}

	f = &freezeFake{failPauses: freezeAttempts}
	if err := (&Engine{api: f}).Freeze(ctx, "c"); err == nil {
		t.Fatal("Freeze succeeded although every pause failed")
	}

	// Control: the raw pause then unpause, without waiting for the record.
	f = &freezeFake{lag: 3}
	_ = f.ContainerPause(ctx, "c")
	if err := f.ContainerUnpause(ctx, "c"); err == nil || !f.frozen {
		t.Fatal("control failed: an unrecorded pause was undone, so the wait proves nothing")
	}
}
