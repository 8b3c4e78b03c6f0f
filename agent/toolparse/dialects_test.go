package toolparse

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// required is a stand-in for schema validation: the argument each tool
// cannot do without, and that it must be a string.
var required = map[string]string{"read_file": "path", "write_file": "path", "edit_file": "path", "bash": "command", "grep": "pattern"}

func schemaCheck(name, args string) bool {
	var obj map[string]any
	if json.Unmarshal([]byte(args), &obj) != nil {
		return false
	}
	k, ok := required[name]
	if !ok {
		return true
	}
	_, isStr := obj[k].(string)
	return isStr
}

var (
	readMain = Call{Name: "read_file", Arguments: `{"path":"main.go"}`}
	runTests = Call{Name: "bash", Arguments: `{"command":"go test ./..."}`}
)

// formatCase is one reply in a model family's own format.
type formatCase struct {
	format, name, in string
	calls            []Call
	text             string
}

// formatCases are written as llama.cpp's chat parser (common/chat.cpp) and
// the models' chat templates write them.
var formatCases = []formatCase{
	{"mistral", "one call", `[TOOL_CALLS]read_file[ARGS]{"path": "main.go"}`, []Call{readMain}, ""},
	{"mistral", "text first", "Let me read it.[TOOL_CALLS]read_file[ARGS]{\"path\":\"main.go\"}", []Call{readMain}, "Let me read it."},
	{"mistral", "two calls", `[TOOL_CALLS]read_file[ARGS]{"path":"main.go"}[TOOL_CALLS]bash[ARGS]{"command":"go test ./..."}`, []Call{readMain, runTests}, ""},
	{"mistral", "two calls one marker", `[TOOL_CALLS]read_file[ARGS]{"path":"main.go"}bash[ARGS]{"command":"go test ./..."}`, []Call{readMain, runTests}, ""},
	{"mistral", "call id", `[TOOL_CALLS]read_file[CALL_ID]a1B2c3D4e[ARGS]{"path":"main.go"}`, []Call{readMain}, ""},

	{"deepseek-r1", "one call", "<think>Read it first.</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file\n```json\n{\"path\": \"main.go\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", []Call{readMain}, ""},
	{"deepseek-r1", "two calls", "On it.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file\n```json\n{\"path\": \"main.go\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>bash\n```json\n{\"command\": \"go test ./...\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", []Call{readMain, runTests}, "On it."},
	{"deepseek-r1", "underscore tokens", "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>read_file\n```json\n{\"path\": \"main.go\"}\n```<｜tool_call_end｜><｜tool_calls_end｜>", []Call{readMain}, ""},
	{"deepseek-v3.1", "one call", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>read_file<｜tool▁sep｜>{\"path\": \"main.go\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", []Call{readMain}, ""},
	{"deepseek-v3.1", "two calls", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>read_file<｜tool▁sep｜>{\"path\":\"main.go\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>bash<｜tool▁sep｜>{\"command\":\"go test ./...\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", []Call{readMain, runTests}, ""},

	{"gpt-oss", "analysis then call", "<|channel|>analysis<|message|>Need to read main.go.<|end|><|start|>assistant<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>{\"path\":\"main.go\"}<|call|>", []Call{readMain}, ""},
	{"gpt-oss", "recipient first", "<|start|>assistant to=functions.read_file<|channel|>commentary json<|message|>{\"path\":\"main.go\"}<|call|>", []Call{readMain}, ""},
	{"gpt-oss", "no constrain", "<|channel|>commentary to=functions.bash<|message|>{\"command\":\"go test ./...\"}<|call|>", []Call{runTests}, ""},

	{"functionary-v3.2", "text and call", ">>>all\nLet me look.\n>>>read_file\n{\"path\": \"main.go\"}", []Call{readMain}, "Let me look."},
	{"functionary-v3.2", "first recipient opened by the template", "read_file\n{\"path\": \"main.go\"}", []Call{readMain}, ""},
	{"functionary-v3.2", "two calls", "all\nChecking.>>>read_file\n{\"path\": \"main.go\"}>>>bash\n{\"command\": \"go test ./...\"}", []Call{readMain, runTests}, "Checking."},

	{"kimi-k2", "one call", "<|tool_calls_section_begin|><|tool_call_begin|>functions.read_file:0<|tool_call_argument_begin|>{\"path\": \"main.go\"}<|tool_call_end|><|tool_calls_section_end|>", []Call{readMain}, ""},
	{"kimi-k2", "two calls with text", "I will check.\n<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.read_file:0<|tool_call_argument_begin|>{\"path\":\"main.go\"}<|tool_call_end|>\n<|tool_call_begin|>functions.bash:1<|tool_call_argument_begin|>{\"command\":\"go test ./...\"}<|tool_call_end|>\n<|tool_calls_section_end|>", []Call{readMain, runTests}, "I will check."},

	{"glm-4.5", "one call", "<tool_call>read_file\n<arg_key>path</arg_key>\n<arg_value>main.go</arg_value>\n</tool_call>", []Call{readMain}, ""},
	{"glm-4.5", "4.7 without newlines, typed", "Editing.<tool_call>edit_file<arg_key>path</arg_key><arg_value>a.go</arg_value><arg_key>replace_all</arg_key><arg_value>true</arg_value></tool_call>", []Call{{Name: "edit_file", Arguments: `{"path":"a.go","replace_all":true}`}}, "Editing."},
	{"glm-4.5", "two calls", "<tool_call>read_file\n<arg_key>path</arg_key>\n<arg_value>main.go</arg_value>\n</tool_call>\n<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>go test ./...</arg_value>\n</tool_call>", []Call{readMain, runTests}, ""},

	{"minimax-m2", "one call", "<minimax:tool_call>\n<invoke name=\"read_file\">\n<parameter name=\"path\">main.go</parameter>\n</invoke>\n</minimax:tool_call>", []Call{readMain}, ""},
	{"minimax-m2", "two invokes", "Looking.\n<minimax:tool_call>\n<invoke name=\"read_file\">\n<parameter name=\"path\">main.go</parameter>\n</invoke>\n<invoke name=\"bash\">\n<parameter name=\"command\">go test ./...</parameter>\n</invoke>\n</minimax:tool_call>", []Call{readMain, runTests}, "Looking."},

	{"seed-oss", "one call", "<seed:tool_call>\n<function=read_file>\n<parameter=path>\nmain.go\n</parameter>\n</function>\n</seed:tool_call>", []Call{readMain}, ""},
	{"command-r7b", "one call", `<|START_THINKING|>Read it.<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", "tool_name": "read_file", "parameters": {"path": "main.go"}}]<|END_ACTION|>`, []Call{readMain}, ""},
	{"nemotron", "one call", `<TOOLCALL>[{"name": "read_file", "arguments": {"path": "main.go"}}]</TOOLCALL>`, []Call{readMain}, ""},
	{"pythonic", "llama 4", `[read_file(path="main.go")]`, []Call{readMain}, ""},
	{"pythonic", "two calls, both quotes", `[read_file(path='main.go'), bash(command="go test ./...")]`, []Call{readMain, runTests}, ""},
	{"pythonic", "literals", `[bash(command="go test ./...", timeout=60, env={'A': [1, 2.5, True, None]})]`, []Call{{Name: "bash", Arguments: `{"command":"go test ./...","env":{"A":[1,2.5,true,null]},"timeout":60}`}}, ""},
	{"pythonic", "lfm2 tags", `<|tool_call_start|>[read_file(path="main.go")]<|tool_call_end|>Reading.`, []Call{readMain}, "Reading."},
	{"pythonic", "escapes", `[write_file(path="a.txt", content="line 1\nit's \"quoted\"")]`, []Call{{Name: "write_file", Arguments: `{"content":"line 1\nit's \"quoted\"","path":"a.txt"}`}}, ""},
}

func TestParseModelFormats(t *testing.T) {
	p := New(tools...).WithCheck(schemaCheck)
	for _, tt := range formatCases {
		t.Run(tt.format+"/"+tt.name, func(t *testing.T) {
			r := p.Parse(tt.in)
			if !reflect.DeepEqual(r.Calls, tt.calls) {
				t.Errorf("calls\n got %+v\nwant %+v", r.Calls, tt.calls)
			}
			if r.Text != tt.text {
				t.Errorf("text %q, want %q", r.Text, tt.text)
			}
			if r.Incomplete {
				t.Errorf("reported incomplete: %q", r.Fragment)
			}
		})
	}
}

// TestParseModelFormatsStreamed parses every prefix of each reply, cut at
// rune boundaries as a server streams it: no prefix may yield a call that
// the whole reply does not make (a call cut inside its arguments is never
// taken for a smaller one), and a prefix that ends inside a call asks for
// more instead of being answered as text.
func TestParseModelFormatsStreamed(t *testing.T) {
	p := New(tools...).WithCheck(schemaCheck)
	for _, tt := range formatCases {
		t.Run(tt.format+"/"+tt.name, func(t *testing.T) {
			var b strings.Builder
			for i, w := 0, 0; i < len(tt.in); i += w {
				_, w = utf8.DecodeRuneInString(tt.in[i:])
				b.WriteString(tt.in[i : i+w])
				r := p.Parse(b.String())
				for _, c := range r.Calls {
					if !containsCall(tt.calls, c) {
						t.Fatalf("prefix %q yields %+v", b.String(), c)
					}
				}
			}
			if r := p.Parse(b.String()); !reflect.DeepEqual(r.Calls, tt.calls) {
				t.Errorf("whole: %+v", r.Calls)
			}
		})
	}
}

func containsCall(calls []Call, c Call) bool {
	for _, x := range calls {
		if x == c {
			return true
		}
	}
	return false
}

// TestParseModelFormatsNearMiss: text that only looks like each format (an
// unknown tool, a mention in inline code, a call the model considered in its
// reasoning, arguments that fail the schema) is not a call.
func TestParseModelFormatsNearMiss(t *testing.T) {
	tests := []struct{ format, name, in string }{
		{"mistral", "unknown tool", `[TOOL_CALLS]format_disk[ARGS]{"device":"/dev/sda"}`},
		{"mistral", "one unknown spoils the block", `[TOOL_CALLS]read_file[ARGS]{"path":"main.go"}[TOOL_CALLS]format_disk[ARGS]{"device":"/dev/sda"}`},
		{"mistral", "mention in inline code", "Devstral writes `[TOOL_CALLS]bash[ARGS]{\"command\":\"ls\"}` to call a tool."},
		{"mistral", "placeholder", "The format is [TOOL_CALLS]name[ARGS]{...} followed by the next call."},
		{"deepseek-r1", "unknown tool", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>format_disk\n```json\n{\"device\": \"sda\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
		{"deepseek-r1", "only in reasoning", "<think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>bash\n```json\n{\"command\": \"rm -rf /\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜></think>No need to run anything."},
		{"deepseek-v3.1", "mention in inline code", "DeepSeek opens calls with `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bash<｜tool▁sep｜>{\"command\":\"ls\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`."},
		{"deepseek-v3.1", "broken arguments", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bash<｜tool▁sep｜>{command: ls}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
		{"gpt-oss", "call only in analysis", "<|channel|>analysis<|message|>I could run <|start|>assistant<|channel|>commentary to=functions.bash <|constrain|>json<|message|>{\"command\":\"rm -rf /\"}<|call|> but will not.<|end|><|start|>assistant<|channel|>final<|message|>No need.<|return|>"},
		{"gpt-oss", "unknown recipient", "<|channel|>commentary to=functions.format_disk <|constrain|>json<|message|>{\"device\":\"sda\"}<|call|>"},
		{"gpt-oss", "prose", "Harmony models address calls to=functions.bash in the commentary channel."},
		{"functionary-v3.2", "unknown recipient", ">>>all\nHere:\n>>>format_disk\n{\"device\": \"sda\"}"},
		{"functionary-v3.2", "schema violation", ">>>bash\n{\"cmd\": \"ls\"}"},
		{"functionary-v3.2", "python prompt", ">>> read_file(path)\n'hello'"},
		{"kimi-k2", "unknown tool", "<|tool_calls_section_begin|><|tool_call_begin|>functions.format_disk:0<|tool_call_argument_begin|>{\"device\":\"sda\"}<|tool_call_end|><|tool_calls_section_end|>"},
		{"kimi-k2", "mention in inline code", "Kimi writes `<|tool_call_begin|>functions.bash:0<|tool_call_argument_begin|>{\"command\":\"ls\"}<|tool_call_end|>`."},
		{"glm-4.5", "unknown tool", "<tool_call>format_disk\n<arg_key>device</arg_key>\n<arg_value>sda</arg_value>\n</tool_call>"},
		{"glm-4.5", "prose in the tag", "<tool_call>read_file is how GLM starts a call</tool_call>"},
		{"glm-4.5", "stray text between arguments", "<tool_call>bash\n<arg_key>command</arg_key>\nls\n<arg_value>ls</arg_value>\n</tool_call>"},
		{"minimax-m2", "unknown tool", "<minimax:tool_call>\n<invoke name=\"format_disk\">\n<parameter name=\"device\">sda</parameter>\n</invoke>\n</minimax:tool_call>"},
		{"minimax-m2", "mention in inline code", "MiniMax wraps calls in `<minimax:tool_call><invoke name=\"bash\"><parameter name=\"command\">ls</parameter></invoke></minimax:tool_call>`."},
		{"pythonic", "list comprehension", "Use [len(x) for x in items] to get the sizes."},
		{"pythonic", "positional argument", `[read_file("main.go")]`},
		{"pythonic", "mention in inline code", "Llama 4 writes `[bash(command=\"ls\")]` for a call."},
		{"pythonic", "schema violation", `[read_file(file="main.go")]`},
		{"pythonic", "markdown link", "See [read_file](docs/tools.md#read_file) for details."},
	}
	p := New(tools...).WithCheck(schemaCheck)
	for _, tt := range tests {
		t.Run(tt.format+"/"+tt.name, func(t *testing.T) {
			r := p.Parse(tt.in)
			if len(r.Calls) != 0 {
				t.Errorf("parsed calls from %q: %+v", tt.in, r.Calls)
			}
			if r.Incomplete {
				t.Errorf("reported incomplete: %q", r.Fragment)
			}
		})
	}
}

func TestParseModelFormatsIncomplete(t *testing.T) {
	tests := []struct{ format, in string }{
		{"mistral", `[TOOL_CALLS]write_file[ARGS]{"path": "a.go", "content": "package ma`},
		{"deepseek-r1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>write_file\n```json\n{\"path\": \"a.go\", \"content\": \"pack"},
		{"deepseek-v3.1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>write_file<｜tool▁sep｜>{\"path\": \"a.go\", \"con"},
		{"gpt-oss", "<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>{\"path\":\"a.go\",\"content\":\"pa"},
		{"functionary-v3.2", ">>>write_file\n{\"path\": \"a.go\", \"content\": \"pa"},
		{"kimi-k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>{\"path\":\"a.go\",\"co"},
		{"glm-4.5", "<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>a.go</arg_value>\n<arg_key>content</arg_key>\n<arg_value>package ma"},
		{"minimax-m2", "<minimax:tool_call>\n<invoke name=\"write_file\">\n<parameter name=\"path\">a.go</parameter>\n<parameter name=\"content\">package ma"},
		{"pythonic", `[write_file(path="a.go", content="package ma`},
	}
	p := New(tools...).WithCheck(schemaCheck)
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			r := p.Parse(tt.in)
			if !r.Incomplete || len(r.Calls) != 0 {
				t.Fatalf("incomplete=%v calls=%+v", r.Incomplete, r.Calls)
			}
			if r.Text != "" {
				t.Errorf("fragment left in text: %q", r.Text)
			}
		})
	}
}

func TestHarmonyChannels(t *testing.T) {
	r := New(tools...).Parse("<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>")
	if r.Text != "Hello! How can I help?" || r.Thinking != "The user greets." || len(r.Calls) != 0 {
		t.Fatalf("got %+v", r)
	}
}
