package agent

import (
	"strings"
	"testing"
)

func TestToolArgumentValidation(t *testing.T) {
	r := newToolRunner(newMemWorkspace(nil), nil, &fakeSpawner{})
	tests := []struct {
		tool, args string
		wantErr    string // "" = valid
		missing    bool
	}{
		{"read_file", `{"path":"a.go"}`, "", false},
		{"read_file", `{"path":"a.go","offset":10,"limit":20}`, "", false},
		{"read_file", `{}`, "missing property 'path'", true},
		{"read_file", `{"path":"a","offset":0}`, "/offset", false},
		{"read_file", `{"path":"a","offset":"3"}`, "want integer", false},
		{"read_file", ``, "missing property 'path'", true},
		{"read_file", `"{\"path\":\"a\"}"`, "", false}, // double-encoded
		{"read_file", `{"path":`, "not valid JSON", false},
		{"write_file", `{"path":"a"}`, "missing property 'content'", true},
		{"edit_file", `{"path":"a","old_string":"","new_string":"b"}`, "/old_string", false},
		{"multi_edit", `{"path":"a","edits":[]}`, "/edits", false},
		{"multi_edit", `{"path":"a","edits":[{"old_string":"x","new_string":"y","replace_all":true}]}`, "", false},
		{"list_dir", `{}`, "", false},
		{"list_dir", `null`, "", false},
		{"glob", `{"pattern":"**/*.go"}`, "", false},
		{"grep", `{"pattern":"func main","include":"*.go"}`, "", false},
		{"bash", `{"command":"go test ./...","timeout":60}`, "", false},
		{"bash", `{"command":"ls","timeout":1.5}`, "", false},
		{"bash", `{"command":"ls","timeout":0}`, "/timeout", false},
		{"todo_write", `{"todos":[{"content":"x","status":"doing"}]}`, "/todos/0/status", false},
		{"think", `{"thought":"plan"}`, "", false},
		{"spawn_agents", `{"tasks":[{"name":"docs","prompt":"p"}]}`, "", false},
		{"spawn_agents", `{"tasks":[{"name":"../x","prompt":"p"}]}`, "/tasks/0/name", false},
		{"read_artifact", `{"id":"a1"}`, "unknown tool", false}, // no artifact dir
		{"nope", `{}`, "unknown tool \"nope\". Available tools: read_file", false},
	}
	for _, tt := range tests {
		_, err := r.checkCall(tt.tool, []byte(tt.args))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s %s: unexpected error %v", tt.tool, tt.args, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s %s: error %v, want %q", tt.tool, tt.args, err, tt.wantErr)
		case missingRequired(err) != tt.missing:
			t.Errorf("%s %s: missingRequired = %v", tt.tool, tt.args, !tt.missing)
		}
		if err != nil && strings.Contains(err.Error(), "mem:///") {
			t.Errorf("%s: error leaks the schema URL: %v", tt.tool, err)
		}
	}
}

func TestWorkspaceToolsMatchDesign(t *testing.T) {
	got := strings.Join(WorkspaceTools(), ",")
	if got != "read_file,write_file,edit_file,multi_edit,list_dir,glob,grep,bash,process_start,process_output,process_stop,git_diff,git_log,git_show,git_blame,web_fetch" {
		t.Fatalf("workspace tools = %s", got)
	}
	for _, s := range toolSpecs {
		if len(s.description) < 40 || s.oneLine == "" {
			t.Errorf("%s: describe the tool for the model", s.name)
		}
	}
}

func TestAliasesFromOtherToolSets(t *testing.T) {
	ws := newMemWorkspace(map[string]string{"a.go": "package a\n"})
	c := &fakeClient{replies: []replyFn{
		calls("Read", `{"file_path":"a.go"}`, "Bash", `{"cmd":"ls"}`, "str_replace", `{"path":"a.go","old_str":"package a","new_str":"package b"}`),
		text(`<tool_call>{"name": "LS", "arguments": {}}</tool_call>`),
		text("I fixed the run() helper; done."),
	}}
	a := newTestAgent(t, c, ws, nil)
	res, err := a.Run(t.Context(), "go")
	if err != nil || res.Text != "I fixed the run() helper; done." {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	var names []string
	for _, r := range res.ToolCalls {
		names = append(names, r.Name)
		if r.IsError {
			t.Errorf("%s failed", r.Name)
		}
	}
	if got := strings.Join(names, ","); got != "read_file,bash,edit_file,list_dir" {
		t.Fatalf("calls = %s", got)
	}
	if ws.files["a.go"] != "package b\n" {
		t.Fatalf("a.go = %q", ws.files["a.go"])
	}
	// An alias never overrides an argument given under our own name.
	if got := string(canonicalArgs(ToolReadFile, []byte(`{"path":"x","file_path":"y"}`))); !strings.Contains(got, `"path":"x"`) {
		t.Fatalf("args = %s", got)
	}
}
