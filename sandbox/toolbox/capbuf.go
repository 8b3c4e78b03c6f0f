package toolbox

import (
	"fmt"
	"sync"
	"unicode/utf8"
)

// capBuffer keeps the first and the last bytes written to it and counts the
// rest, so a command that prints gigabytes ("yes") costs a fixed amount of
// memory while the model still sees how the output began and ended.
type capBuffer struct {
	mu       sync.Mutex
	headCap  int
	head     []byte
	tail     []byte // ring buffer of tailCap bytes once full
	tailCap  int
	tailNext int // where the next byte goes once the ring is full
	total    int64
}

func newCapBuffer(limit int) *capBuffer {
	head := limit / 4
	return &capBuffer{headCap: head, tailCap: limit - head}
}

// Write never fails: dropping bytes is the point.
func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	if room := b.headCap - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) >= b.tailCap {
		// Only the end of p can survive.
		b.tail = append(b.tail[:0], p[len(p)-b.tailCap:]...)
		b.tailNext = 0
		return n, nil
	}
	for len(p) > 0 {
		if len(b.tail) < b.tailCap {
			k := min(b.tailCap-len(b.tail), len(p))
			b.tail = append(b.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(b.tail[b.tailNext:], p)
		b.tailNext = (b.tailNext + k) % b.tailCap
		p = p[k:]
	}
	return n, nil
}

// String returns the kept output and whether anything was dropped; a
// dropped middle is replaced by a marker saying how much is missing.
func (b *capBuffer) String() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tail := make([]byte, 0, len(b.tail))
	tail = append(tail, b.tail[b.tailNext:]...)
	tail = append(tail, b.tail[:b.tailNext]...)
	kept := int64(len(b.head) + len(tail))
	if kept == b.total {
		return string(b.head) + string(tail), false
	}
	// Cut on rune boundaries so the marker does not split a character.
	head := cutUTF8(b.head)
	start := 0
	for start < len(tail) && start < utf8.UTFMax && !utf8.RuneStart(tail[start]) {
		start++
	}
	tail = tail[start:]
	omitted := b.total - int64(len(head)) - int64(len(tail))
	return fmt.Sprintf("%s\n[... %d bytes of output omitted ...]\n%s", head, omitted, tail), true
}
