package toolparse

import (
	"reflect"
	"strings"
	"testing"
)

var tools = []string{"read_file", "write_file", "edit_file", "bash", "list_dir", "grep"}

func TestParseFormats(t *testing.T) {
	read := Call{Name: "read_file", Arguments: `{"path":"main.go"}`}
	bash := Call{Name: "bash", Arguments: `{"command":"go test ./..."}`}
	tests := []struct {
		name  string
		in    string
		calls []Call
		text  string
	}{
		{"hermes tags", "I'll look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.go\"}}\n</tool_call>", []Call{read}, "I'll look."},
		{"hermes two calls", `<tool_call>{"name":"read_file","arguments":{"path":"main.go"}}</tool_call>
<tool_call>{"name":"bash","arguments":{"command":"go test ./..."}}</tool_call>`, []Call{read, bash}, ""},
		{"think stripped first", "<think>maybe <tool_call>{\"name\":\"bash\",\"arguments\":{\"command\":\"rm -rf /\"}}</tool_call></think>Reading.<tool_call>{\"name\":\"read_file\",\"arguments\":{\"path\":\"main.go\"}}</tool_call>", []Call{read}, "Reading."},
		{"close tag swallowed by stop sequence", `<tool_call>{"name":"read_file","arguments":{"path":"main.go"}}`, []Call{read}, ""},
		{"pipe tags", `<|tool_call|>{"name":"read_file","arguments":{"path":"main.go"}}<|/tool_call|>`, []Call{read}, ""},
		{"pipe tags array", `<|tool_call|>[{"name":"read_file","arguments":{"path":"main.go"}},{"name":"bash","arguments":{"command":"go test ./..."}}]<|/tool_call|>`, []Call{read, bash}, ""},
		{"bracket tags", `Sure. [TOOL_CALL]{"name":"bash","arguments":{"command":"go test ./..."}}[/TOOL_CALL]`, []Call{bash}, "Sure."},
		{"mistral tool_calls", `[TOOL_CALLS][{"name":"bash","arguments":{"command":"go test ./..."}}]`, []Call{bash}, ""},
		{"function_call tags", `<function_call>{"name":"read_file","arguments":"{\"path\":\"main.go\"}"}</function_call>`, []Call{read}, ""},
		{"function equals", `<function=read_file>{"path": "main.go"}</function>`, []Call{read}, ""},
		{"json fence", "Let me check:\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"main.go\"}}\n```\nthen more.", []Call{read}, "Let me check:\n\nthen more."},
		{"bare object", `{"name": "bash", "arguments": {"command": "go test ./..."}}`, []Call{bash}, ""},
		{"bare with prose", "Running tests now {\"name\": \"bash\", \"arguments\": {\"command\": \"go test ./...\"}} ok", []Call{bash}, "Running tests now  ok"},
		{"arguments as string", `{"name":"read_file","arguments":"{\"path\": \"main.go\"}"}`, []Call{read}, ""},
		{"function wrapper", `{"type":"function","function":{"name":"read_file","arguments":{"path":"main.go"}}}`, []Call{read}, ""},
		{"function wrapper with string args", `{"function":{"name":"read_file","arguments":"{\"path\":\"main.go\"}"}}`, []Call{read}, ""},
		{"tool parameters", `{"tool": "read_file", "parameters": {"path": "main.go"}}`, []Call{read}, ""},
		{"tool args", `{"tool": "bash", "args": {"command": "go test ./..."}}`, []Call{bash}, ""},
		{"tool_calls wrapper", `{"tool_calls":[{"function":{"name":"bash","arguments":{"command":"go test ./..."}}}]}`, []Call{bash}, ""},
		{"tagged without arguments", `<tool_call>{"name":"list_dir"}</tool_call>`, []Call{{Name: "list_dir", Arguments: "{}"}}, ""},
		{"tagged fenced body", "<tool_call>\n```json\n{\"name\":\"read_file\",\"arguments\":{\"path\":\"main.go\"}}\n```\n</tool_call>", []Call{read}, ""},
		{"back to back objects in tag", `<tool_call>{"name":"read_file","arguments":{"path":"main.go"}}
{"name":"bash","arguments":{"command":"go test ./..."}}</tool_call>`, []Call{read, bash}, ""},
		{"unicode args", `<tool_call>{"name":"write_file","arguments":{"path":"a.txt","content":"日本語 🚀"}}</tool_call>`, []Call{{Name: "write_file", Arguments: `{"path":"a.txt","content":"日本語 🚀"}`}}, ""},
		{"qwen3-coder xml", "I'll run it.\n<tool_call>\n<function=bash>\n<parameter=command>\ngo test ./...\n</parameter>\n</function>\n</tool_call>", []Call{bash}, "I'll run it."},
		{"qwen3-coder xml typed and multiline", "<tool_call>\n<function=edit_file>\n<parameter=path>\na.go\n</parameter>\n<parameter=old_string>\nx := 1\ny := 2\n</parameter>\n<parameter=new_string>\nx := 3\n</parameter>\n<parameter=replace_all>\ntrue\n</parameter>\n</function>\n</tool_call>",
			[]Call{{Name: "edit_file", Arguments: `{"new_string":"x := 3","old_string":"x := 1\ny := 2","path":"a.go","replace_all":true}`}}, ""},
		{"qwen3-coder xml two functions", "<tool_call>\n<function=read_file>\n<parameter=path>\nmain.go\n</parameter>\n</function>\n<function=bash>\n<parameter=command>\ngo test ./...\n</parameter>\n</function>\n</tool_call>", []Call{read, bash}, ""},
		{"function equals with parameters, no tool_call tag", "<function=read_file>\n<parameter=path>\nmain.go\n</parameter>\n</function>", []Call{read}, ""},
		{"qwen template think", "I should read it.</think>\n<tool_call>{\"name\":\"read_file\",\"arguments\":{\"path\":\"main.go\"}}</tool_call>", []Call{read}, ""},
	}
	p := New(tools...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
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

func TestParseFalsePositives(t *testing.T) {
	tests := []struct{ name, in string }{
		{"prose json", `The API returns {"name": "Alice", "age": 30} for each user.`},
		{"unknown tool", `<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>`},
		{"unknown bare", `{"name": "launch_rockets", "arguments": {"count": 3}}`},
		{"package.json in fence", "Here is the file:\n```json\n{\"name\": \"my-app\", \"version\": \"1.0.0\", \"scripts\": {\"test\": \"jest\"}}\n```"},
		{"known name without arguments in prose", `The tool is configured as {"name": "bash"} in the registry.`},
		{"tool call example inside code block of other language", "```go\nx := map[string]any{\"name\": \"bash\"}\n```"},
		{"json with name field nested", `{"user": {"name": "read_file", "arguments": 3}}`},
		{"arguments neither object nor json", `{"name": "bash", "arguments": 42}`},
		{"go code", "func main() {\n\tfmt.Println(\"hi\")\n}"},
		{"only thinking", `<think>{"name":"bash","arguments":{"command":"ls"}}</think>All done.`},
		{"plain answer", "I fixed the bug in main.go; tests pass."},
		{"unknown xml function", "<tool_call>\n<function=format_disk>\n<parameter=dev>\nsda\n</parameter>\n</function>\n</tool_call>"},
	}
	p := New(tools...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := p.Parse(tt.in)
			if len(r.Calls) != 0 {
				t.Errorf("parsed calls from %q: %+v", tt.in, r.Calls)
			}
			if r.Incomplete {
				t.Errorf("reported incomplete for %q", tt.in)
			}
		})
	}
	// Non-calls stay visible.
	in := "Here is the file:\n```json\n{\"name\": \"my-app\"}\n```"
	if r := p.Parse(in); r.Text != in {
		t.Errorf("text changed: %q", r.Text)
	}
}

