package agent

import (
	"context"
	"encoding/json"
	"strings"
	"unicode"
)

// ToolRemember appends a note to the repository's memory.
const ToolRemember = "remember"

// Memory is what the agent keeps about a repository across tasks: notes
// read into the system prompt at the start of every task, appended to with
// the remember tool. The orchestrator stores it outside the repository (in
// its state directory), so the sandbox cannot read or change it except
// through remember.
type Memory interface {
	// Notes returns the memory as text for the system prompt ("" if none).
	Notes() (string, error)
	// Remember appends one note.
	Remember(note string) error
}

// MaxNoteRunes caps one remembered note.
const MaxNoteRunes = 500

// memoryPromptMax caps the memory in the system prompt (the newest part is
// kept): a long memory must not crowd out the conversation.
const memoryPromptMax = 8 << 10

var rememberSpec = toolSpec{
	name: ToolRemember, kind: kindLocalWrite,
	oneLine: "save a short note for future tasks on this repository",
	description: "Save one short, lasting fact about this repository for future tasks (how to build or test it, a convention, " +
		"a pitfall you found). It is shown at the start of every later task. Do not save task progress or secrets.",
	schema: `{"type":"object","properties":{
		"note":{"type":"string","minLength":1,"maxLength":500,"description":"One fact, one or two sentences."}},
		"required":["note"]}`,
}

// CleanNote makes a note one line of printable text, at most MaxNoteRunes
// long: control characters (terminal escapes among them) are dropped and
// line breaks become spaces.
func CleanNote(note string) string {
	var b strings.Builder
	for _, r := range note {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			b.WriteRune(' ')
		case unicode.IsControl(r) || r == unicode.ReplacementChar:
		case unicode.Is(unicode.Cf, r): // bidi overrides and other invisible formatting
		default:
			b.WriteRune(r)
		}
	}
	s := strings.Join(strings.Fields(b.String()), " ")
	if r := []rune(s); len(r) > MaxNoteRunes {
		s = string(r[:MaxNoteRunes])
	}
	return s
}

func (r *toolRunner) remember(_ context.Context, args []byte) (ToolResult, error) {
	var a struct {
		Note string `json:"note"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return errResult("remember: %v", err), nil
	}
	note := CleanNote(a.Note)
	if note == "" {
		return errResult("remember: the note is empty"), nil
	}
	// A note that cannot be stored (the memory is full) costs the task
	// nothing: it is a result the model can read, not a failure.
	if err := r.memory.Remember(note); err != nil {
		return errResult("remember: the note was not saved: %v", err), nil
	}
	return ToolResult{Output: "remembered for future tasks on this repository: " + note}, nil
}

// memoryNotes is the memory for the system prompt, newest part kept.
func memoryNotes(m Memory) (string, error) {
	if m == nil {
		return "", nil
	}
	s, err := m.Notes()
	if err != nil {
		return "", err
	}
	s = strings.TrimSpace(s)
	if len(s) > memoryPromptMax {
		s = s[len(s)-memoryPromptMax:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
		s = "[older notes not shown]\n" + s
	}
	return s, nil
}
