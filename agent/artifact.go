package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Artifact sizes. A tool result above artifactThreshold is stored whole on
// the host and the model sees a reference plus the head and tail: long
// outputs would otherwise eat a small local model's context in one call.
const (
	artifactThreshold = 10 << 10
	excerptHead       = 4 << 10
	excerptTail       = 3 << 10
	artifactPageBytes = 16 << 10
)

// artifactStore keeps long tool outputs as files in a host-side directory
// that is never inside the workspace (the model must not be able to plant
// or read host files through it: ids are generated here and validated).
type artifactStore struct {
	dir    string
	prefix string // distinguishes sessions sharing a directory

	mu   sync.Mutex
	next int
}

var artifactIDRe = regexp.MustCompile(`^a[0-9]{1,9}$`)

func newArtifactStore(dir, prefix string) *artifactStore {
	if dir == "" {
		return nil
	}
	return &artifactStore{dir: dir, prefix: prefix}
}

func (s *artifactStore) path(id string) string {
	return filepath.Join(s.dir, s.prefix+id+".txt")
}

// save stores output and returns its id.
func (s *artifactStore) save(output string) (string, error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return "", fmt.Errorf("artifact dir: %w", err)
	}
	// O_EXCL: a resumed session continues numbering from 1, so skip ids an
	// earlier run of the same session already used.
	for {
		s.mu.Lock()
		s.next++
		id := "a" + strconv.Itoa(s.next)
		s.mu.Unlock()
		f, err := os.OpenFile(s.path(id), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("artifact: %w", err)
		}
		if _, err := f.WriteString(output); err != nil {
			_ = f.Close()
			return "", fmt.Errorf("artifact: %w", err)
		}
		if err := f.Close(); err != nil {
			return "", fmt.Errorf("artifact: %w", err)
		}
		return id, nil
	}
}

// page returns lines [offset, offset+limit) of an artifact, capped at
// artifactPageBytes, with a note on what comes next.
func (s *artifactStore) page(id string, offset, limit int) (string, bool) {
	if !artifactIDRe.MatchString(id) {
		return fmt.Sprintf("error: %q is not an artifact id (ids look like a3)", id), false
	}
	f, err := os.Open(s.path(id))
	if err != nil {
		return fmt.Sprintf("error: artifact %s not found", id), false
	}
	defer f.Close()
	if offset < 1 {
		offset = 1
	}
	if limit < 1 {
		limit = 200
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var b strings.Builder
	line, shown := 0, 0
	for {
		text, err := r.ReadString('\n')
		if text != "" {
			line++
			if line >= offset {
				if shown == 0 && len(text) > artifactPageBytes {
					// One line longer than a page: show its start rather
					// than never getting past it.
					fmt.Fprintf(&b, "%s\n[line %d is %d bytes; only its start is shown. Continue with offset %d]\n",
						cutUTF8(text, artifactPageBytes), line, len(text), line+1)
					return b.String(), true
				}
				if shown >= limit || b.Len()+len(text) > artifactPageBytes {
					fmt.Fprintf(&b, "[more lines follow; continue with offset %d]\n", line)
					return b.String(), true
				}
				b.WriteString(text)
				shown++
			}
		}
		if err != nil {
			break
		}
	}
	if shown == 0 {
		return fmt.Sprintf("artifact %s has %d lines; nothing at offset %d", id, line, offset), true
	}
	b.WriteString("[end of artifact]\n")
	return b.String(), true
}

// excerpt is what the model sees of a stored output.
func excerpt(output, id string) string {
	head := cutUTF8(output, excerptHead)
	tail := tailUTF8(output, excerptTail)
	lines := strings.Count(output, "\n") + 1
	ref := fmt.Sprintf("[output was %d bytes, %d lines; stored as artifact %s. Showing the first and last part. "+
		"Use read_artifact {\"id\":%q,\"offset\":N} to read more.]", len(output), lines, id, id)
	return ref + "\n" + head + "\n[...]\n" + tail
}

// shorten keeps the head and tail of s within about n bytes.
func shorten(s string, n int, note string) string {
	if len(s) <= n {
		return s
	}
	h := n * 2 / 3
	return cutUTF8(s, h) + "\n[... " + note + " ...]\n" + tailUTF8(s, n-h)
}

// cutUTF8 returns at most n bytes of s's start without splitting a rune.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tailUTF8 returns at most n bytes of s's end without splitting a rune.
func tailUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
