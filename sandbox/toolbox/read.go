package toolbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unicode/utf8"
)

// ReadFileArgs are the arguments of read_file.
type ReadFileArgs struct {
	Path string `json:"path"`
	// Offset is the first line to show, 1-based; 0 means 1.
	Offset int `json:"offset,omitempty"`
	// Limit is how many lines to show; 0 means Limits.ReadLines.
	Limit int `json:"limit,omitempty"`
}

// sniffBytes is how much of a file is inspected for a NUL byte to call it
// binary, the heuristic git and grep use.
const sniffBytes = 8 << 10

func (s *Server) readFile(ctx context.Context, raw json.RawMessage) Response {
	var a ReadFileArgs
	if r := decodeArgs(ToolReadFile, raw, &a); r != nil {
		return *r
	}
	if a.Path == "" {
		return errorf("invalid arguments for read_file: path is required")
	}
	if a.Offset < 0 || a.Limit < 0 {
		return errorf("invalid arguments for read_file: offset and limit must not be negative")
	}
	abs, err := s.resolve(a.Path)
	if err != nil {
		return errorf("%v", err)
	}
	f, r := openRegular(abs, a.Path, "read")
	if r != nil {
		return *r
	}
	defer f.Close()

	lim := s.limits()
	offset := max(a.Offset, 1)
	limit := a.Limit
	if limit == 0 {
		limit = lim.ReadLines
	}

	br := getReader(f)
	defer putReader(br)
	head, _ := br.Peek(sniffBytes)
	if bytes.IndexByte(head, 0) >= 0 {
		return errorf("%s is a binary file; read_file shows text only (inspect it with bash, e.g. od -c or file)", a.Path)
	}
	if len(head) == 0 {
		return Response{Output: fmt.Sprintf("(%s is empty)", a.Path)}
	}

	var out bytes.Buffer
	var entry []byte
	lineNo := 0
	shown := 0
	truncated := false
	capped := false
	for {
		if lineNo%1024 == 0 && ctx.Err() != nil {
			return errorf("read_file of %s was cancelled", a.Path)
		}
		line, total, err := readLine(br, lim.LineChars)
		eof := errors.Is(err, io.EOF)
		if eof && total == 0 {
			break
		}
		if err != nil && !eof {
			return errorf("cannot read %s: %v", a.Path, err)
		}
		lineNo++
		if lineNo >= offset && shown < limit {
			entry = appendNumbered(entry[:0], lineNo, line)
			if total > len(line) {
				entry = fmt.Appendf(entry[:len(entry)-1], " [... line cut at %d of %d bytes]\n", len(line), total)
				truncated = true
			}
			if shown > 0 && out.Len()+len(entry) > lim.ReadBytes {
				capped = true
				break
			}
			out.Write(entry)
			shown++
		} else if shown >= limit {
			// Count the remaining lines cheaply so the model knows how much
			// is left and where to continue.
			rest, cerr := countLines(ctx, br)
			if cerr != nil {
				return errorf("cannot read %s: %v", a.Path, cerr)
			}
			fmt.Fprintf(&out, "... %s; use offset=%d to read on\n", plural(rest+1, "more line"), lineNo)
			truncated = true
			break
		}
		if eof {
			break
		}
	}
	if capped {
		next := offset + shown
		rest, cerr := countLines(ctx, br)
		if cerr != nil {
			return errorf("cannot read %s: %v", a.Path, cerr)
		}
		// +1: the line that did not fit was already read.
		fmt.Fprintf(&out, "... output capped at %d bytes; %s; use offset=%d to read on\n", lim.ReadBytes, plural(rest+1, "more line"), next)
		truncated = true
	}
	if shown == 0 {
		return errorf("offset %d is past the end of %s, which has %s", offset, a.Path, plural(lineNo, "line"))
	}
	return Response{Output: out.String(), Truncated: truncated}
}

