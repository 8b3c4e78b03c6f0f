package agent

import "strings"

// thinkSplitter routes streamed text inside <think>...</think> to thinking
// deltas: models whose server does not separate reasoning (no reasoning
// parser, text tool-call mode) write it into the visible text. Tags may
// arrive split across chunks, so a possible tag prefix at the end of a
// chunk is held back until the next one.
type thinkSplitter struct {
	inThink bool
	pending string
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// feed splits one chunk into visible and thinking text.
func (s *thinkSplitter) feed(chunk string) (visible, thinking string) {
	text := s.pending + chunk
	s.pending = ""
	var vis, think strings.Builder
	for text != "" {
		tag := thinkOpen
		if s.inThink {
			tag = thinkClose
		}
		i := strings.Index(text, tag)
		if i < 0 {
			keep := partialSuffix(text, tag)
			out := text[:len(text)-keep]
			s.pending = text[len(text)-keep:]
			if s.inThink {
				think.WriteString(out)
			} else {
				vis.WriteString(out)
			}
			break
		}
		if s.inThink {
			think.WriteString(text[:i])
		} else {
			vis.WriteString(text[:i])
		}
		text = text[i+len(tag):]
		s.inThink = !s.inThink
	}
	return vis.String(), think.String()
}

// flush returns what is held back at the end of the stream.
func (s *thinkSplitter) flush() (visible, thinking string) {
	p := s.pending
	s.pending = ""
	if s.inThink {
		return "", p
	}
	return p, ""
}

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of tag.
func partialSuffix(s, tag string) int {
	for n := min(len(tag)-1, len(s)); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}