func TestParseIncomplete(t *testing.T) {
	tests := []struct{ name, in, frag string }{
		{"unclosed tag", "Writing now.\n<tool_call>{\"name\":\"write_file\",\"arguments\":{\"path\":\"a.go\",\"content\":\"package ma", "<tool_call>"},
		{"empty unclosed tag", "Okay <tool_call>", "<tool_call>"},
		{"cut bare json", `{"name": "write_file", "arguments": {"path": "a.go", "content": "pack`, `{"name"`},
		{"cut function equals", `<function=write_file>{"path": "a.go", "cont`, "<function="},
		{"cut qwen3-coder parameter", "<tool_call>\n<function=write_file>\n<parameter=path>\na.go\n</parameter>\n<parameter=content>\npackage ma", "<tool_call>"},
		{"cut mistral", `[TOOL_CALLS][{"name":"bash","arguments":{"comm`, "[TOOL_CALLS]"},
	}
	p := New(tools...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := p.Parse(tt.in)
			if !r.Incomplete || !strings.HasPrefix(r.Fragment, tt.frag) {
				t.Fatalf("incomplete=%v fragment=%q", r.Incomplete, r.Fragment)
			}
			if len(r.Calls) != 0 {
				t.Errorf("calls: %+v", r.Calls)
			}
			if strings.Contains(r.Text, tt.frag) {
				t.Errorf("fragment left in text: %q", r.Text)
			}
		})
	}
	// A complete call before a cut one is kept.
	r := p.Parse(`<tool_call>{"name":"bash","arguments":{"command":"ls"}}</tool_call><tool_call>{"name":"bash","argu`)
	if len(r.Calls) != 1 || !r.Incomplete {
		t.Fatalf("got %+v", r)
	}
}

