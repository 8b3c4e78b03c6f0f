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
	"regexp/syntax"
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// ListDirArgs are the arguments of list_dir.
type ListDirArgs struct {
	// Path is the directory; empty means the workspace root.
	Path string `json:"path,omitempty"`
}

// GlobArgs are the arguments of glob.
type GlobArgs struct {
	// Pattern is a doublestar pattern ("**/*.go", "src/{a,b}/*.ts"),
	// matched against paths relative to Path.
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
}

// GrepArgs are the arguments of grep.
type GrepArgs struct {
	// Pattern is a Go (RE2) regular expression.
	Pattern string `json:"pattern"`
	// Path is a file or a directory searched recursively; empty means the
	// workspace root.
	Path string `json:"path,omitempty"`
	// Include keeps only files matching this glob ("*.go", "*.{ts,tsx}",
	// "src/**/*.go"); a glob without "/" matches the file name.
	Include string `json:"include,omitempty"`
	// Exclude drops files matching this glob, in the same form.
	Exclude string `json:"exclude,omitempty"`
}

func (s *Server) listDir(ctx context.Context, raw json.RawMessage) Response {
	var a ListDirArgs
	if r := decodeArgs(ToolListDir, raw, &a); r != nil {
		return *r
	}
	abs, err := s.resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	shown := a.Path
	if shown == "" {
		shown = "."
	}
	st, err := os.Stat(abs)
	if err != nil {
		return fileError(err, shown, "list")
	}
	if !st.IsDir() {
		return errorf("%s is a file, not a directory; use read_file to read it", shown)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return fileError(err, shown, "list")
	}
	if len(entries) == 0 {
		return Response{Output: fmt.Sprintf("(%s is empty)", shown)}
	}
	lim := s.limits()
	var b strings.Builder
	for i, e := range entries {
		if i == lim.ListEntries {
			fmt.Fprintf(&b, "[... %d more entries not shown; use glob to narrow]\n", len(entries)-i)
			return Response{Output: b.String(), Truncated: true}
		}
		if i%256 == 0 && ctx.Err() != nil {
			return errorf("list_dir of %s was cancelled", shown)
		}
		b.WriteString(describeEntry(abs, e))
		b.WriteByte('\n')
	}
	return Response{Output: b.String()}
}

func describeEntry(dir string, e fs.DirEntry) string {
	name := e.Name()
	switch t := e.Type(); {
	case t.IsDir():
		return name + "/"
	case t&fs.ModeSymlink != 0:
		target, err := os.Readlink(filepath.Join(dir, name))
		if err != nil {
			return name + " -> ?"
		}
		suffix := ""
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil {
			suffix = " (broken link)"
		} else if st.IsDir() {
			suffix = "/"
		}
		return name + " -> " + target + suffix
	case t.IsRegular():
		info, err := e.Info()
		if err != nil {
			return name
		}
		return fmt.Sprintf("%s (%s)", name, humanSize(info.Size()))
	default:
		return fmt.Sprintf("%s (%s)", name, kindOf(t))
	}
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return m.Type().String()
}

func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func (s *Server) glob(ctx context.Context, raw json.RawMessage) Response {
	var a GlobArgs
	if r := decodeArgs(ToolGlob, raw, &a); r != nil {
		return *r
	}
	if a.Pattern == "" {
		return errorf("invalid arguments for glob: pattern is required")
	}
	base, r := s.searchDir(a.Path)
	if r != nil {
		return *r
	}
	pattern := a.Pattern
	if filepath.IsAbs(pattern) {
		// An absolute pattern inside the workspace is fine; make it
		// relative to the search directory.
		rel, err := filepath.Rel(base, pattern)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return errorf("glob pattern %s is outside the search path %s", a.Pattern, s.display(base))
		}
		pattern = filepath.ToSlash(rel)
	}
	pattern = strings.TrimPrefix(pattern, "./")
	if !doublestar.ValidatePattern(pattern) {
		return errorf("invalid glob pattern %q (check brackets and braces)", a.Pattern)
	}
	for _, seg := range strings.Split(pattern, "/") {
		if seg == ".." {
			return errorf("glob pattern %s leaves the search path; give path instead (relative to %s)", a.Pattern, s.root())
		}
	}

	// Walk only below the pattern's fixed prefix, and no deeper than the
	// pattern can reach unless it has "**".
	prefix, rest := doublestar.SplitPattern(pattern)
	start := base
	if prefix != "." {
		start = filepath.Join(base, prefix)
	}
	maxDepth := -1
	if !strings.Contains(rest, "**") {
		maxDepth = strings.Count(rest, "/") + 1
	}
	lim := s.limits()
	var matches []string
	total := 0
	// The trailing slash makes WalkDir descend into start even when it is
	// a symlink to a directory: a path the model names is followed, links
	// met inside the walk are not (no loops).
	err := filepath.WalkDir(start+string(filepath.Separator), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable entries are skipped, not fatal
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if d.Name() == ".git" && filepath.Clean(p) != start {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		relStart, err := filepath.Rel(start, p)
		if err != nil {
			return nil
		}
		if maxDepth >= 0 && relStart != "." && strings.Count(relStart, "/")+1 > maxDepth {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(base, p)
		if rel == "." {
			return nil
		}
		if ok, _ := doublestar.Match(pattern, filepath.ToSlash(rel)); !ok {
			return nil
		}
		total++
		if len(matches) < lim.GlobResults {
			m := s.display(p)
			if d.IsDir() {
				m += "/"
			}
			matches = append(matches, m)
		}
		return nil
	})
	if ctx.Err() != nil {
		return errorf("glob was cancelled")
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errorf("glob %s: %v", a.Pattern, err)
	}
	if total == 0 {
		return Response{Output: fmt.Sprintf("No files match %s under %s", a.Pattern, s.display(base))}
	}
	sort.Strings(matches)
	out := strings.Join(matches, "\n") + "\n"
	if total > len(matches) {
		out += fmt.Sprintf("[... %d more matches not shown; use a narrower pattern or path]\n", total-len(matches))
		return Response{Output: out, Truncated: true}
	}
	return Response{Output: out}
}

