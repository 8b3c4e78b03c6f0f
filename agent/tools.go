package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/localagent/agent/agent/llm"
)

// Tool names. The workspace tools are the names local models are trained
// on (see DESIGN.md); the sandbox's toolbox implements their semantics.
const (
	ToolReadFile     = "read_file"
	ToolWriteFile    = "write_file"
	ToolEditFile     = "edit_file"
	ToolMultiEdit    = "multi_edit"
	ToolListDir      = "list_dir"
	ToolGlob         = "glob"
	ToolGrep         = "grep"
	ToolBash         = "bash"
	ToolTodoWrite    = "todo_write"
	ToolThink        = "think"
	ToolSpawnAgents  = "spawn_agents"
	ToolReadArtifact = "read_artifact"
)

// toolKind says where a tool runs and whether it may run concurrently with
// its neighbours in one reply.
type toolKind int

const (
	kindWorkspaceRead  toolKind = iota + 1 // forwarded to Workspace.Call; no side effects
	kindWorkspaceWrite                     // forwarded to Workspace.Call; runs in order
	kindLocalRead                          // handled in the agent; no side effects
	kindLocalWrite                         // handled in the agent; runs in order
)

// toolSpec is one tool offered to the model.
type toolSpec struct {
	name        string
	kind        toolKind
	description string
	schema      string // JSON schema of the arguments
	oneLine     string // for the tool list in the system prompt
}

func (s *toolSpec) readOnly() bool {
	return s.kind == kindWorkspaceRead || s.kind == kindLocalRead
}