func TestStripThink(t *testing.T) {
	tests := []struct{ in, visible, thinking string }{
		{"<think>a</think>b", "b", "a"},
		{"x<think>a</think>y<think>c</think>z", "xyz", "a\n\nc"},
		{"a</think>b", "b", "a"},
		{"b<think>never closed", "b", "never closed"},
		{"plain", "plain", ""},
		{"<thinking>t</thinking>v", "v", "t"},
	}
	for _, tt := range tests {
		v, th := StripThink(tt.in)
		if v != tt.visible || th != tt.thinking {
			t.Errorf("StripThink(%q) = %q, %q; want %q, %q", tt.in, v, th, tt.visible, tt.thinking)
		}
	}
}

func TestLooksLikeAction(t *testing.T) {
	p := New(tools...)
	yes := []string{
		"Let me run the tests to check.",
		"I'll edit main.go to fix the import.",
		"Now I will read the config file.",
		"Run this:\n```bash\ngo test ./...\n```",
		`I call read_file("main.go") now`,
		`<tool_call>{"name": "bash"`,
	}
	no := []string{
		"I fixed the bug; all tests pass.",
		"Let me know if you need anything else.",
		"The function reads the file and returns its lines.",
		"<think>let me run the tests</think>Done: the change is committed.",
		"",
	}
	for _, s := range yes {
		if !p.LooksLikeAction(s) {
			t.Errorf("LooksLikeAction(%q) = false", s)
		}
	}
	for _, s := range no {
		if p.LooksLikeAction(s) {
			t.Errorf("LooksLikeAction(%q) = true", s)
		}
	}
}

func TestParseNoPanicOnJunk(t *testing.T) {
	p := New(tools...)
	junk := []string{"{", "}", "<tool_call>", "</tool_call>", "```", "```json\n{", "[TOOL_CALLS]", "<function=", "{\"", strings.Repeat("{\"a\":", 2000), "<think>", "</think>"}
	for _, j := range junk {
		_ = p.Parse(j)
		_ = p.LooksLikeAction(j)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`<tool_call>{"name":"bash","arguments":{"command":"ls"}}</tool_call>`)
	f.Add("```json\n{\"name\":\"read_file\",\"arguments\":{}}\n```")
	for _, c := range formatCases {
		f.Add(c.in)
	}
	p := New(tools...)
	f.Fuzz(func(t *testing.T, s string) {
		r := p.Parse(s)
		for _, c := range r.Calls {
			if c.Name == "" {
				t.Fatal("call without a name")
			}
		}
	})
}
