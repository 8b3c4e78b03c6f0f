package toolbox

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

func TestResolve(t *testing.T) {
	s := &Server{Root: "/workspace"}
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "", want: "/workspace"},
		{in: ".", want: "/workspace"},
		{in: "a/b.go", want: "/workspace/a/b.go"},
		{in: "./a/../b", want: "/workspace/b"},
		{in: "/workspace/x", want: "/workspace/x"},
		{in: "/workspace", want: "/workspace"},
		{in: "../x", bad: true},
		{in: "..", bad: true},
		{in: "a/../../x", bad: true},
		{in: "/etc/passwd", bad: true},
		{in: "/workspace2/x", bad: true},
		{in: "a\x00b", bad: true},
	}
	for _, tc := range tests {
		got, err := s.resolve(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("resolve(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("resolve(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	_, err := s.resolve("../x")
	if want := "path ../x is outside the workspace /workspace"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v does not say %q", err, want)
	}
}

func TestPathsOutsideWorkspaceRefusedByEveryTool(t *testing.T) {
	s := newTestServer(t)
	for _, tc := range []struct {
		tool string
		args any
	}{
		{ToolReadFile, ReadFileArgs{Path: "../x"}},
		{ToolReadFile, ReadFileArgs{Path: "/etc/passwd"}},
		{ToolWriteFile, WriteFileArgs{Path: "../x", Content: "x"}},
		{ToolEditFile, EditFileArgs{Path: "../x", OldString: "a", NewString: "b"}},
		{ToolMultiEdit, MultiEditArgs{Path: "/etc/hosts", Edits: []Edit{{OldString: "a", NewString: "b"}}}},
		{ToolListDir, ListDirArgs{Path: ".."}},
		{ToolGlob, GlobArgs{Pattern: "*", Path: "../"}},
		{ToolGlob, GlobArgs{Pattern: "../*"}},
		{ToolGlob, GlobArgs{Pattern: "/etc/*"}},
		{ToolGrep, GrepArgs{Pattern: "root", Path: "/etc"}},
	} {
		r := call(t, s, tc.tool, tc.args)
		if !r.IsError || !strings.Contains(r.Output, "outside") && !strings.Contains(r.Output, "leaves") {
			t.Errorf("%s %+v: got %+v, want an outside-the-workspace error", tc.tool, tc.args, r)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(s.Root), "x")); err == nil {
		t.Error("write_file created a file outside the root")
	}
}

func TestReadFile(t *testing.T) {
	s := newTestServer(t)
	s.Limits = Limits{ReadLines: 5, LineChars: 10}
	writeTestFile(t, s.Root, "ten.txt", "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\n")
	writeTestFile(t, s.Root, "three.txt", "a\nb\nc")
	writeTestFile(t, s.Root, "crlf.txt", "a\r\nb\r\n")
	writeTestFile(t, s.Root, "long.txt", "short\n"+strings.Repeat("x", 25)+"\n")
	writeTestFile(t, s.Root, "utf8.txt", strings.Repeat("é", 8)+"\n") // 16 bytes
	writeTestFile(t, s.Root, "bin.dat", "ELF\x00\x01\x02")
	writeTestFile(t, s.Root, "empty.txt", "")
	writeTestFile(t, s.Root, "blank.txt", "\n\n")
	if err := os.Mkdir(filepath.Join(s.Root, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      any
		isError   bool
		exact     string
		wants     []string
		truncated bool
	}{
		{name: "whole", args: ReadFileArgs{Path: "three.txt"}, exact: numbered("a", "b", "c")},
		{name: "absolute", args: ReadFileArgs{Path: filepath.Join(s.Root, "three.txt")}, exact: numbered("a", "b", "c")},
		{name: "default limit", args: ReadFileArgs{Path: "ten.txt"}, truncated: true,
			exact: numbered("l1", "l2", "l3", "l4", "l5") + "... 5 more lines; use offset=6 to read on\n"},
		{name: "offset and limit", args: ReadFileArgs{Path: "ten.txt", Offset: 9, Limit: 1}, truncated: true,
			exact: "     9\tl9\n... 1 more line; use offset=10 to read on\n"},
		{name: "tail", args: ReadFileArgs{Path: "ten.txt", Offset: 9}, exact: "     9\tl9\n    10\tl10\n"},
		{name: "offset past end", args: ReadFileArgs{Path: "three.txt", Offset: 4}, isError: true, wants: []string{"past the end", "3 lines"}},
		{name: "crlf", args: ReadFileArgs{Path: "crlf.txt"}, exact: numbered("a", "b")},
		{name: "blank lines", args: ReadFileArgs{Path: "blank.txt"}, exact: numbered("", "")},
		{name: "long line cut", args: ReadFileArgs{Path: "long.txt"}, truncated: true,
			exact: numbered("short", "xxxxxxxxxx [... line cut at 10 of 25 bytes]")},
		{name: "cut on rune boundary", args: ReadFileArgs{Path: "utf8.txt"}, truncated: true,
			exact: numbered("ééééé [... line cut at 10 of 16 bytes]")},
		{name: "binary", args: ReadFileArgs{Path: "bin.dat"}, isError: true, wants: []string{"binary"}},
		{name: "directory", args: ReadFileArgs{Path: "dir"}, isError: true, wants: []string{"is a directory", "list_dir"}},
		{name: "missing", args: ReadFileArgs{Path: "nope.txt"}, isError: true, wants: []string{"nope.txt does not exist"}},
		{name: "empty", args: ReadFileArgs{Path: "empty.txt"}, wants: []string{"empty"}},
		{name: "no path", args: `{}`, isError: true, wants: []string{"path is required"}},
		{name: "negative", args: ReadFileArgs{Path: "ten.txt", Offset: -1}, isError: true, wants: []string{"negative"}},
		{name: "wrong type", args: `{"path":"ten.txt","limit":"10"}`, isError: true,
			wants: []string{"invalid arguments for read_file", `"limit" must be a number`}},
		{name: "malformed", args: `{"path":`, isError: true, wants: []string{"invalid arguments for read_file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, ToolReadFile, tc.args)
			check(t, r, tc.isError, tc.wants...)
			if tc.exact != "" && r.Output != tc.exact {
				t.Errorf("output:\n%q\nwant:\n%q", r.Output, tc.exact)
			}
			if r.Truncated != tc.truncated {
				t.Errorf("Truncated = %v, want %v", r.Truncated, tc.truncated)
			}
		})
	}
}

func TestReadFileByteCap(t *testing.T) {
	s := newTestServer(t)
	s.Limits = Limits{ReadBytes: 100}
	var b strings.Builder
	for range 50 {
		b.WriteString("0123456789\n") // 18 bytes per numbered line
	}
	writeTestFile(t, s.Root, "f.txt", b.String())
	r := call(t, s, ToolReadFile, ReadFileArgs{Path: "f.txt"})
	check(t, r, false, "capped at 100 bytes", "45 more lines", "use offset=6")
	if !r.Truncated || strings.Count(r.Output, "0123456789") != 5 {
		t.Errorf("want 5 lines and Truncated:\n%s", r.Output)
	}
}

func TestReadFileHugeLineBoundedMemory(t *testing.T) {
	s := newTestServer(t)
	writeTestFile(t, s.Root, "min.js", strings.Repeat("a", 20<<20))
	r := call(t, s, ToolReadFile, ReadFileArgs{Path: "min.js"})
	check(t, r, false, "line cut at 2000 of 20971520 bytes")
	if len(r.Output) > 3000 {
		t.Errorf("output is %d bytes", len(r.Output))
	}
}

func TestWriteFile(t *testing.T) {
	s := newTestServer(t)
	r := call(t, s, ToolWriteFile, WriteFileArgs{Path: "a/b/c.txt", Content: "one\ntwo\n"})
	check(t, r, false, "Created a/b/c.txt (8 bytes, 2 lines)")
	if got := readTestFile(t, s.Root, "a/b/c.txt"); got != "one\ntwo\n" {
		t.Errorf("content %q", got)
	}

	// Overwrite keeps the mode of the existing file.
	p := writeTestFile(t, s.Root, "run.sh", "old")
	if err := os.Chmod(p, 0o750); err != nil {
		t.Fatal(err)
	}
	r = call(t, s, ToolWriteFile, WriteFileArgs{Path: "run.sh", Content: "#!/bin/sh\necho hi"})
	check(t, r, false, "Overwrote run.sh", "2 lines")
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o750 {
		t.Errorf("mode = %v, want 0750", st.Mode().Perm())
	}

	// A write through a symlink changes the target and keeps the link.
	writeTestFile(t, s.Root, "real.txt", "x")
	if err := os.Symlink("real.txt", filepath.Join(s.Root, "link.txt")); err != nil {
		t.Fatal(err)
	}
	check(t, call(t, s, ToolWriteFile, WriteFileArgs{Path: "link.txt", Content: "via link"}), false)
	if got := readTestFile(t, s.Root, "real.txt"); got != "via link" {
		t.Errorf("target content %q", got)
	}
	if li, _ := os.Lstat(filepath.Join(s.Root, "link.txt")); li.Mode()&os.ModeSymlink == 0 {
		t.Error("the symlink was replaced by a file")
	}

	// Empty content is a valid write; a missing one is not.
	check(t, call(t, s, ToolWriteFile, `{"path":"empty.txt","content":""}`), false, "0 bytes, 0 lines")
	check(t, call(t, s, ToolWriteFile, `{"path":"x.txt"}`), true, "content is required")
	check(t, call(t, s, ToolWriteFile, `{"path":"","content":"x"}`), true, "path is empty")
	check(t, call(t, s, ToolWriteFile, WriteFileArgs{Path: "a", Content: "x"}), true, "is a directory")
	check(t, call(t, s, ToolWriteFile, WriteFileArgs{Path: "run.sh/x", Content: "x"}), true, "not a directory")
	check(t, call(t, s, ToolWriteFile, `{"path":1,"content":"x"}`), true, `invalid arguments for write_file: field "path" must be a string`)

	// Atomic: no temporary file is left next to the target.
	entries, _ := os.ReadDir(s.Root)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestWriteFileIsAtomic(t *testing.T) {
	s := newTestServer(t)
	p := writeTestFile(t, s.Root, "f.txt", "old content")
	before, _ := os.Stat(p)
	// A reader that opened the old file keeps seeing it whole: the new
	// content arrives by rename, as a new inode, never by rewriting.
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	check(t, call(t, s, ToolWriteFile, WriteFileArgs{Path: "f.txt", Content: strings.Repeat("new ", 1000)}), false)
	after, _ := os.Stat(p)
	if os.SameFile(before, after) {
		t.Error("the file was rewritten in place, not replaced")
	}
	old := make([]byte, 64)
	n, _ := f.Read(old)
	if string(old[:n]) != "old content" {
		t.Errorf("open reader saw %q", old[:n])
	}

	// Control: a failed write (read-only directory) leaves the old content
	// and no temporary file.
	if os.Geteuid() == 0 {
		t.Log("running as root: the read-only directory check is skipped")
		return
	}
	dir := filepath.Join(s.Root, "ro")
	writeTestFile(t, s.Root, "ro/f.txt", "keep")
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	check(t, call(t, s, ToolWriteFile, WriteFileArgs{Path: "ro/f.txt", Content: "lost"}), true, "permission denied")
	if got := readTestFile(t, s.Root, "ro/f.txt"); got != "keep" {
		t.Errorf("content %q after a failed write", got)
	}
}

func TestEditFile(t *testing.T) {
	const src = "package main\n\nfunc main() {\n\tprintln(\"hi\")\n\tprintln(\"hi\")\n}\n"
	tests := []struct {
		name    string
		file    string
		args    any
		isError bool
		wants   []string
		result  string // "" means unchanged
	}{
		{name: "unique", args: EditFileArgs{Path: "f.go", OldString: "package main", NewString: "package app"},
			wants: []string{"replaced 1 occurrence at line 1", "     1\tpackage app"}, result: strings.Replace(src, "package main", "package app", 1)},
		{name: "not unique", args: EditFileArgs{Path: "f.go", OldString: "println(\"hi\")", NewString: "x"}, isError: true,
			wants: []string{"occurs 2 times", "lines 4, 5", "replace_all"}},
		{name: "replace all", args: EditFileArgs{Path: "f.go", OldString: "println(\"hi\")", NewString: "x()", ReplaceAll: true},
			wants: []string{"replaced 2 occurrences (first at line 4)"}, result: strings.ReplaceAll(src, "println(\"hi\")", "x()")},
		{name: "delete", args: `{"path":"f.go","old_string":"\n\nfunc","new_string":"\nfunc"}`,
			result: strings.Replace(src, "\n\nfunc", "\nfunc", 1)},
		{name: "not found", args: EditFileArgs{Path: "f.go", OldString: "func other()", NewString: "x"}, isError: true,
			wants: []string{"old_string was not found in f.go", "read_file"}},
		{name: "whitespace hint", args: EditFileArgs{Path: "f.go", OldString: "func main() {\n    println(\"hi\")", NewString: "x"}, isError: true,
			wants: []string{"differs only in whitespace", "line 3", "     3\tfunc main() {"}},
		{name: "identical", args: EditFileArgs{Path: "f.go", OldString: "main", NewString: "main"}, isError: true, wants: []string{"identical"}},
		{name: "empty old", args: EditFileArgs{Path: "f.go", OldString: "", NewString: "x"}, isError: true, wants: []string{"write_file"}},
		{name: "missing new_string", args: `{"path":"f.go","old_string":"main"}`, isError: true,
			wants: []string{"invalid arguments for edit_file: new_string is required"}},
		{name: "wrong type", args: `{"path":"f.go","old_string":"main","new_string":"x","replace_all":"yes"}`, isError: true,
			wants: []string{"invalid arguments for edit_file", `"replace_all" must be a boolean`}},
		{name: "missing file", args: EditFileArgs{Path: "nope.go", OldString: "a", NewString: "b"}, isError: true,
			wants: []string{"nope.go does not exist", "write_file"}},
		{name: "crlf file", file: "a\r\nb\r\nc\r\n", args: EditFileArgs{Path: "f.go", OldString: "a\nb", NewString: "x\ny"},
			result: "x\r\ny\r\nc\r\n"},
		{name: "binary", file: "\x00\x01abc", args: EditFileArgs{Path: "f.go", OldString: "abc", NewString: "x"}, isError: true,
			wants: []string{"binary"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestServer(t)
			content := src
			if tc.file != "" {
				content = tc.file
			}
			writeTestFile(t, s.Root, "f.go", content)
			r := call(t, s, ToolEditFile, tc.args)
			check(t, r, tc.isError, tc.wants...)
			want := tc.result
			if want == "" {
				want = content
			}
			if got := readTestFile(t, s.Root, "f.go"); got != want {
				t.Errorf("file:\n%q\nwant:\n%q", got, want)
			}
		})
	}
}

func TestMultiEdit(t *testing.T) {
	s := newTestServer(t)
	writeTestFile(t, s.Root, "f.txt", "alpha beta gamma\n")

	// Edits apply in order: the second sees the first's result.
	r := call(t, s, ToolMultiEdit, MultiEditArgs{Path: "f.txt", Edits: []Edit{
		{OldString: "alpha", NewString: "ALPHA"},
		{OldString: "ALPHA beta", NewString: "one two"},
	}})
	check(t, r, false, "Applied 2 edits to f.txt")
	if got := readTestFile(t, s.Root, "f.txt"); got != "one two gamma\n" {
		t.Errorf("file %q", got)
	}

	// All or nothing: a failing third edit leaves the file untouched.
	r = call(t, s, ToolMultiEdit, MultiEditArgs{Path: "f.txt", Edits: []Edit{
		{OldString: "one", NewString: "1"},
		{OldString: "two", NewString: "2"},
		{OldString: "missing", NewString: "3"},
	}})
	check(t, r, true, "edit 3 of 3 failed", "not found", "No changes were written")
	if got := readTestFile(t, s.Root, "f.txt"); got != "one two gamma\n" {
		t.Errorf("file changed by a failed multi_edit: %q", got)
	}

	check(t, call(t, s, ToolMultiEdit, `{"path":"f.txt","edits":[]}`), true, "edits is empty")
	check(t, call(t, s, ToolMultiEdit, `{"path":"f.txt","edits":[{"old_string":"one"}]}`), true, "edit 1 of 1 has no new_string")
	check(t, call(t, s, ToolMultiEdit, `{"path":"f.txt","edits":"one"}`), true, "invalid arguments for multi_edit")
}

func TestListDir(t *testing.T) {
	s := newTestServer(t)
	writeTestFile(t, s.Root, "b.txt", "12345")
	writeTestFile(t, s.Root, "a/x.go", "")
	writeTestFile(t, s.Root, "big.bin", strings.Repeat("x", 3000))
	if err := os.Symlink("b.txt", filepath.Join(s.Root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(s.Root, "dangling")); err != nil {
		t.Fatal(err)
	}
	r := call(t, s, ToolListDir, nil)
	want := "a/\nb.txt (5 B)\nbig.bin (2.9 KiB)\ndangling -> nowhere (broken link)\nlink -> b.txt\n"
	if r.IsError || r.Output != want {
		t.Errorf("list_dir:\n%q\nwant\n%q", r.Output, want)
	}
	check(t, call(t, s, ToolListDir, ListDirArgs{Path: "a"}), false, "x.go (0 B)")
	check(t, call(t, s, ToolListDir, ListDirArgs{Path: "b.txt"}), true, "is a file", "read_file")
	check(t, call(t, s, ToolListDir, ListDirArgs{Path: "none"}), true, "does not exist")
	if err := os.Mkdir(filepath.Join(s.Root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	check(t, call(t, s, ToolListDir, ListDirArgs{Path: "empty"}), false, "empty")

	s.Limits = Limits{ListEntries: 2}
	r = call(t, s, ToolListDir, ListDirArgs{})
	check(t, r, false, "a/\nb.txt (5 B)\n[... 4 more entries not shown")
	if !r.Truncated {
		t.Error("Truncated not set")
	}
}

func TestGlob(t *testing.T) {
	s := newTestServer(t)
	for _, f := range []string{"main.go", "go.mod", "a/a.go", "a/b/b.go", "a/b/c.txt", ".git/x.go", "web/x.ts", "web/y.tsx"} {
		writeTestFile(t, s.Root, f, "")
	}
	tests := []struct {
		name    string
		args    GlobArgs
		isError bool
		exact   string
		wants   []string
	}{
		{name: "recursive", args: GlobArgs{Pattern: "**/*.go"}, exact: "a/a.go\na/b/b.go\nmain.go\n"},
		{name: "top level only", args: GlobArgs{Pattern: "*.go"}, exact: "main.go\n"},
		{name: "prefix", args: GlobArgs{Pattern: "a/*/*.go"}, exact: "a/b/b.go\n"},
		{name: "under path", args: GlobArgs{Pattern: "*.go", Path: "a"}, exact: "a/a.go\n"},
		{name: "braces", args: GlobArgs{Pattern: "web/*.{ts,tsx}"}, exact: "web/x.ts\nweb/y.tsx\n"},
		{name: "dirs", args: GlobArgs{Pattern: "a/*"}, exact: "a/a.go\na/b/\n"},
		{name: "absolute inside", args: GlobArgs{Pattern: filepath.Join(s.Root, "a", "*.go")}, exact: "a/a.go\n"},
		{name: "dot slash", args: GlobArgs{Pattern: "./*.mod"}, exact: "go.mod\n"},
		{name: "no match", args: GlobArgs{Pattern: "**/*.rs"}, wants: []string{"No files match **/*.rs"}},
		{name: "invalid", args: GlobArgs{Pattern: "a/[b"}, isError: true, wants: []string{"invalid glob pattern"}},
		{name: "missing path", args: GlobArgs{Pattern: "*", Path: "zzz"}, isError: true, wants: []string{"does not exist"}},
		{name: "empty", args: GlobArgs{}, isError: true, wants: []string{"pattern is required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, ToolGlob, tc.args)
			check(t, r, tc.isError, tc.wants...)
			if tc.exact != "" && r.Output != tc.exact {
				t.Errorf("output:\n%q\nwant\n%q", r.Output, tc.exact)
			}
		})
	}

	// A directory named through a symlink is searched; links met during
	// the walk are not followed.
	if err := os.Symlink("a", filepath.Join(s.Root, "alias")); err != nil {
		t.Fatal(err)
	}
	check(t, call(t, s, ToolGlob, GlobArgs{Pattern: "alias/*.go"}), false, "alias/a.go\n")
	check(t, call(t, s, ToolGlob, GlobArgs{Pattern: "*.go", Path: "alias"}), false, "alias/a.go\n")
	if r := call(t, s, ToolGlob, GlobArgs{Pattern: "**/b.go"}); r.Output != "a/b/b.go\n" {
		t.Errorf("walk followed a link: %q", r.Output)
	}

	s.Limits = Limits{GlobResults: 2}
	r := call(t, s, ToolGlob, GlobArgs{Pattern: "**/*.go"})
	check(t, r, false, "a/a.go\na/b/b.go\n[... 1 more matches not shown")
	if !r.Truncated {
		t.Error("Truncated not set")
	}
}

func TestGrep(t *testing.T) {
	s := newTestServer(t)
	writeTestFile(t, s.Root, "main.go", "package main\n// TODO: one\nfunc main() {}\n")
	writeTestFile(t, s.Root, "pkg/util.go", "package pkg\n// TODO two\n")
	writeTestFile(t, s.Root, "pkg/util_test.go", "package pkg\n// TODO test\n")
	writeTestFile(t, s.Root, "web/app.ts", "// TODO ts\n")
	writeTestFile(t, s.Root, ".git/config", "TODO git\n")
	writeTestFile(t, s.Root, "sub/.git", "gitdir: TODO git pointer\n")
	writeTestFile(t, s.Root, "bin/tool", "TODO\x00binary\n")
	writeTestFile(t, s.Root, "long.txt", "TODO "+strings.Repeat("z", 600)+"\n")
	if err := os.Symlink("pkg", filepath.Join(s.Root, "pkglink")); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		args      GrepArgs
		isError   bool
		exact     string
		wants     []string
		truncated bool
	}{
		{name: "include", args: GrepArgs{Pattern: `TODO:? \w+`, Include: "*.go"},
			exact: "main.go:2:// TODO: one\npkg/util.go:2:// TODO two\npkg/util_test.go:2:// TODO test\n"},
		{name: "include and exclude", args: GrepArgs{Pattern: "TODO", Include: "*.go", Exclude: "*_test.go"},
			exact: "main.go:2:// TODO: one\npkg/util.go:2:// TODO two\n"},
		{name: "include with path", args: GrepArgs{Pattern: "TODO", Include: "pkg/*.go"},
			exact: "pkg/util.go:2:// TODO two\npkg/util_test.go:2:// TODO test\n"},
		{name: "braces", args: GrepArgs{Pattern: "TODO", Include: "*.{ts,js}"}, exact: "web/app.ts:1:// TODO ts\n"},
		{name: "under path", args: GrepArgs{Pattern: "TODO", Path: "pkg"},
			exact: "pkg/util.go:2:// TODO two\npkg/util_test.go:2:// TODO test\n"},
		{name: "one file", args: GrepArgs{Pattern: "func", Path: "main.go"}, exact: "main.go:3:func main() {}\n"},
		{name: "dir through a link", args: GrepArgs{Pattern: "TODO", Path: "pkglink", Exclude: "*_test.go"}, exact: "pkglink/util.go:2:// TODO two\n"},
		{name: "case insensitive", args: GrepArgs{Pattern: "(?i)todo ts"}, exact: "web/app.ts:1:// TODO ts\n"},
		{name: "long line cut", args: GrepArgs{Pattern: "z{600}"}, truncated: true,
			wants: []string{"long.txt:1:TODO zzz", "[... line cut, 605 bytes]"}},
		{name: "skips .git and binary", args: GrepArgs{Pattern: "git|binary"}, wants: []string{"No matches"}},
		{name: "invalid regexp", args: GrepArgs{Pattern: "func("}, isError: true, wants: []string{"invalid regular expression", "missing closing )"}},
		{name: "invalid include", args: GrepArgs{Pattern: "x", Include: "[a"}, isError: true, wants: []string{"invalid glob"}},
		{name: "no pattern", args: GrepArgs{}, isError: true, wants: []string{"pattern is required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, ToolGrep, tc.args)
			check(t, r, tc.isError, tc.wants...)
			if tc.exact != "" && r.Output != tc.exact {
				t.Errorf("output:\n%q\nwant\n%q", r.Output, tc.exact)
			}
			if r.Truncated != tc.truncated {
				t.Errorf("Truncated = %v, want %v", r.Truncated, tc.truncated)
			}
		})
	}

	s.Limits = Limits{GrepMatches: 3}
	r := call(t, s, ToolGrep, GrepArgs{Pattern: "TODO"})
	check(t, r, false, "[... stopped after 3 matches")
	if !r.Truncated || strings.Count(r.Output, "TODO") != 3 {
		t.Errorf("want 3 matches and Truncated:\n%s", r.Output)
	}
	// Exactly at the cap: nothing was left out, so no marker.
	r = call(t, s, ToolGrep, GrepArgs{Pattern: "TODO", Include: "*.go"})
	if r.Truncated || strings.Contains(r.Output, "stopped") {
		t.Errorf("marker with exactly 3 matches:\n%s", r.Output)
	}
}

func TestUnknownToolAndBadFrames(t *testing.T) {
	s := newTestServer(t)
	check(t, call(t, s, "rm_rf", nil), true, `unknown tool "rm_rf"`, "read_file", "bash")
	check(t, call(t, s, "", nil), true, "no tool name")
	check(t, call(t, s, ToolEditFile, `[1,2]`), true, "invalid arguments for edit_file")
	check(t, call(t, s, OpPing, nil), false, "pong")
	// Arguments double-encoded as a JSON string are accepted.
	writeTestFile(t, s.Root, "a.txt", "x\n")
	check(t, call(t, s, ToolReadFile, `"{\"path\": \"a.txt\"}"`), false, "1\tx")
	check(t, call(t, s, ToolReadFile, `"a.txt"`), true, "invalid arguments for read_file: arguments must be a JSON object, not a JSON string")
	check(t, call(t, s, ToolReadFile, `{"path": "a.txt",}`), true, "invalid arguments for read_file: not valid JSON")
	r := s.Handle(t.Context(), Request{ID: 42, Tool: OpPing})
	if r.ID != 42 {
		t.Errorf("ID = %d", r.ID)
	}
}

func TestSpecialFilesDoNotHang(t *testing.T) {
	s := newTestServer(t)
	if err := syscall.Mkfifo(filepath.Join(s.Root, "fifo"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	writeTestFile(t, s.Root, "a.txt", "needle\n")
	check(t, call(t, s, ToolReadFile, ReadFileArgs{Path: "fifo"}), true, "not a regular file (named pipe)")
	check(t, call(t, s, ToolEditFile, EditFileArgs{Path: "fifo", OldString: "a", NewString: "b"}), true, "not a regular file")
	check(t, call(t, s, ToolWriteFile, WriteFileArgs{Path: "fifo", Content: "x"}), true, "not a regular file")
	check(t, call(t, s, ToolGrep, GrepArgs{Pattern: "needle"}), false, "a.txt:1:needle")
	check(t, call(t, s, ToolGrep, GrepArgs{Pattern: "needle", Path: "fifo"}), false, "No matches")
	check(t, call(t, s, ToolListDir, nil), false, "fifo (named pipe)")
}

// The whole-file fast path must find exactly the lines a plain per-line
// scan finds, whatever the anchors and line ends.
func TestGrepFastPathMatchesLineScan(t *testing.T) {
	contents := []string{
		"alpha\nbeta\ngamma",
		"alpha\r\nbeta\r\n",
		"x\n\nfoo bar\nfoo\tbar\nbar foo\n",
		"end$\n^start\n",
	}
	patterns := []string{`^beta$`, `a$`, `^\s*$`, `\Abeta`, `beta\z`, `foo\sbar`, `(?i)ALPHA`, `(?-m)^beta`, `(?i-m)beta$`, `^$`, `o b`, `\bbar\b`, `[^a]$`}
	for ci, content := range contents {
		s := newTestServer(t)
		writeTestFile(t, s.Root, "f.txt", content)
		for _, p := range patterns {
			re := regexp.MustCompile(p)
			var want strings.Builder
			for i, line := range strings.Split(strings.TrimSuffix(content, "\n"), "\n") {
				line = strings.TrimSuffix(line, "\r")
				if re.MatchString(line) {
					fmt.Fprintf(&want, "f.txt:%d:%s\n", i+1, line)
				}
			}
			r := call(t, s, ToolGrep, GrepArgs{Pattern: p})
			got := r.Output
			if strings.HasPrefix(got, "No matches") {
				got = ""
			}
			if got != want.String() {
				t.Errorf("content %d, pattern %q: got %q, want %q", ci, p, got, want.String())
			}
		}
	}
}

func TestHandleRecoversFromABug(t *testing.T) {
	var s *Server // every tool dereferences it: a stand-in for a bug
	r := s.Handle(t.Context(), Request{ID: 3, Tool: ToolReadFile, Args: []byte(`{"path":"a"}`)})
	if !r.IsError || r.ID != 3 || !strings.Contains(r.Output, "internal error in the toolbox's read_file tool") {
		t.Errorf("got %+v", r)
	}
}

func TestGrepLargeFileIsStreamed(t *testing.T) {
	s := newTestServer(t)
	var b strings.Builder
	line := strings.Repeat("filler ", 10) + "\n"
	for b.Len() <= grepWholeFile {
		b.WriteString(line)
	}
	n := strings.Count(b.String(), "\n")
	b.WriteString("needle at the end\r\n")
	writeTestFile(t, s.Root, "big.log", b.String())
	r := call(t, s, ToolGrep, GrepArgs{Pattern: "needle.*end$"})
	if want := fmt.Sprintf("big.log:%d:needle at the end\n", n+1); r.Output != want {
		t.Errorf("got %q, want %q", r.Output, want)
	}
}