// readers recycles the readers of read_file and grep: a fresh 16 KiB
// buffer per call was most of a small read's cost.
var readers = sync.Pool{New: func() any {
	// Big enough to sniff for binary content; long lines are read in
	// chunks of this size.
	return bufio.NewReaderSize(nil, 2*sniffBytes)
}}

func getReader(r io.Reader) *bufio.Reader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func putReader(br *bufio.Reader) {
	br.Reset(nil) // drop the file
	readers.Put(br)
}

// plural says "1 line", "2 lines".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// appendNumbered appends line as read_file shows it: "%6d\t%s\n".
func appendNumbered(dst []byte, n int, line []byte) []byte {
	num := strconv.Itoa(n)
	for i := len(num); i < 6; i++ {
		dst = append(dst, ' ')
	}
	dst = append(dst, num...)
	dst = append(dst, '\t')
	dst = append(dst, line...)
	return append(dst, '\n')
}

// openRegular opens a file for reading and refuses directories and special
// files with a message that says what to use instead.
func openRegular(abs, shown, verb string) (*os.File, *Response) {
	f, err := openNoBlock(abs)
	if err != nil {
		r := fileError(err, shown, verb)
		return nil, &r
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		r := fileError(err, shown, verb)
		return nil, &r
	}
	if st.IsDir() {
		f.Close()
		r := errorf("%s is a directory; use list_dir to see its entries", shown)
		return nil, &r
	}
	if !st.Mode().IsRegular() {
		f.Close()
		r := errorf("%s is not a regular file (%s)", shown, kindOf(st.Mode()))
		return nil, &r
	}
	return f, nil
}

// openNoBlock opens a file for reading without blocking: opening a FIFO
// for reading otherwise waits for a writer, which would hang the call. On a
// regular file O_NONBLOCK changes nothing.
func openNoBlock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// fileError words a file system error for the model.
func fileError(err error, shown, verb string) Response {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errorf("%s does not exist (cannot %s it); use list_dir or glob to find the right path", shown, verb)
	case errors.Is(err, fs.ErrPermission):
		return errorf("permission denied: cannot %s %s", verb, shown)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return errorf("cannot %s %s: %v", verb, shown, pe.Err)
	}
	return errorf("cannot %s %s: %v", verb, shown, err)
}

// readLine reads one line without its newline, keeping at most keep bytes
// (cut back to a UTF-8 boundary) and discarding the rest, so that a file of
// one enormous line cannot grow memory. total is the line's full length.
func readLine(br *bufio.Reader, keep int) (line []byte, total int, err error) {
	for {
		chunk, rerr := br.ReadSlice('\n')
		n := len(chunk)
		if rerr == nil {
			n-- // drop '\n'
		}
		part := chunk[:n]
		if len(line) < keep {
			room := keep - len(line)
			if len(part) <= room {
				line = append(line, part...)
			} else {
				line = append(line, part[:room]...)
			}
		}
		total += n
		switch {
		case rerr == nil:
			if total <= keep && bytes.HasSuffix(line, []byte{'\r'}) {
				line = line[:len(line)-1]
				total--
			}
			return trimCut(line, total), total, nil
		case errors.Is(rerr, bufio.ErrBufferFull):
			continue
		default:
			return trimCut(line, total), total, rerr
		}
	}
}

func trimCut(line []byte, total int) []byte {
	if total > len(line) {
		return cutUTF8(line)
	}
	return line
}

// cutUTF8 drops a rune split by a byte cut at the end of b.
func cutUTF8(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		r, size := utf8.DecodeLastRune(b)
		if r != utf8.RuneError || size != 1 {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

// countLines counts the lines left in r; a last line without a newline
// counts too.
func countLines(ctx context.Context, r io.Reader) (int, error) {
	buf := make([]byte, 64<<10)
	n := 0
	var last byte = '\n'
	for {
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		k, err := r.Read(buf)
		if k > 0 {
			n += bytes.Count(buf[:k], []byte{'\n'})
			last = buf[k-1]
		}
		if errors.Is(err, io.EOF) {
			if last != '\n' {
				n++
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