// Descriptions are written for small local models: say what the tool does,
// what the arguments mean, and the one mistake models make most with it.
var toolSpecs = append([]toolSpec{
	{
		name: ToolReadFile, kind: kindWorkspaceRead,
		oneLine: "read a text file (with line numbers)",
		description: "Read a text file from the workspace. Returns the file's lines, numbered from 1. " +
			"For long files pass offset (first line to read, 1-based) and limit (number of lines) to read a part. " +
			"Always read a file before editing it.",
		schema: `{"type":"object","properties":{
			"path":{"type":"string","minLength":1,"description":"File path relative to the workspace root (or absolute inside /workspace)."},
			"offset":{"type":"integer","minimum":1,"description":"First line to read, 1-based. Default 1."},
			"limit":{"type":"integer","minimum":1,"description":"Maximum number of lines to read."}},
			"required":["path"]}`,
	},
	{
		name: ToolWriteFile, kind: kindWorkspaceWrite,
		oneLine: "create or overwrite a file with the given content",
		description: "Create a file, or replace a file's whole content. Parent directories are created. " +
			"Prefer edit_file for changing part of an existing file.",
		schema: `{"type":"object","properties":{
			"path":{"type":"string","minLength":1,"description":"File path relative to the workspace root."},
			"content":{"type":"string","description":"The complete new content of the file."}},
			"required":["path","content"]}`,
	},
	{
		name: ToolEditFile, kind: kindWorkspaceWrite,
		oneLine: "replace an exact string in a file",
		description: "Replace exact text in a file. old_string must match the file exactly, including whitespace and " +
			"indentation, and must occur exactly once unless replace_all is true; include a few surrounding lines to make it unique. " +
			"Read the file first so you copy the text exactly.",
		schema: `{"type":"object","properties":{
			"path":{"type":"string","minLength":1,"description":"File path relative to the workspace root."},
			"old_string":{"type":"string","minLength":1,"description":"The exact text to replace."},
			"new_string":{"type":"string","description":"The replacement text."},
			"replace_all":{"type":"boolean","description":"Replace every occurrence instead of exactly one. Default false."}},
			"required":["path","old_string","new_string"]}`,
	},
	{
		name: ToolMultiEdit, kind: kindWorkspaceWrite,
		oneLine: "apply several exact-string edits to one file at once",
		description: "Apply several edits to one file in order, all or nothing. Each edit works like edit_file " +
			"(old_string must match exactly and be unique unless replace_all). Later edits see the result of earlier ones.",
		schema: `{"type":"object","properties":{
			"path":{"type":"string","minLength":1,"description":"File path relative to the workspace root."},
			"edits":{"type":"array","minItems":1,"items":{"type":"object","properties":{
				"old_string":{"type":"string","minLength":1},
				"new_string":{"type":"string"},
				"replace_all":{"type":"boolean"}},
				"required":["old_string","new_string"]}}},
			"required":["path","edits"]}`,
	},
	{
		name: ToolListDir, kind: kindWorkspaceRead,
		oneLine:     "list a directory",
		description: "List the entries of a directory (directories end with /). Without path, lists the workspace root.",
		schema: `{"type":"object","properties":{
			"path":{"type":"string","description":"Directory relative to the workspace root. Default: the root."}}}`,
	},
	{
		name: ToolGlob, kind: kindWorkspaceRead,
		oneLine: "find files by name pattern",
		description: "Find files whose path matches a glob pattern, e.g. \"**/*.go\" or \"src/*.ts\". " +
			"Use this to find files by name; use grep to search inside files.",
		schema: `{"type":"object","properties":{
			"pattern":{"type":"string","minLength":1,"description":"Glob pattern; ** matches any number of directories."},
			"path":{"type":"string","description":"Directory to search in. Default: the workspace root."}},
			"required":["pattern"]}`,
	},
	{
		name: ToolGrep, kind: kindWorkspaceRead,
		oneLine: "search file contents with a regular expression",
		description: "Search file contents for a regular expression. Returns matching lines as path:line:text. " +
			"Use include to limit the files searched, e.g. \"*.py\".",
		schema: `{"type":"object","properties":{
			"pattern":{"type":"string","minLength":1,"description":"Regular expression (RE2 syntax)."},
			"path":{"type":"string","description":"File or directory to search. Default: the workspace root."},
			"include":{"type":"string","description":"Glob that file names must match, e.g. \"*.go\"."}},
			"required":["pattern"]}`,
	},
	{
		name: ToolBash, kind: kindWorkspaceWrite,
		oneLine: "run a shell command in the workspace",
		description: "Run a shell command in the workspace directory and return its output and exit code. " +
			"Use it to build, run tests, and use git. There is no network access. Commands are not interactive: " +
			"never start editors, pagers or servers that do not exit. Output is capped; pipe long output through head or tail.",
		schema: `{"type":"object","properties":{
			"command":{"type":"string","minLength":1,"description":"The command line, run with sh -c."},
			"timeout":{"type":"number","exclusiveMinimum":0,"description":"Timeout in seconds. Default 120; the sandbox caps it."}},
			"required":["command"]}`,
	},
	{
		name: ToolTodoWrite, kind: kindLocalWrite,
		oneLine: "keep a todo list for multi-step work",
		description: "Replace your todo list. Use it for work with several steps: list the steps, then mark each " +
			"in_progress while you work on it and completed when done. Send the whole list every time.",
		schema: `{"type":"object","properties":{
			"todos":{"type":"array","items":{"type":"object","properties":{
				"content":{"type":"string","minLength":1},
				"status":{"type":"string","enum":["pending","in_progress","completed"]}},
				"required":["content","status"]}}},
			"required":["todos"]}`,
	},
	{
		name: ToolThink, kind: kindLocalRead,
		oneLine: "think through a problem before acting (no side effects)",
		description: "Write down your reasoning: a plan, a hypothesis about a bug, or what a tool result means. " +
			"It changes nothing and returns nothing new.",
		schema: `{"type":"object","properties":{
			"thought":{"type":"string","minLength":1}},
			"required":["thought"]}`,
	},
	{
		name: ToolReadArtifact, kind: kindLocalRead,
		oneLine: "page through a long tool output that was stored as an artifact",
		description: "Read part of a long tool output that was stored as an artifact (the tool result names its id). " +
			"offset is the first line (1-based), limit the number of lines.",
		schema: `{"type":"object","properties":{
			"id":{"type":"string","minLength":1,"description":"Artifact id, e.g. \"a3\"."},
			"offset":{"type":"integer","minimum":1,"description":"First line, 1-based. Default 1."},
			"limit":{"type":"integer","minimum":1,"maximum":2000,"description":"Number of lines. Default 200."}},
			"required":["id"]}`,
	},
	{
		name: ToolSpawnAgents, kind: kindLocalWrite,
		oneLine: "run independent sub-tasks in parallel sub-agents",
		description: "Start sub-agents that work in parallel, each in its own copy of the workspace, and wait for " +
			"their summaries. Their changes are merged back into your workspace when they finish. Use it only for " +
			"independent pieces of work that touch different files; give each task a short name and a complete, " +
			"self-contained prompt (a sub-agent does not see this conversation).",
		schema: `{"type":"object","properties":{
			"tasks":{"type":"array","minItems":1,"maxItems":8,"items":{"type":"object","properties":{
				"name":{"type":"string","minLength":1,"pattern":"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$"},
				"prompt":{"type":"string","minLength":1},
				"type":{"type":"string","description":"explore (read-only search, 15 turns), plan (read-only, writes a plan, 10), code (reads, writes, runs commands, 30; the default), verify (runs tests; its changes are discarded, 20), or a configured type."}},
				"required":["name","prompt"]}}},
			"required":["tasks"]}`,
	},
}, append(append(append(append(processToolSpecs, gitToolSpecs...), rememberSpec), userToolSpecs...), webToolSpecs...)...)

// toolCatalog is the compiled form of toolSpecs, built once per process:
// compiling schemas is far slower than validating against them.
type toolCatalog struct {
	specs   map[string]*toolSpec
	schemas map[string]*jsonschema.Schema
	wire    map[string]llm.Tool
	// lean are the same tools with one-line descriptions and no property
	// descriptions, for context windows too small for the full ones.
	lean map[string]llm.Tool
}