// searchDir resolves the optional path of glob and grep.
func (s *Server) searchDir(p string) (string, *Response) {
	abs, err := s.resolve(p)
	if err != nil {
		r := errorf("%v", err)
		return "", &r
	}
	shown := p
	if shown == "" {
		shown = "."
	}
	st, err := os.Stat(abs)
	if err != nil {
		r := fileError(err, shown, "search")
		return "", &r
	}
	if !st.IsDir() {
		r := errorf("%s is a file, not a directory", shown)
		return "", &r
	}
	return abs, nil
}

// grepLineKeep bounds how much of one line is matched against; a longer
// line (minified code) is matched on its first MiB only.
const grepLineKeep = 1 << 20

func (s *Server) grep(ctx context.Context, raw json.RawMessage) Response {
	var a GrepArgs
	if r := decodeArgs(ToolGrep, raw, &a); r != nil {
		return *r
	}
	if a.Pattern == "" {
		return errorf("invalid arguments for grep: pattern is required")
	}
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return errorf("invalid regular expression %q: %v (Go RE2 syntax: no lookaround or backreferences; escape literal characters like ( [ { . with a backslash)", a.Pattern, unwrapRegexp(err))
	}
	for _, g := range []string{a.Include, a.Exclude} {
		if g != "" && !doublestar.ValidatePattern(g) {
			return errorf("invalid glob %q in include/exclude (check brackets and braces)", g)
		}
	}
	abs, err := s.resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	shown := a.Path
	if shown == "" {
		shown = "."
	}
	st, err := os.Stat(abs)
	if err != nil {
		return fileError(err, shown, "search")
	}

	lim := s.limits()
	g := &grepper{re: re, pre: prefilter(a.Pattern), lim: lim, srv: s}
	if !st.IsDir() {
		// An explicitly named file is searched even if a filter would
		// exclude it: the model asked for it.
		g.file(ctx, abs)
	} else {
		// Trailing slash: descend into a directory named through a symlink.
		werr := filepath.WalkDir(abs+string(filepath.Separator), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			isRoot := filepath.Clean(p) == abs
			if d.Name() == ".git" && !isRoot {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil // a worktree's .git pointer file
			}
			if d.IsDir() {
				return nil
			}
			if !d.Type().IsRegular() {
				return nil // links are not followed, like grep -r
			}
			rel, _ := filepath.Rel(abs, p)
			rel = filepath.ToSlash(rel)
			if a.Include != "" && !globMatch(a.Include, rel) {
				return nil
			}
			if a.Exclude != "" && globMatch(a.Exclude, rel) {
				return nil
			}
			if g.capped {
				return filepath.SkipAll
			}
			g.file(ctx, p)
			return nil
		})
		_ = werr
	}
	if ctx.Err() != nil {
		return errorf("grep was cancelled")
	}
	if g.matches == 0 {
		return Response{Output: fmt.Sprintf("No matches for %s in %s", a.Pattern, shown)}
	}
	out := g.out.String()
	if g.capped {
		out += fmt.Sprintf("[... stopped after %d matches; narrow the pattern, path or include]\n", lim.GrepMatches)
	}
	return Response{Output: out, Truncated: g.truncated || g.capped}
}

