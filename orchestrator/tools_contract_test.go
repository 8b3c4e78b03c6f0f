package orchestrator

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/sandbox/toolbox"
)

// toolboxArgs are the argument types the toolbox decodes, per tool.
var toolboxArgs = map[string]any{
	toolbox.ToolReadFile:  toolbox.ReadFileArgs{},
	toolbox.ToolWriteFile: toolbox.WriteFileArgs{},
	toolbox.ToolEditFile:  toolbox.EditFileArgs{},
	toolbox.ToolMultiEdit: toolbox.MultiEditArgs{},
	toolbox.ToolListDir:   toolbox.ListDirArgs{},
	toolbox.ToolGlob:      toolbox.GlobArgs{},
	toolbox.ToolGrep:      toolbox.GrepArgs{},
	toolbox.ToolBash:      toolbox.BashArgs{},

	toolbox.ToolProcessStart:  toolbox.ProcessStartArgs{},
	toolbox.ToolProcessOutput: toolbox.ProcessOutputArgs{},
	toolbox.ToolProcessStop:   toolbox.ProcessStopArgs{},
	toolbox.ToolGitDiff:       toolbox.GitDiffArgs{},
	toolbox.ToolGitLog:        toolbox.GitLogArgs{},
	toolbox.ToolGitShow:       toolbox.GitShowArgs{},
	toolbox.ToolGitBlame:      toolbox.GitBlameArgs{},
	toolbox.ToolWebFetch:      toolbox.WebFetchArgs{},
}

// toolboxOnly are arguments the toolbox accepts that the model is not
// offered (kept for the debug command and future use).
var toolboxOnly = map[string][]string{toolbox.ToolGrep: {"exclude"}, toolbox.ToolProcessStop: {"all"}}

// The agent's tool schemas (what the model is told) and the toolbox's
// argument types (what the sandbox decodes) are written separately: the
// import rules keep the agent away from the sandbox. An argument offered to
// the model that the toolbox does not decode would be dropped without a
// word, so the two must name the same tools and the same arguments.
func TestAgentToolsMatchTheToolbox(t *testing.T) {
	defs := agent.WorkspaceToolDefs()
	var names []string
	for _, d := range defs {
		names = append(names, d.Function.Name)
	}
	var want []string
	for n := range toolboxArgs {
		want = append(want, n)
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("agent workspace tools %v, toolbox tools %v", names, want)
	}
	for _, d := range defs {
		got := schemaProperties(t, d.Function.Parameters)
		wantProps := jsonFields(reflect.TypeOf(toolboxArgs[d.Function.Name]))
		for _, extra := range toolboxOnly[d.Function.Name] {
			wantProps = slices.DeleteFunc(wantProps, func(s string) bool { return s == extra })
		}
		slices.Sort(got)
		slices.Sort(wantProps)
		if !slices.Equal(got, wantProps) {
			t.Errorf("%s: the model is offered %v, the toolbox decodes %v", d.Function.Name, got, wantProps)
		}
	}
}

// Control: the comparison sees a difference when there is one.
func TestToolContractControl(t *testing.T) {
	got := schemaProperties(t, json.RawMessage(`{"type":"object","properties":{"path":{},"offset":{},"lines":{}}}`))
	slices.Sort(got)
	want := jsonFields(reflect.TypeOf(toolbox.ReadFileArgs{}))
	slices.Sort(want)
	if slices.Equal(got, want) {
		t.Fatalf("a schema with 'lines' instead of 'limit' compared equal to ReadFileArgs")
	}
}

func schemaProperties(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("schema %s: %v", raw, err)
	}
	var out []string
	for k := range s.Properties {
		out = append(out, k)
	}
	return out
}

func jsonFields(rt reflect.Type) []string {
	var out []string
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}