var catalog = sync.OnceValues(func() (*toolCatalog, error) {
	c := &toolCatalog{
		specs:   map[string]*toolSpec{},
		schemas: map[string]*jsonschema.Schema{},
		wire:    map[string]llm.Tool{},
		lean:    map[string]llm.Tool{},
	}
	comp := jsonschema.NewCompiler()
	for i := range toolSpecs {
		s := &toolSpecs[i]
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(s.schema))
		if err != nil {
			return nil, fmt.Errorf("tool %s: schema: %w", s.name, err)
		}
		url := "mem:///tools/" + s.name + ".json"
		if err := comp.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("tool %s: schema: %w", s.name, err)
		}
		sch, err := comp.Compile(url)
		if err != nil {
			return nil, fmt.Errorf("tool %s: schema: %w", s.name, err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(s.schema)); err != nil {
			return nil, fmt.Errorf("tool %s: schema: %w", s.name, err)
		}
		c.specs[s.name] = s
		c.schemas[s.name] = sch
		c.wire[s.name] = llm.Tool{Type: "function", Function: llm.FunctionDef{
			Name: s.name, Description: s.description, Parameters: json.RawMessage(compact.Bytes()),
		}}
		lean, err := json.Marshal(stripDescriptions(doc))
		if err != nil {
			return nil, fmt.Errorf("tool %s: schema: %w", s.name, err)
		}
		c.lean[s.name] = llm.Tool{Type: "function", Function: llm.FunctionDef{
			Name: s.name, Description: s.oneLine, Parameters: lean,
		}}
	}
	return c, nil
})

// stripDescriptions returns a copy of a decoded schema without
// "description" keywords.
func stripDescriptions(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			if k == "description" {
				if _, isStr := val.(string); isStr {
					continue
				}
			}
			out[k] = stripDescriptions(val)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = stripDescriptions(val)
		}
		return out
	}
	return v
}

// mustCatalog returns the catalog; the schemas are constants of this
// package, so a failure is a programming error caught by every test.
func mustCatalog() *toolCatalog {
	c, err := catalog()
	if err != nil {
		panic(err)
	}
	return c
}

// argsError is a call's arguments failing validation; the text is written
// for the model.
type argsError struct {
	msg string
	// missingOnly: every problem is a required property left out.
	missingOnly bool
}

func (e *argsError) Error() string { return e.msg }

// validate checks raw arguments against a tool's schema and returns the
// decoded value.
func (c *toolCatalog) validate(name string, args []byte) (any, error) {
	sch, ok := c.schemas[name]
	if !ok {
		return nil, fmt.Errorf("unknown tool %q", name)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return nil, &argsError{msg: fmt.Sprintf("arguments are not valid JSON (%v); send one JSON object", err)}
	}
	if err := sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, &argsError{msg: "invalid arguments: " + err.Error()}
		}
		return nil, &argsError{msg: "invalid arguments: " + describeValidation(ve), missingOnly: onlyMissing(ve)}
	}
	return v, nil
}

// describeValidation turns a jsonschema error into short lines a model can
// act on, without the schema URL the library leads with.
func describeValidation(ve *jsonschema.ValidationError) string {
	var msgs []string
	for _, e := range ve.BasicOutput().Errors {
		if e.Error == nil {
			continue
		}
		msg := e.Error.String()
		if msg == "" || strings.HasPrefix(msg, "validation failed") {
			continue
		}
		if e.InstanceLocation == "" {
			msgs = append(msgs, msg)
		} else {
			msgs = append(msgs, "at "+e.InstanceLocation+": "+msg)
		}
	}
	if len(msgs) == 0 {
		lines := strings.Split(ve.Error(), "\n")
		return strings.TrimSpace(strings.Join(lines[1:], "; "))
	}
	sort.Strings(msgs)
	return strings.Join(msgs, "; ")
}

// onlyMissing reports whether every leaf of the error is a missing
// required property.
func onlyMissing(ve *jsonschema.ValidationError) bool {
	if len(ve.Causes) == 0 {
		_, ok := ve.ErrorKind.(*kind.Required)
		return ok
	}
	for _, c := range ve.Causes {
		if !onlyMissing(c) {
			return false
		}
	}
	return true
}

// missingRequired reports arguments that fail only because required
// properties were left out: the sign of a model that does not really
// support native tool calls (it sends a bare name).
func missingRequired(err error) bool {
	var ae *argsError
	return errors.As(err, &ae) && ae.missingOnly
}

// WorkspaceToolDefs are the definitions (with JSON-schema parameters)
// offered to the model for the tools the sandbox's toolbox implements.
func WorkspaceToolDefs() []llm.Tool {
	c := mustCatalog()
	var defs []llm.Tool
	for _, name := range WorkspaceTools() {
		defs = append(defs, c.wire[name])
	}
	return defs
}

// WorkspaceTools are the tools the sandbox's toolbox implements.
func WorkspaceTools() []string {
	var names []string
	for _, s := range toolSpecs {
		if s.kind == kindWorkspaceRead || s.kind == kindWorkspaceWrite {
			names = append(names, s.name)
		}
	}
	return names
}