func unwrapRegexp(err error) string {
	var re *syntax.Error
	if errors.As(err, &re) {
		return fmt.Sprintf("%s: %s", re.Code, re.Expr)
	}
	return err.Error()
}

// globMatch matches an include/exclude glob: one without "/" against the
// file name, as grep --include and ripgrep -g do, otherwise against the path
// relative to the search directory.
func globMatch(glob, rel string) bool {
	if !strings.Contains(glob, "/") {
		rel = rel[strings.LastIndexByte(rel, '/')+1:]
	}
	ok, _ := doublestar.Match(glob, rel)
	return ok
}

// prefilter compiles pattern for one scan of a whole file: in multi-line
// mode "^" and "$" match at every line, so a file with a matching line
// always matches. It can match where no single line does (a "\s" may span
// a newline), which only costs the per-line scan. Anchors to the start or
// end of the text (\A, \z, "^" with the m flag turned off) mean the line to
// the per-line scan but the file here, so such patterns get no prefilter.
func prefilter(pattern string) *regexp.Regexp {
	src := "(?m:" + pattern + ")"
	tree, err := syntax.Parse(src, syntax.Perl)
	if err != nil || anchorsText(tree) {
		return nil
	}
	re, err := regexp.Compile(src)
	if err != nil {
		return nil
	}
	return re
}

func anchorsText(re *syntax.Regexp) bool {
	if re.Op == syntax.OpBeginText || re.Op == syntax.OpEndText {
		return true
	}
	for _, sub := range re.Sub {
		if anchorsText(sub) {
			return true
		}
	}
	return false
}

type grepper struct {
	re        *regexp.Regexp
	pre       *regexp.Regexp // nil: no whole-file prefilter
	buf       []byte
	lim       Limits
	srv       *Server
	out       bytes.Buffer
	matches   int
	truncated bool // a line was cut
	capped    bool // a match beyond the cap exists
}

func (g *grepper) full() bool { return g.matches >= g.lim.GrepMatches }

// grepWholeFile is the size up to which a file is read at once, tested
// against the whole-file prefilter and split in memory.
const grepWholeFile = 8 << 20

func (g *grepper) file(ctx context.Context, path string) {
	f, err := openNoBlock(path)
	if err != nil {
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return
	}
	name := g.srv.display(path)
	if st.Size() > grepWholeFile {
		g.stream(ctx, f, name)
		return
	}
	buf := g.buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil || len(buf) > grepWholeFile {
			break
		}
	}
	g.buf = buf
	if len(buf) > grepWholeFile {
		// It grew after the stat; read it as a stream from the start.
		if _, err := f.Seek(0, io.SeekStart); err == nil {
			g.stream(ctx, f, name)
		}
		return
	}
	if bytes.IndexByte(buf[:min(len(buf), sniffBytes)], 0) >= 0 {
		return // binary
	}
	// Most files do not match: one scan of the whole file rules them out
	// far faster than one regexp call per line. A "\r" could hide a "$"
	// match that the per-line scan (which drops the "\r") finds.
	if g.pre != nil && bytes.IndexByte(buf, '\r') < 0 && !g.pre.Match(buf) {
		return
	}
	for n := 1; len(buf) > 0; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return
		}
		line := buf
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			line, buf = buf[:i], buf[i+1:]
		} else {
			buf = nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) > grepLineKeep {
			if !g.match(name, n, line[:grepLineKeep], len(line)) {
				return
			}
			continue
		}
		if !g.match(name, n, line, len(line)) {
			return
		}
	}
}

// stream greps a file too big to hold, line by line.
func (g *grepper) stream(ctx context.Context, f *os.File, name string) {
	br := getReader(f)
	defer putReader(br)
	if head, _ := br.Peek(sniffBytes); bytes.IndexByte(head, 0) >= 0 {
		return // binary
	}
	for n := 1; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return
		}
		line, total, err := readLine(br, grepLineKeep)
		if err != nil && total == 0 {
			return
		}
		if !g.match(name, n, line, total) {
			return
		}
		if err != nil {
			return
		}
	}
}

// match reports line n if it matches; false means the cap is reached and
// the search should stop.
func (g *grepper) match(name string, n int, line []byte, total int) bool {
	if !g.re.Match(line) {
		return true
	}
	if g.full() {
		g.capped = true
		return false
	}
	g.matches++
	text := line
	cut := ""
	if len(text) > g.lim.GrepLineChars {
		text = cutUTF8(text[:g.lim.GrepLineChars])
		cut = fmt.Sprintf(" [... line cut, %d bytes]", total)
		g.truncated = true
	}
	fmt.Fprintf(&g.out, "%s:%d:%s%s\n", name, n, text, cut)
	return true
}
