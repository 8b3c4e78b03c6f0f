package worktree

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Commit is one commit of a task branch.
type Commit struct {
	ID      string `json:"id"`
	Subject string `json:"subject"`
	Author  string `json:"author"`
}

// Log lists the commits reachable from to and not from from, newest first.
func (r *Repo) Log(ctx context.Context, from, to string) ([]Commit, error) {
	out, err := r.g.out(ctx, r.CommonDir, "", "log", "--no-ext-diff", "--no-textconv", "--no-color",
		"--format=%H%x00%s%x00%an%x00", from+".."+to, "--")
	if err != nil {
		return nil, fmt.Errorf("git log: %w", err)
	}
	f := strings.Split(out, "\x00")
	var cs []Commit
	for i := 0; i+2 < len(f); i += 3 {
		cs = append(cs, Commit{ID: strings.TrimSpace(f[i]), Subject: f[i+1], Author: f[i+2]})
	}
	return cs, nil
}

// FileStat is one changed file.
type FileStat struct {
	Path string `json:"path"`
	// Status is git's letter: A added, M modified, D deleted, T type change.
	Status  string `json:"status"`
	Added   int    `json:"added"`
	Deleted int    `json:"deleted"`
	Binary  bool   `json:"binary,omitempty"`
	// Mode is the new file mode ("100644", "100755", "120000" for a
	// symlink); empty for a deleted file.
	Mode string `json:"mode,omitempty"`
	// OldMode is the mode before a change of mode ("" when the mode did
	// not change, or the file is new).
	OldMode string `json:"old_mode,omitempty"`
	// LinkTarget is where a new or changed symlink points.
	LinkTarget string `json:"link_target,omitempty"`
}

// Stat is a diffstat.
type Stat struct {
	Files   []FileStat `json:"files"`
	Added   int        `json:"added"`
	Deleted int        `json:"deleted"`
}

// String is git's one-line summary ("2 files changed, 3 insertions(+), 1 deletion(-)").
func (s Stat) String() string {
	return fmt.Sprintf("%d file%s changed, %d insertion%s(+), %d deletion%s(-)",
		len(s.Files), plural(len(s.Files)), s.Added, plural(s.Added), s.Deleted, plural(s.Deleted))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// DiffStat compares two commits (renames are shown as delete + add).
func (r *Repo) DiffStat(ctx context.Context, from, to string) (Stat, error) {
	var st Stat
	raw, err := r.g.out(ctx, r.CommonDir, "", "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--raw", "--no-abbrev", "-z", from, to, "--")
	if err != nil {
		return st, fmt.Errorf("git diff: %w", err)
	}
	byPath := map[string]int{}
	rf := strings.Split(raw, "\x00")
	for i := 0; i+1 < len(rf); i += 2 {
		// ":old_mode new_mode old_sha new_sha status" NUL path
		meta := strings.Fields(strings.TrimPrefix(rf[i], ":"))
		if len(meta) < 5 {
			continue
		}
		f := FileStat{Path: rf[i+1], Status: meta[4]}
		if meta[1] != "000000" {
			f.Mode = meta[1]
		}
		if meta[0] != "000000" && meta[1] != "000000" && meta[0] != meta[1] {
			f.OldMode = meta[0]
		}
		if meta[1] == "120000" {
			if target, err := r.g.out(ctx, r.CommonDir, "", "cat-file", "blob", meta[3]); err == nil {
				f.LinkTarget = target
			}
		}
		byPath[f.Path] = len(st.Files)
		st.Files = append(st.Files, f)
	}
	num, err := r.g.out(ctx, r.CommonDir, "", "diff", "--no-ext-diff", "--no-textconv", "--no-renames", "--numstat", "-z", from, to, "--")
	if err != nil {
		return st, fmt.Errorf("git diff: %w", err)
	}
	for _, rec := range lines(num, 0) {
		parts := strings.SplitN(rec, "\t", 3)
		if len(parts) != 3 {
			continue
		}
		i, ok := byPath[parts[2]]
		if !ok {
			continue
		}
		if parts[0] == "-" {
			st.Files[i].Binary = true
			continue
		}
		st.Files[i].Added, _ = strconv.Atoi(parts[0])
		st.Files[i].Deleted, _ = strconv.Atoi(parts[1])
		st.Added += st.Files[i].Added
		st.Deleted += st.Files[i].Deleted
	}
	return st, nil
}

// Diff writes the patch between two commits to w.
func (r *Repo) Diff(ctx context.Context, from, to string, w io.Writer) error {
	_, err := r.g.run(ctx, invocation{gitDir: r.CommonDir, stdout: w,
		args: []string{"diff", "--no-ext-diff", "--no-textconv", "--no-color", "--stat", "--patch", from, to, "--"}})
	if err != nil {
		return fmt.Errorf("git diff: %w", err)
	}
	return nil
}

// DiffWorktree writes the patch between a commit and the worktree's files
// (tracked files only; uncommitted work of a running or interrupted task).
func (r *Repo) DiffWorktree(ctx context.Context, w *Worktree, from string, out io.Writer) error {
	// git cannot hash a FIFO, socket or device and stops: those are left
	// out, as they are of every commit.
	changes, err := r.Changes(ctx, w)
	if err != nil {
		return err
	}
	args := append(r.noFilters(ctx, w.GitDir), "diff", "--no-ext-diff", "--no-textconv", "--no-color", "--stat", "--patch", from, "--", ".")
	for _, n := range r.specialFiles(w.Path, changes) {
		args = append(args, ":(exclude,literal)"+n)
	}
	_, err = r.g.run(ctx, invocation{gitDir: w.GitDir, workTree: w.Path, stdout: out, args: args, env: []string{"GIT_LITERAL_PATHSPECS=0"}})
	if err != nil {
		return fmt.Errorf("git diff: %w", err)
	}
	return nil
}
