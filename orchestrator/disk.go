package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/hostfs"
)

// ErrDiskBound is matched (errors.Is) by a DiskError: a task's workspace
// grew past its size bound, or the host's free space fell below its floor.
var ErrDiskBound = errors.New("disk bound crossed")

// DiskError says which disk bound a task crossed and what became of its
// work.
type DiskError struct {
	Reason string
	// Kept says where the work so far is (set once the task's commit ran).
	Kept string
}

func (e *DiskError) Error() string {
	if e.Kept == "" {
		return e.Reason
	}
	return e.Reason + "; " + e.Kept
}

// Is makes errors.Is(err, ErrDiskBound) true.
func (e *DiskError) Is(target error) bool { return target == ErrDiskBound }

// How often the disk guard looks. A statfs of the state directory is a
// system call; measuring the worktree is a walk of it with the sandbox
// frozen, so it runs only when the host's free space fell by as much as
// the workspace has left to its bound, and otherwise at most every
// diskMeasureEvery (or twenty times its own cost, whichever is longer).
const (
	diskCheckEvery   = time.Second
	diskMeasureEvery = 10 * time.Second
	// diskKeepLargest is how many of the largest files a bounded commit may
	// leave out.
	diskKeepLargest = 64
)

// freeBytes is the space left to unprivileged users on dir's file system.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// guardDisk watches the disk use of the worktree dir (sb's workspace)
// until the returned stop is called and cancels the run with a *DiskError
// as the cause when the worktree grows past Options.DiskLimit or the state
// directory's free space falls below Options.MinFree. Worktrees live under the state directory, so the
// worktree cannot have grown by more than the free space fell: while
// that drop is smaller than what is left to the bound, no walk is needed.
func (o *Orchestrator) guardDisk(ctx context.Context, dir string, sb *sandbox.Sandbox, cancel context.CancelCauseFunc) (stop func()) {
	limit, floor := o.opts.DiskLimit, o.opts.MinFree
	if limit <= 0 && floor <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(diskCheckEvery)
		defer tick.Stop()
		lastFree, _ := freeBytes(o.opts.StateDir)
		lastSize := int64(-1)
		var lastAt time.Time
		every := diskMeasureEvery
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			free, ferr := freeBytes(o.opts.StateDir)
			if ferr == nil && floor > 0 && free < floor {
				cancel(&DiskError{Reason: fmt.Sprintf("the host's free space under %s fell to %s, below the floor of %s (sandbox.min_free)", o.opts.StateDir, human(free), human(floor))})
				return
			}
			if limit <= 0 {
				continue
			}
			if lastSize >= 0 && time.Since(lastAt) < every && ferr == nil && lastFree-free < limit-lastSize {
				continue
			}
			start := time.Now()
			var ts hostfs.TreeSize
			err := o.whileFrozen(ctx, dir, []*sandbox.Sandbox{sb}, func() (err error) {
				ts, err = hostfs.MeasureTree(dir, limit, 0)
				return err
			})
			switch {
			case errors.Is(err, hostfs.ErrTooManyEntries):
				cancel(&DiskError{Reason: fmt.Sprintf("the workspace holds more than %d entries", hostfs.MaxTreeEntries)})
				return
			case errors.Is(err, hostfs.ErrTooDeep):
				cancel(&DiskError{Reason: fmt.Sprintf("the workspace nests directories more than %d deep", hostfs.MaxTreeDepth)})
				return
			case err != nil:
				continue // the run's own steps report engine trouble
			case ts.Stopped:
				cancel(&DiskError{Reason: fmt.Sprintf("the workspace grew past its bound of %s (sandbox.disk)", human(limit))})
				return
			}
			lastSize, lastAt, lastFree = ts.Bytes, time.Now(), free
			every = max(diskMeasureEvery, 20*time.Since(start))
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// boundedExclusions measures the worktree at dir (the caller holds every
// sandbox over it frozen) and, when it is over Options.DiskLimit, picks
// the largest files to leave out of the commit so that git copies no more
// than the bound into the repository. derr describes the crossing; all is
// false when leaving out the largest files is not enough, and then
// nothing should be committed.
func (o *Orchestrator) boundedExclusions(dir string) (exclude []string, all bool, derr *DiskError) {
	limit := o.opts.DiskLimit
	if limit <= 0 {
		return nil, true, nil
	}
	ts, err := hostfs.MeasureTree(dir, limit, 0)
	if err == nil && !ts.Stopped {
		return nil, true, nil
	}
	if err == nil {
		ts, err = hostfs.MeasureTree(dir, 0, diskKeepLargest)
	}
	if err != nil {
		return nil, false, &DiskError{Reason: fmt.Sprintf("the workspace could not be measured against its bound of %s (sandbox.disk): %v", human(limit), err)}
	}
	derr = &DiskError{Reason: fmt.Sprintf("the workspace grew to %s, past its bound of %s (sandbox.disk)", human(ts.Bytes), human(limit))}
	total := ts.Bytes
	var names []string
	for _, f := range ts.Largest {
		if total <= limit {
			break
		}
		exclude = append(exclude, f.Path)
		names = append(names, fmt.Sprintf("%s (%s)", f.Path, human(f.Bytes)))
		total -= f.Bytes
	}
	if total > limit {
		return nil, false, derr
	}
	derr.Kept = "left out of the commit: " + strings.Join(names, ", ")
	return exclude, true, derr
}

// commitBounded commits the worktree's changes with every sandbox over it
// frozen, never more than the disk bound: see boundedExclusions. It
// returns the new commit ("" when there was nothing, or nothing could be,
// committed) and, when the bound was crossed, a *DiskError saying what was
// left out.
func (o *Orchestrator) commitBounded(ctx context.Context, repo *worktree.Repo, wt *worktree.Worktree, sbs []*sandbox.Sandbox, message string) (id string, derr *DiskError, err error) {
	err = o.whileFrozen(ctx, wt.Path, sbs, func() (err error) {
		excl, ok, d := o.boundedExclusions(wt.Path)
		derr = d
		if !ok {
			return nil
		}
		id, err = repo.CommitAll(ctx, wt, message, excl...)
		return err
	})
	return id, derr, err
}

// human writes a byte count the way people read it.
func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// diskStop is why a run that crossed a disk bound ended: the guard's
// reason (or the commit's), and where the work so far is.
func (r *Run) diskStop(bound, committed *DiskError) *DiskError {
	t := r.Task
	de := &DiskError{}
	if bound != nil {
		de.Reason = bound.Reason + ": the task was stopped"
	} else {
		de.Reason = committed.Reason + ": the task was stopped"
	}
	switch {
	case committed != nil && committed.Kept == "":
		de.Kept = "nothing more was committed (leaving out its largest files was not enough); every file stays in the worktree"
	case len(t.Commits) > 0:
		de.Kept = "the work so far is committed on branch " + t.Branch
		if committed != nil {
			de.Kept += ", " + committed.Kept + " (they stay in the worktree)"
		}
	default:
		de.Kept = "every file stays in the worktree"
	}
	return de
}
