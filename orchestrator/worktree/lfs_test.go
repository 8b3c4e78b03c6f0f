package worktree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A pointer whose object is present is listed; a file marked lfs but
// committed with its contents (larger than any pointer) is skipped
// without being read, and does not shift the pointers after it.
func TestLFSFilesSkipsNonPointers(t *testing.T) {
	ctx := context.Background()
	dir := newRepo(t)
	content := "the real contents\n"
	sum := sha256.Sum256([]byte(content))
	oid := hex.EncodeToString(sum[:])
	pointer := "version https://git-lfs.github.com/spec/v1\noid sha256:" + oid + "\nsize " + strconv.Itoa(len(content)) + "\n"
	write(t, filepath.Join(dir, ".gitattributes"), "*.bin filter=lfs\n")
	write(t, filepath.Join(dir, "a-big.bin"), strings.Repeat("x", 4096))
	write(t, filepath.Join(dir, "b.bin"), pointer)
	plainGit(t, dir, "add", ".")
	plainGit(t, dir, "commit", "-q", "-m", "lfs")
	obj := filepath.Join(dir, ".git", "lfs", "objects", oid[0:2], oid[2:4], oid)
	write(t, obj, content)
	r := openRepo(t, dir)
	base, _ := r.ResolveBase(ctx, "")
	w, err := r.Add(ctx, AddOptions{Path: filepath.Join(t.TempDir(), "w"), Branch: "agent/lfs", Start: base.Commit})
	if err != nil {
		t.Fatal(err)
	}
	files, err := r.LFSFiles(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Path != "b.bin" || files[0].Object != obj {
		t.Fatalf("LFSFiles = %+v, want b.bin alone", files)
	}
}
