package toolparse

import "strings"

var thinkTags = [][2]string{{"<think>", "</think>"}, {"<thinking>", "</thinking>"}, {"<reasoning>", "</reasoning>"}, {"<|START_THINKING|>", "<|END_THINKING|>"}}

// StripThink removes reasoning blocks and returns the visible text and the
// reasoning. It handles the shapes local models produce: whole
// <think>...</think> blocks, a reply that starts inside the block (the
// template opened it, so only "</think>" appears), and a block that never
// closes (the reply was cut off while thinking: all of it is reasoning).
func StripThink(text string) (visible, thinking string) {
	var think []string
	for _, t := range thinkTags {
		open, closeTag := t[0], t[1]
		// Only a close tag, before any open tag: everything before it was
		// reasoning.
		if c := strings.Index(text, closeTag); c >= 0 {
			if o := strings.Index(text, open); o < 0 || o > c {
				think = append(think, strings.TrimSpace(text[:c]))
				text = text[c+len(closeTag):]
			}
		}
		for {
			o := strings.Index(text, open)
			if o < 0 {
				break
			}
			rest := text[o+len(open):]
			c := strings.Index(rest, closeTag)
			if c < 0 {
				think = append(think, strings.TrimSpace(rest))
				text = text[:o]
				break
			}
			think = append(think, strings.TrimSpace(rest[:c]))
			text = text[:o] + rest[c+len(closeTag):]
		}
	}
	return text, strings.Join(nonEmpty(think), "\n\n")
}

func nonEmpty(ss []string) []string {
	out := ss[:0]
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
