package sandbox

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// createFake counts creations in flight and fails the first calls of each
// kind as told.
type createFake struct {
	engine

	mu                      sync.Mutex
	inFlight, maxInFlight   int
	createFails, startFails []error
	creates, starts         int
	removed                 []string
}

func (f *createFake) ContainerCreate(_ context.Context, _ *container.Config, _ *container.HostConfig, _ *network.NetworkingConfig, _ *ocispec.Platform, name string) (container.CreateResponse, error) {
	f.mu.Lock()
	f.creates++
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	var err error
	if len(f.createFails) > 0 {
		err, f.createFails = f.createFails[0], f.createFails[1:]
	}
	f.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
	return container.CreateResponse{ID: "id-" + name}, err
}

func (f *createFake) ContainerStart(context.Context, string, container.StartOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	if len(f.startFails) > 0 {
		err := f.startFails[0]
		f.startFails = f.startFails[1:]
		return err
	}
	return nil
}

func (f *createFake) ContainerRemove(_ context.Context, id string, _ container.RemoveOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, id)
	return nil
}

func TestCreationsBoundedTowardEngine(t *testing.T) {
	f := &createFake{}
	e := &Engine{api: f}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 4 * createSlots() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.createAndStart(context.Background(), &container.Config{}, &container.HostConfig{}, "c"+string(rune('a'+i))); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d creations failed", failed.Load())
	}
	if f.maxInFlight > createSlots() || f.maxInFlight < 2 {
		t.Fatalf("%d creations in flight at once, want between 2 and %d", f.maxInFlight, createSlots())
	}
}

func TestTransientEngineErrorsRetried(t *testing.T) {
	f := &createFake{
		createFails: []error{cerrdefs.ErrUnavailable.WithMessage("daemon busy")},
		startFails:  []error{cerrdefs.ErrInternal.WithMessage("OCI runtime: resource temporarily unavailable")},
	}
	e := &Engine{api: f}
	c, err := e.createAndStart(context.Background(), &container.Config{}, &container.HostConfig{}, "x")
	if err != nil || c.ID != "id-x" {
		t.Fatalf("create after transient errors: %+v %v", c, err)
	}
	if f.creates != 2 || f.starts != 2 {
		t.Fatalf("creates %d, starts %d; want 2 each", f.creates, f.starts)
	}
	// The create that failed may have left a container: it is removed by
	// name before the retry.
	if len(f.removed) != 1 || f.removed[0] != "x" {
		t.Fatalf("removed %v before retrying, want [x]", f.removed)
	}
}

func TestPermanentEngineErrorsNotRetried(t *testing.T) {
	for _, perm := range []error{
		cerrdefs.ErrInvalidArgument.WithMessage("invalid mount config"),
		cerrdefs.ErrConflict.WithMessage("name in use"),
		errors.New("some error of no known kind"),
	} {
		f := &createFake{createFails: []error{perm}}
		e := &Engine{api: f}
		_, err := e.createAndStart(context.Background(), &container.Config{}, &container.HostConfig{}, "x")
		if !errors.Is(err, perm) || f.creates != 1 {
			t.Fatalf("%v: err %v after %d creates, want it returned after 1", perm, err, f.creates)
		}
	}
	// A transient error that persists is given up on after engineRetries.
	f := &createFake{startFails: []error{cerrdefs.ErrUnavailable, cerrdefs.ErrUnavailable, cerrdefs.ErrUnavailable, cerrdefs.ErrUnavailable}}
	e := &Engine{api: f}
	if _, err := e.createAndStart(context.Background(), &container.Config{}, &container.HostConfig{}, "x"); !cerrdefs.IsUnavailable(err) || f.starts != engineRetries {
		t.Fatalf("err %v after %d starts, want unavailable after %d", err, f.starts, engineRetries)
	}
}
