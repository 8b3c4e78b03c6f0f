package agent

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestScriptedTextFormatsStreamed serves each model family's own tool-call
// format as the whole reply, streamed two runes at a time over SSE as
// llama-server streams content it did not parse, and checks that the call
// runs, and that a near miss in the same format does not.
func TestScriptedTextFormatsStreamed(t *testing.T) {
	read := `{"path": "a.txt"}`
	tests := []struct {
		format, call, nearMiss string
	}{
		{"mistral", `[TOOL_CALLS]read_file[ARGS]` + read, `[TOOL_CALLS]read_file[ARGS]{"path": 42}`},
		{"deepseek-r1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file\n```json\n" + read + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file\n```json\n{\"path\": 42}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
		{"deepseek-v3.1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>read_file<｜tool▁sep｜>" + read + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
			"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>format_disk<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
		{"gpt-oss", "<|channel|>analysis<|message|>Read it.<|end|><|start|>assistant<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>" + read + "<|call|>",
			"<|channel|>analysis<|message|>Maybe <|start|>assistant<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>" + read + "<|call|><|end|><|start|>assistant<|channel|>final<|message|>done<|return|>"},
		{"functionary-v3.2", "all\nReading.>>>read_file\n" + read, ">>>read_file\n{\"path\": 42}"},
		{"kimi-k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.read_file:0<|tool_call_argument_begin|>" + read + "<|tool_call_end|><|tool_calls_section_end|>",
			"Kimi writes `<|tool_call_begin|>functions.read_file:0<|tool_call_argument_begin|>" + read + "<|tool_call_end|>`."},
		{"glm-4.5", "<tool_call>read_file\n<arg_key>path</arg_key>\n<arg_value>a.txt</arg_value>\n</tool_call>",
			"<tool_call>format_disk\n<arg_key>path</arg_key>\n<arg_value>a.txt</arg_value>\n</tool_call>"},
		{"minimax-m2", "<minimax:tool_call>\n<invoke name=\"read_file\">\n<parameter name=\"path\">a.txt</parameter>\n</invoke>\n</minimax:tool_call>",
			"<minimax:tool_call>\n<invoke name=\"format_disk\">\n<parameter name=\"path\">a.txt</parameter>\n</invoke>\n</minimax:tool_call>"},
		{"pythonic", `[read_file(path="a.txt")]`, `[read_file(path=42)]`},
		{"lfm2", `<|tool_call_start|>[read_file(path="a.txt")]<|tool_call_end|>`, "Use `[read_file(path=\"a.txt\")]` to read it."},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			call, _ := json.Marshal(tt.call)
			c, srv := scriptedClient(t, `
chunk: 2
turns:
  - expect: {no_tools: true}
    text: `+string(call)+`
  - expect: {no_tools: true, last_contains: "hi from a.txt"}
    text: "It says hi."
`)
			ws := newMemWorkspace(map[string]string{"a.txt": "hi from a.txt"})
			a := newTestAgent(t, c, ws, func(o *Options) { o.ToolMode = ToolModeText })
			res, err := a.Run(t.Context(), "what does a.txt say?")
			if err != nil {
				t.Fatalf("%v (%q)", err, srv.Mismatches())
			}
			noMismatches(t, srv)
			if len(res.ToolCalls) != 1 || res.Text != "It says hi." {
				t.Fatalf("res = %+v", res)
			}
			if got := modelCalls(ws); len(got) != 1 || got[0] != `read_file {"path":"a.txt"}` {
				t.Fatalf("workspace calls %q", got)
			}

			miss, _ := json.Marshal(tt.nearMiss)
			c, srv = scriptedClient(t, `
chunk: 2
turns:
  - text: `+string(miss)+`
  - text: "Nothing to run."
`)
			ws = newMemWorkspace(map[string]string{"a.txt": "hi from a.txt"})
			a = newTestAgent(t, c, ws, func(o *Options) { o.ToolMode = ToolModeText })
			res, err = a.Run(t.Context(), "what does a.txt say?")
			if err != nil {
				t.Fatalf("%v (%q)", err, srv.Mismatches())
			}
			if got := modelCalls(ws); len(got) != 0 {
				t.Fatalf("near miss ran %q (res %+v)", got, res)
			}
		})
	}
}

// modelCalls are the workspace calls on a.txt (the agent reads its memory
// files by itself).
func modelCalls(ws *memWorkspace) []string {
	var out []string
	for _, c := range ws.calls() {
		if strings.Contains(c, "a.txt") {
			out = append(out, c)
		}
	}
	return out
}
