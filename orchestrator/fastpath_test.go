package orchestrator

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/orchestrator/store"
	"github.com/localagent/agent/orchestrator/worktree"
	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
)

// describeTree maps every entry under root (but a top-level .git) to its
// type, permissions and content or link target, and checks that all of it
// is owned by uid:gid when uid >= 0.
func describeTree(t *testing.T, root string, uid, gid int) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".git" {
			// A linked worktree's pointer file; skipping a file would
			// skip the rest of its directory.
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if uid >= 0 && (int(st.Uid) != uid || int(st.Gid) != gid) {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
		if rel == "." {
			return nil
		}
		fi, _ := d.Info()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			m[rel] = "link -> " + l
		case fi.IsDir():
			m[rel] = fmt.Sprintf("dir %v", fi.Mode().Perm())
		default:
			b, _ := os.ReadFile(p)
			m[rel] = fmt.Sprintf("file %v %q", fi.Mode().Perm(), b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: %s missing (want %s)", what, p, w)
		} else if g != w {
			t.Errorf("%s: %s is %s, want %s", what, p, g, w)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: %s (%s) is not in a plain checkout", what, p, g)
		}
	}
}

// Every way a worktree gets its files (a checkout, the spare of its
// commit, a spare of another commit brought to it at claim time or ahead
// of time after a merge, a sub-agent's fill) gives what the agent would
// see in a plain `git worktree add` of the commit plus the approved
// untracked files: the same names, bytes, modes, symlinks and submodule
// directories, no ignored file of the user's checkout, all owned by the
// sandbox user, with nothing to commit.
func TestFastPathsEqualPlainCheckout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	git := func(args ...string) string { return testGit(t, dir, args...) }
	put := func(p, content string, mode os.FileMode) {
		t.Helper()
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q", "-b", "main")
	put(".gitignore", "*.log\n.env\n", 0o644)
	put(".gitattributes", "*.bin filter=lfs diff=lfs merge=lfs -text\n", 0o644)
	put("model.bin", "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n", 0o644)
	put("src/main.go", "package main\n", 0o644)
	put("run.sh", "#!/bin/sh\n", 0o755)
	put("old/gone.txt", "gone\n", 0o644)
	if err := os.Symlink("src/main.go", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	git("add", "-A")
	git("commit", "-q", "-m", "one")
	git("update-index", "--add", "--cacheinfo", "160000,"+git("rev-parse", "HEAD")+",third_party/lib")
	git("commit", "-q", "-m", "submodule")
	first := git("rev-parse", "HEAD")
	// Untracked in the user's checkout: approved (.env) and not (debug.log).
	put(".env", "SECRET=approved\n", 0o600)
	put("debug.log", "never copied\n", 0o644)

	// The user a new worktree's sandbox runs as (made by this process).
	u := sandbox.ChooseUser(os.Geteuid(), os.Getegid(), os.Geteuid(), os.Getegid())
	state := t.TempDir()
	o, err := New(Options{StateDir: state, SpareCheckouts: 1, Environment: EnvironmentOptions{Include: []string{".env"}}})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := worktree.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	add := func(commit string) *worktree.Worktree {
		t.Helper()
		n++
		w, err := repo.Add(ctx, worktree.AddOptions{Path: filepath.Join(state, "worktrees", fmt.Sprint(n)), Branch: fmt.Sprintf("agent/w%d", n), Start: commit, NoCheckout: true})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	plain := func(commit string, extras bool) map[string]string {
		t.Helper()
		p := filepath.Join(t.TempDir(), "plain")
		git("worktree", "add", "-q", "--detach", p, commit)
		t.Cleanup(func() { _ = exec.Command("git", "-C", dir, "worktree", "remove", "--force", p).Run() })
		if extras {
			if err := os.WriteFile(filepath.Join(p, ".env"), []byte("SECRET=approved\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return describeTree(t, p, -1, -1)
	}
	spares := func() []string {
		ents, _ := os.ReadDir(o.sparesDir())
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	check := func(what string, w *worktree.Worktree, commit string, extras bool) {
		t.Helper()
		sameTree(t, what, describeTree(t, w.Path, u.UID, u.GID), plain(commit, extras))
		if ch, err := repo.Changes(ctx, w); err != nil || len(ch) != 0 {
			t.Errorf("%s: changes %v %v, want none", what, ch, err)
		}
	}
	task := func(commit string) *store.Task { return &store.Task{ID: "t", StartCommit: commit} }

	// A checkout: no spare yet.
	w := add(first)
	if err := o.populateFast(ctx, repo, w, task(first), u); err != nil {
		t.Fatal(err)
	}
	check("checkout", w, first, true)
	o.WaitSpares()
	if len(spares()) != 1 {
		t.Fatalf("spares after the first worktree: %v", spares())
	}
	// The spare of the commit.
	w = add(first)
	if err := o.populateFast(ctx, repo, w, task(first), u); err != nil {
		t.Fatal(err)
	}
	check("spare of the commit", w, first, true)
	o.WaitSpares()

	// A new commit: the spare of the first is brought to it.
	put("src/main.go", "package main // changed\n", 0o644)
	put("src/new/deep.go", "package new\n", 0o644)
	put("run.sh", "#!/bin/sh\nexit 0\n", 0o644)
	git("rm", "-q", "-r", "old", "link")
	put("link", "a file now\n", 0o644)
	if err := os.Symlink("../src", filepath.Join(dir, "old")); err != nil {
		t.Fatal(err)
	}
	git("add", "-A")
	git("commit", "-q", "-m", "two")
	second := git("rev-parse", "HEAD")
	// A mark in the spare shows where its files go.
	before := spares()
	if len(before) != 1 {
		t.Fatalf("spares before the new commit: %v", before)
	}
	if err := os.WriteFile(filepath.Join(o.sparesDir(), before[0], "files", "from-spare"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w = add(second)
	if err := o.populateFast(ctx, repo, w, task(second), u); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(w.Path, "from-spare")); err != nil {
		t.Fatalf("the worktree of the new commit was not made from the spare of the first: %v", err)
	}
	check("spare of another commit", w, second, true)
	o.WaitSpares()

	// After a merge the spare is made ready for the new tip ahead of time.
	put("merged.txt", "merged\n", 0o644)
	git("add", "-A")
	git("commit", "-q", "-m", "three")
	third := git("rev-parse", "HEAD")
	o.prepareSpare(repo, third)
	o.WaitSpares()
	key, _ := repo.SpareKey(ctx, third, u.UID, u.GID)
	if _, err := os.Lstat(filepath.Join(o.sparesDir(), key)); err != nil {
		t.Fatalf("no spare of the merged tip: %v (spares %v)", err, spares())
	}
	w = add(third)
	if err := o.populateFast(ctx, repo, w, task(third), u); err != nil {
		t.Fatal(err)
	}
	check("spare prepared after a merge", w, third, true)
	o.WaitSpares()

	// A sub-agent's worktree, at a snapshot of its parent's files: the
	// same fast path (a spare of another commit here), without the
	// extras, so nothing but the update hands the files over.
	put("src/main.go", "package main // the parent's change\n", 0o644)
	put("src/sub/x.go", "package sub\n", 0o644)
	git("add", "-A")
	git("commit", "-q", "-m", "snapshot")
	snap := git("rev-parse", "HEAD")
	w = add(snap)
	s := &spawner{r: &Run{o: o}}
	if err := s.fill(ctx, repo, w, u); err != nil {
		t.Fatal(err)
	}
	check("sub-agent", w, snap, false)
	o.WaitSpares()
}

// The agent never sees a partial tree: a new worktree's files are written
// while the sandbox starts, and its first tool call, asked for at once,
// waits until they are all there. The control run, with the sandbox not
// held (Unsafe.NoHold), shows the same call finding an empty workspace.
func TestFirstToolCallNeverSeesPartialTree(t *testing.T) {
	const script = `model: scripted
turns:
  - tool_calls:
      - {name: read_file, arguments: {path: README.md}}
  - expect: {last_role: tool, tool_result_contains: "# x"}
    text: Read it.
`
	fillHook = func() { time.Sleep(400 * time.Millisecond) }
	t.Cleanup(func() { fillHook = nil })
	for _, held := range []bool{true, false} {
		f := newLocalFixture(t, script)
		f.o.opts.Unsafe.NoHold = !held
		ctx := context.Background()
		r, err := f.o.NewTask(ctx, TaskOptions{Prompt: "read the readme", RepoDir: f.repo, LLM: "script:" + f.script})
		if err != nil {
			t.Fatal(err)
		}
		err = r.Execute(ctx)
		r.Close()
		if held && err != nil {
			t.Fatalf("held sandbox: %v", err)
		}
		b, _ := os.ReadFile(r.Task.Session)
		sawMissing := strings.Contains(string(b), "README.md does not exist")
		if held && (err != nil || sawMissing) {
			t.Fatalf("held sandbox: %v; the first read_file found no README.md: %v", err, sawMissing)
		}
		if !held && !sawMissing {
			t.Fatalf("control: with the sandbox not held, the first tool call still saw the file (was the fill slowed down?): %v", err)
		}
		if held && r.Task.Timings.Ready < 400 {
			t.Errorf("ready after %d ms, before the files were written", r.Task.Timings.Ready)
		}
		if !r.Task.Populated {
			t.Errorf("held=%v: the record does not say the worktree is populated", held)
		}
	}
}

// recordingBackend remembers the spec of every sandbox it creates.
type recordingBackend struct {
	*sandboxtest.Local
	mu    sync.Mutex
	specs []sandbox.Spec
}

func (b *recordingBackend) Create(ctx context.Context, spec sandbox.Spec) (*sandbox.Sandbox, error) {
	b.mu.Lock()
	b.specs = append(b.specs, spec)
	b.mu.Unlock()
	return b.Local.Create(ctx, spec)
}

// No sandbox ever mounts a spare checkout: tasks and sub-agents started
// from spares (of their commit and of another) mount their own worktree,
// and no mount of theirs holds or lies in the spares directory.
func TestSparesNeverMounted(t *testing.T) {
	f := newLocalFixture(t, `model: scripted
slots: 1
turns:
  - tool_calls:
      - {name: spawn_agents, arguments: {tasks: [{name: helper, prompt: "write sub.txt"}]}}
  - tool_calls:
      - {name: write_file, arguments: {path: sub.txt, content: "from the sub-agent\n"}}
  - text: Wrote sub.txt.
  - expect: {tool_result_contains: "helper"}
    text: The helper wrote sub.txt.
`)
	rec := &recordingBackend{Local: f.local}
	f.o.opts.Engine = func(context.Context) (sandbox.Backend, error) { return rec, nil }
	f.o.opts.SubAgents = true
	f.o.opts.SpareCheckouts = 1
	for range 3 {
		f.run(t)
		f.o.WaitSpares()
		testGit(t, f.repo, "commit", "-q", "--allow-empty", "-m", "next")
	}
	if ents, _ := os.ReadDir(f.o.sparesDir()); len(ents) == 0 {
		t.Fatal("no spare was made: the test does not exercise them")
	}
	inside := func(p, dir string) bool {
		rel, err := filepath.Rel(dir, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	spares := f.o.sparesDir()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.specs) < 6 {
		t.Fatalf("%d sandboxes, want 3 tasks and 3 sub-agents", len(rec.specs))
	}
	for _, s := range rec.specs {
		paths := []string{s.Workspace, s.History, s.EgressDir}
		for _, m := range s.Mounts {
			paths = append(paths, m.Source)
		}
		for _, p := range paths {
			if p != "" && (inside(p, spares) || inside(spares, p)) {
				t.Errorf("sandbox %s mounts %s, and the spares are in %s", s.Name, p, spares)
			}
		}
	}
}

// The notice about the user's uncommitted changes, read while the task
// starts, is shown before the run ends.
func TestDirtyNoticeShownDuringRun(t *testing.T) {
	f := newLocalFixture(t, writeGreetScript)
	rec := &event.Recorder{}
	f.o.opts.Sink = rec
	if err := os.WriteFile(filepath.Join(f.repo, "scratch.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.run(t)
	for _, e := range rec.Events() {
		if e.Kind == event.Notice && strings.Contains(e.Text, "1 uncommitted change(s)") {
			return
		}
	}
	t.Fatalf("no notice about the uncommitted change: %+v", rec.Events())
}
