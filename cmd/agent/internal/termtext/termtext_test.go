package termtext

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The attacks a hostile model, command or repository can aim at a
// terminal, each shown escaped.
var attacks = []struct {
	name, in, line string
}{
	{"clear screen", "ok\x1b[2J\x1b[H", `ok\x1b[2J\x1b[H`},
	{"OSC 52 clipboard", "\x1b]52;c;ZWNobyBwd25lZA==\x07", `\x1b]52;c;ZWNobyBwd25lZA==\x07`},
	{"window title", "\x1b]0;pwned\x1b\\", `\x1b]0;pwned\x1b\`},
	{"8-bit CSI", "a\u009b2Jb", `a\u009b2Jb`},
	{"bidi override", "x\u202eexe.txt", `x\u202eexe.txt`},
	{"carriage return overwrite", "Tests: FAILED\rTests: passed", `Tests: FAILED\rTests: passed`},
	{"invalid utf-8", "a\xffb", `a\xffb`},
	{"newline", "a\nb", `a\nb`},
	{"backspace", "abc\b\b\b", `abc\x08\x08\x08`},
}

func TestLineEscapesEveryControl(t *testing.T) {
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			got := Line(a.in)
			if got != a.line {
				t.Errorf("Line(%q) = %q, want %q", a.in, got, a.line)
			}
			if hasControl(got) {
				t.Errorf("Line(%q) still holds a control: %q", a.in, got)
			}
		})
	}
}

// hasControl reports a C0/C1 control or DEL anywhere in s.
func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return true
		}
	}
	return false
}

func TestPlainTextUnchanged(t *testing.T) {
	for _, s := range []string{"", "hello, world", "café ünïcode 日本語 🙂", "tab\tand\nnewline"} {
		if got := Text(s); got != s {
			t.Errorf("Text(%q) = %q", s, got)
		}
	}
	if got := Line("a\tb"); got != `a\tb` {
		t.Errorf("Line keeps a tab: %q", got)
	}
	if got := Text("line\r\nnext\rover"); got != "line\nnext\\rover" {
		t.Errorf("Text CRLF: %q", got)
	}
}

func TestPathQuotesLikeGit(t *testing.T) {
	for in, want := range map[string]string{
		"src/main.go":           "src/main.go",
		"café.txt":              "café.txt",
		"a\nM forged.txt":       `"a\nM forged.txt"`,
		"with \"quote\"":        `"with \"quote\""`,
		`back\slash`:            `"back\\slash"`,
		"esc\x1b[2J":            `"esc\033[2J"`,
		"bad\xff":               `"bad\377"`,
		"tab\there":             `"tab\there"`,
		"rtl\u202etxt.exe":      `"rtl\342\200\256txt.exe"`,
		"a space is fine.txt":   "a space is fine.txt",
		"c1\u0085next line.txt": `"c1\302\205next line.txt"`,
	} {
		if got := Path(in); got != want {
			t.Errorf("Path(%q) = %s, want %s", in, got, want)
		}
	}
}

// The control run: with escaping off, the same bytes reach the output raw.
// Without it, the tests above could pass on a function that never sees
// the attack.
func TestPassthroughControl(t *testing.T) {
	restore := Passthrough()
	for _, a := range attacks {
		if got := Line(a.in); got != a.in {
			t.Errorf("passthrough changed %q to %q", a.in, got)
		}
	}
	if got := Path("a\nb"); got != "a\nb" {
		t.Errorf("passthrough Path: %q", got)
	}
	restore()
	if got := Line("\x1b"); got != `\x1b` {
		t.Errorf("escaping is not back on after restore: %q", got)
	}
}

func TestWriterStreamsSplitCharacters(t *testing.T) {
	in := "héllo \x1b[31mred\x1b[0m 🙂 line\r\nnext\x9b"
	var whole bytes.Buffer
	w := NewWriter(&whole)
	_, _ = w.Write([]byte(in))
	_ = w.Flush()
	// Byte by byte, every multi-byte character is split.
	var split bytes.Buffer
	w = NewWriter(&split)
	for i := 0; i < len(in); i++ {
		_, _ = w.Write([]byte{in[i]})
	}
	_ = w.Flush()
	if whole.String() != split.String() {
		t.Errorf("split writes differ:\n%q\n%q", whole.String(), split.String())
	}
	if want := Text(in); whole.String() != want {
		t.Errorf("writer = %q, want %q", whole.String(), want)
	}
	if strings.ContainsRune(split.String(), 0x1b) {
		t.Errorf("ESC reached the output: %q", split.String())
	}
}

func TestJSONEscapesC1AndBidi(t *testing.T) {
	b, _ := json.Marshal(map[string]string{"s": "a\u009b2J\u202eb\x1b"})
	out := JSON(b)
	if hasControl(string(out)) || strings.ContainsRune(string(out), 0x202e) {
		t.Fatalf("JSON output holds a control: %q", out)
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || back["s"] != "a\u009b2J\u202eb\x1b" {
		t.Fatalf("JSON changed the value: %v %q", err, back["s"])
	}
	// Control: encoding/json alone leaves the C1 CSI raw.
	if !strings.ContainsRune(string(b), 0x9b) {
		t.Fatalf("control: encoding/json escaped U+009B itself: %q", b)
	}
}
