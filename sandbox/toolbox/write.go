package toolbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// WriteFileArgs are the arguments of write_file.
type WriteFileArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Edit is one exact-string replacement.
type Edit struct {
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
}

// EditFileArgs are the arguments of edit_file.
type EditFileArgs struct {
	Path       string `json:"path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
}

// MultiEditArgs are the arguments of multi_edit.
type MultiEditArgs struct {
	Path  string `json:"path"`
	Edits []Edit `json:"edits"`
}

// maxEditBytes caps the size of a file edit_file and multi_edit load into
// memory.
const maxEditBytes = 32 << 20

func (s *Server) writeFile(ctx context.Context, raw json.RawMessage) Response {
	var a WriteFileArgs
	if r := decodeArgs(ToolWriteFile, raw, &a); r != nil {
		return *r
	}
	if r := requireKeys(ToolWriteFile, raw, "path", "content"); r != nil {
		return *r
	}
	if a.Path == "" {
		return errorf("invalid arguments for write_file: path is empty")
	}
	abs, err := s.resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	target, mode, existed, r := writeTarget(abs, a.Path)
	if r != nil {
		return *r
	}
	if !existed {
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return writeError(err, a.Path)
		}
	}
	if ctx.Err() != nil {
		return errorf("write_file of %s was cancelled; nothing was written", a.Path)
	}
	if err := atomicWrite(target, []byte(a.Content), mode); err != nil {
		return writeError(err, a.Path)
	}
	verb := "Created"
	if existed {
		verb = "Overwrote"
	}
	return Response{Output: fmt.Sprintf("%s %s (%d bytes, %d lines)", verb, a.Path, len(a.Content), countTextLines(a.Content))}
}

// writeTarget finds the file a write to abs replaces: a symlink is followed
// (inside the container, which is the view that matters) so that the link
// survives and its target changes, as with any editor. It returns the mode
// to keep and whether the file existed.
func writeTarget(abs, shown string) (target string, mode fs.FileMode, existed bool, r *Response) {
	target = abs
	if li, err := os.Lstat(abs); err == nil && li.Mode()&fs.ModeSymlink != 0 {
		t, err := filepath.EvalSymlinks(abs)
		if err != nil {
			e := errorf("%s is a symbolic link whose target cannot be resolved (%v); remove the link or write to its target", shown, unwrapPath(err))
			return "", 0, false, &e
		}
		target = t
	}
	st, err := os.Stat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return target, 0o644, false, nil
	case err != nil:
		e := writeError(err, shown)
		return "", 0, false, &e
	case st.IsDir():
		e := errorf("%s is a directory; give the path of a file", shown)
		return "", 0, false, &e
	case !st.Mode().IsRegular():
		e := errorf("%s is not a regular file (%s); refusing to replace it", shown, kindOf(st.Mode()))
		return "", 0, false, &e
	}
	// Replacing by rename would succeed on a file we may not write (only
	// the directory's permission counts), silently overriding its mode.
	if err := syscall.Access(target, 2 /* W_OK */); err != nil {
		e := errorf("permission denied: %s is not writable", shown)
		return "", 0, false, &e
	}
	return target, st.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky), true, nil
}

// atomicWrite replaces path with data so that a reader (or a crash) sees
// either the old or the new content, never a mix: a temporary file in the
// same directory, fsync, rename over the target, fsync the directory.
func atomicWrite(path string, data []byte, mode fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	// Chmod on the descriptor is not subject to the umask, so an existing
	// file keeps exactly its mode.
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // durability of the rename; not all file systems support it
		d.Close()
	}
	return nil
}

func writeError(err error, shown string) Response {
	switch {
	case errors.Is(err, syscall.EROFS):
		return errorf("cannot write %s: the file system is read-only (only the workspace and /tmp are writable)", shown)
	case errors.Is(err, syscall.ENOSPC):
		return errorf("cannot write %s: no space left on the device", shown)
	case errors.Is(err, syscall.ENOTDIR):
		return errorf("cannot write %s: a parent of it is a file, not a directory", shown)
	}
	return fileError(err, shown, "write")
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// requireKeys tells a model that left out an argument which one, where an
// empty string would be valid (new_string "" deletes).
func requireKeys(tool string, raw json.RawMessage, keys ...string) *Response {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		r := errorf("invalid arguments for %s: %v", tool, err)
		return &r
	}
	for _, k := range keys {
		if v, ok := m[k]; !ok || string(v) == "null" {
			r := errorf("invalid arguments for %s: %s is required", tool, k)
			return &r
		}
	}
	return nil
}

func countTextLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

func (s *Server) editFile(ctx context.Context, raw json.RawMessage) Response {
	var a EditFileArgs
	if r := decodeArgs(ToolEditFile, raw, &a); r != nil {
		return *r
	}
	if r := requireKeys(ToolEditFile, raw, "path", "old_string", "new_string"); r != nil {
		return *r
	}
	return s.applyEdits(ctx, ToolEditFile, a.Path, []Edit{{OldString: a.OldString, NewString: a.NewString, ReplaceAll: a.ReplaceAll}})
}

func (s *Server) multiEdit(ctx context.Context, raw json.RawMessage) Response {
	var a MultiEditArgs
	if r := decodeArgs(ToolMultiEdit, raw, &a); r != nil {
		return *r
	}
	if r := requireKeys(ToolMultiEdit, raw, "path", "edits"); r != nil {
		return *r
	}
	if len(a.Edits) == 0 {
		return errorf("invalid arguments for multi_edit: edits is empty; give at least one {old_string, new_string}")
	}
	var probe struct {
		Edits []map[string]json.RawMessage `json:"edits"`
	}
	_ = json.Unmarshal(raw, &probe)
	for i, e := range probe.Edits {
		for _, k := range []string{"old_string", "new_string"} {
			if v, ok := e[k]; !ok || string(v) == "null" {
				return errorf("invalid arguments for multi_edit: edit %d of %d has no %s", i+1, len(a.Edits), k)
			}
		}
	}
	return s.applyEdits(ctx, ToolMultiEdit, a.Path, a.Edits)
}

// applyEdits applies edits in order to the file in memory and writes the
// result once: if any edit fails, the file is left untouched.
func (s *Server) applyEdits(ctx context.Context, tool, path string, edits []Edit) Response {
	if path == "" {
		return errorf("invalid arguments for %s: path is required", tool)
	}
	abs, err := s.resolve(path)
	if err != nil {
		return errorf("%v", err)
	}
	f, r := openRegular(abs, path, "edit")
	if r != nil {
		if _, serr := os.Stat(abs); errors.Is(serr, fs.ErrNotExist) {
			return errorf("%s does not exist; use write_file to create a file", path)
		}
		return *r
	}
	data, err := io.ReadAll(io.LimitReader(f, maxEditBytes+1))
	f.Close()
	if err != nil {
		return fileError(err, path, "read")
	}
	if len(data) > maxEditBytes {
		return errorf("%s is larger than %d MiB; edit it with bash (e.g. sed) instead", path, maxEditBytes>>20)
	}
	if bytes.IndexByte(data[:min(len(data), sniffBytes)], 0) >= 0 {
		return errorf("%s is a binary file; edit_file changes text files only", path)
	}
	target, mode, _, r := writeTarget(abs, path)
	if r != nil {
		return *r
	}

	content := string(data)
	var notes []string
	for i, e := range edits {
		next, note, msg := applyEdit(content, e, path)
		if msg != "" {
			if len(edits) > 1 {
				return errorf("edit %d of %d failed: %s\nNo changes were written to %s.", i+1, len(edits), msg, path)
			}
			return errorf("%s", msg)
		}
		content = next
		notes = append(notes, note)
	}
	if ctx.Err() != nil {
		return errorf("%s of %s was cancelled; nothing was written", tool, path)
	}
	if err := atomicWrite(target, []byte(content), mode); err != nil {
		return writeError(err, path)
	}
	if len(edits) == 1 {
		return Response{Output: fmt.Sprintf("Edited %s: %s", path, notes[0])}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Applied %d edits to %s:", len(edits), path)
	for i, n := range notes {
		fmt.Fprintf(&b, "\n  %d. %s", i+1, n)
	}
	return Response{Output: b.String()}
}

// applyEdit replaces e.OldString in content. It returns the new content and
// a note for the model, or a failure message.
func applyEdit(content string, e Edit, path string) (string, string, string) {
	oldS, newS := e.OldString, e.NewString
	if oldS == "" {
		return "", "", "old_string is empty; to create or overwrite a whole file use write_file"
	}
	if oldS == newS {
		return "", "", "old_string and new_string are identical; nothing would change"
	}
	n := strings.Count(content, oldS)
	if n == 0 && strings.Contains(content, "\r\n") && !strings.Contains(oldS, "\r") {
		// Models write "\n"; a file with CRLF line ends still means the same
		// text. Keep the file's line ends.
		crlfOld := strings.ReplaceAll(oldS, "\n", "\r\n")
		if m := strings.Count(content, crlfOld); m > 0 {
			oldS, newS, n = crlfOld, strings.ReplaceAll(newS, "\n", "\r\n"), m
		}
	}
	switch {
	case n == 0:
		return "", "", notFound(content, oldS, path)
	case n > 1 && !e.ReplaceAll:
		return "", "", fmt.Sprintf("old_string occurs %d times in %s (at lines %s); include more surrounding lines to make it unique, or set replace_all to true to replace every occurrence",
			n, path, occurrenceLines(content, oldS, 10))
	}
	at := strings.Index(content, oldS)
	line := 1 + strings.Count(content[:at], "\n")
	if e.ReplaceAll {
		out := strings.ReplaceAll(content, oldS, newS)
		if n == 1 {
			return out, fmt.Sprintf("replaced 1 occurrence at line %d", line), ""
		}
		return out, fmt.Sprintf("replaced %d occurrences (first at line %d)", n, line), ""
	}
	out := content[:at] + newS + content[at+len(oldS):]
	return out, fmt.Sprintf("replaced 1 occurrence at line %d\n%s", line, snippet(out, line, countTextLines(newS))), ""
}

// snippet shows the changed lines with a little context, numbered as
// read_file numbers them, so the model can check its edit without reading
// the file again.
func snippet(content string, first, count int) string {
	const around, maxLines = 3, 30
	lines := strings.Split(content, "\n")
	from := max(first-around, 1)
	to := min(first+max(count, 1)-1+around, len(lines))
	if to-from+1 > maxLines {
		to = from + maxLines - 1
	}
	var b strings.Builder
	for i := from; i <= to; i++ {
		l := strings.TrimSuffix(lines[i-1], "\r")
		if len(l) > 300 {
			l = string(cutUTF8([]byte(l[:300]))) + " [...]"
		}
		fmt.Fprintf(&b, "%6d\t%s\n", i, l)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func occurrenceLines(content, s string, limit int) string {
	var nums []string
	off := 0
	line := 1
	for len(nums) < limit {
		i := strings.Index(content[off:], s)
		if i < 0 {
			break
		}
		line += strings.Count(content[off:off+i], "\n")
		nums = append(nums, fmt.Sprint(line))
		line += strings.Count(s, "\n")
		off += i + len(s)
	}
	out := strings.Join(nums, ", ")
	if strings.Count(content, s) > limit {
		out += ", ..."
	}
	return out
}

// notFound explains a failed match. The commonest cause with local models
// is whitespace (tabs vs spaces, a dropped blank line); when the text
// matches once whitespace is ignored, say where, so the model can copy it.
func notFound(content, oldS, path string) string {
	base := fmt.Sprintf("old_string was not found in %s", path)
	fields := strings.Fields(oldS)
	if len(fields) > 0 && len(oldS) <= 16<<10 {
		quoted := make([]string, len(fields))
		for i, f := range fields {
			quoted[i] = regexp.QuoteMeta(f)
		}
		if re, err := regexp.Compile(strings.Join(quoted, `\s+`)); err == nil {
			if loc := re.FindStringIndex(content); loc != nil {
				line := 1 + strings.Count(content[:loc[0]], "\n")
				n := 1 + strings.Count(content[loc[0]:loc[1]], "\n")
				return fmt.Sprintf("%s exactly, but text that differs only in whitespace (indentation, tabs, line breaks) is at line %d:\n%s\nCopy it exactly as read_file shows it (after the line number and tab) and try again.",
					base, line, snippetPlain(content, line, n))
			}
		}
	}
	return base + "; read the file again with read_file and copy the exact text, including indentation and line breaks"
}

func snippetPlain(content string, first, count int) string {
	lines := strings.Split(content, "\n")
	to := min(first+min(count, 10)-1, len(lines))
	var b strings.Builder
	for i := first; i <= to; i++ {
		fmt.Fprintf(&b, "%6d\t%s\n", i, strings.TrimSuffix(lines[i-1], "\r"))
	}
	return strings.TrimSuffix(b.String(), "\n")
}
