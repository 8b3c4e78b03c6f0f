package orchestrator

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/sandbox"
)

// A task's sandbox gets GPUs only when asked (--gpus all or ids), as the
// engine's NVIDIA device requests; the review says so.
func TestTaskSandboxGPUs(t *testing.T) {
	for in, want := range map[string]string{"": "", "none": "", "all": "all", "0,1": "0,1"} {
		if got, err := taskGPUs(in); err != nil || got != want {
			t.Errorf("taskGPUs(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"amd", "auto", "x"} {
		if _, err := taskGPUs(bad); err == nil {
			t.Errorf("taskGPUs(%q) accepted", bad)
		}
	}
	o, err := New(Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	spec := o.sandboxSpec(&store.Task{ID: "t1", Worktree: "/w"}, "agent-task")
	if len(spec.DeviceRequests) != 0 {
		t.Fatalf("a task without --gpus has devices: %+v", spec.DeviceRequests)
	}
	spec = o.sandboxSpec(&store.Task{ID: "t1", Worktree: "/w", GPUs: "all"}, "agent-task")
	if r := spec.DeviceRequests; len(r) != 1 || r[0].Driver != "nvidia" || r[0].Count != -1 || !slices.Equal(r[0].Capabilities[0], []string{"gpu"}) {
		t.Errorf("--gpus all: %+v", r)
	}
	spec = o.sandboxSpec(&store.Task{ID: "t1", Worktree: "/w", GPUs: "1"}, "agent-task")
	if r := spec.DeviceRequests; len(r) != 1 || !slices.Equal(r[0].DeviceIDs, []string{"1"}) || r[0].Count != 0 {
		t.Errorf("--gpus 1: %+v", r)
	}
}

func TestReviewShowsGPUs(t *testing.T) {
	if !strings.Contains(gpuWarning("0"), "--gpus 0") {
		t.Error("the review's GPU warning does not name the GPUs")
	}
}

// What the GPU memory check could not tell is kept with the task and
// repeated in its review, beside the GPU warning.
func TestReviewRepeatsGPUNote(t *testing.T) {
	const note = "could not read GPU memory (nvidia-smi: exit status 9): the sandbox shares the model server's GPU without a VRAM check"
	for _, withNote := range []bool{false, true} {
		f := newLocalFixture(t, writeGreetScript)
		ctx := context.Background()
		opts := TaskOptions{Prompt: "write greet.txt", RepoDir: f.repo, LLM: "script:" + f.script, GPUs: "0"}
		if withNote {
			opts.GPUNote = note
		}
		r, err := f.o.NewTask(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Execute(ctx); err != nil {
			t.Fatal(err)
		}
		r.Close()
		saved, err := f.o.store.Load(r.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := f.o.Review(ctx, saved)
		if err != nil {
			t.Fatal(err)
		}
		got := slices.Contains(rev.Warnings, note)
		if got != withNote || !slices.Contains(rev.Warnings, gpuWarning("0")) {
			t.Errorf("note given %v: review warnings %q", withNote, rev.Warnings)
		}
	}
}

// noticeBackend is a backend whose sandboxes come with a notice, as an
// engine that cannot apply cgroup limits gives them.
type noticeBackend struct {
	sandbox.Backend
	notice string
}

func (b noticeBackend) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, spec)
	if err == nil {
		sb.Notice = b.notice
	}
	return sb, err
}

// What the engine could not enforce on the task's sandbox (no memory or
// CPU limit under rootless Podman on cgroup v1) is kept with the task and
// repeated in its review. Control: a sandbox without a notice adds no
// warning.
func TestReviewRepeatsSandboxNote(t *testing.T) {
	const note = "the container engine cannot apply cgroup limits: the sandbox's memory and CPU are NOT limited"
	for _, withNote := range []bool{false, true} {
		f := newLocalFixture(t, writeGreetScript)
		if withNote {
			f.o.opts.Engine = func(context.Context) (sandbox.Backend, error) { return noticeBackend{f.local, note}, nil }
		}
		ctx := context.Background()
		r, err := f.o.NewTask(ctx, TaskOptions{Prompt: "write greet.txt", RepoDir: f.repo, LLM: "script:" + f.script})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Execute(ctx); err != nil {
			t.Fatal(err)
		}
		r.Close()
		saved, err := f.o.store.Load(r.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := f.o.Review(ctx, saved)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Contains(rev.Warnings, note); got != withNote {
			t.Errorf("notice given %v: review warnings %q", withNote, rev.Warnings)
		}
	}
}
