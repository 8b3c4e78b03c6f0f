package agent

import (
	"encoding/json"
	"strings"
)

// toolAliases maps names that models trained on other agents' tools use
// to ours. Accepting them costs nothing and saves a failed call and a retry
// per mistake; a model that sends "Read" with "file_path" clearly means
// read_file with path.
var toolAliases = map[string]string{
	"read": ToolReadFile, "view": ToolReadFile, "cat": ToolReadFile, "open_file": ToolReadFile, "view_file": ToolReadFile,
	"write": ToolWriteFile, "create_file": ToolWriteFile,
	"edit": ToolEditFile, "str_replace": ToolEditFile, "replace_in_file": ToolEditFile,
	"multiedit": ToolMultiEdit,
	"ls":        ToolListDir, "list_directory": ToolListDir, "list_files": ToolListDir,
	"find_files": ToolGlob,
	"search":     ToolGrep, "search_files": ToolGrep,
	"shell": ToolBash, "run": ToolBash, "execute": ToolBash, "execute_command": ToolBash,
	"run_command": ToolBash, "run_shell_command": ToolBash, "terminal": ToolBash, "execute_bash": ToolBash,
	"todowrite": ToolTodoWrite, "todo": ToolTodoWrite,
}

// argAliases maps argument names other tool sets use to ours, per tool.
var argAliases = map[string]map[string]string{
	ToolReadFile:  {"file_path": "path", "filepath": "path", "file": "path", "filename": "path", "start_line": "offset", "line_count": "limit"},
	ToolWriteFile: {"file_path": "path", "filepath": "path", "file": "path", "filename": "path", "text": "content", "contents": "content"},
	ToolEditFile:  {"file_path": "path", "filepath": "path", "file": "path", "old_str": "old_string", "new_str": "new_string", "old": "old_string", "new": "new_string"},
	ToolMultiEdit: {"file_path": "path", "filepath": "path", "file": "path"},
	ToolListDir:   {"dir": "path", "directory": "path", "dir_path": "path"},
	ToolGlob:      {"glob": "pattern", "dir": "path", "directory": "path"},
	ToolGrep:      {"regex": "pattern", "query": "pattern", "dir": "path", "directory": "path", "glob": "include", "file_pattern": "include"},
	ToolBash:      {"cmd": "command", "script": "command"},
}

// canonicalTool returns our name for a tool name a model sent: exact, then
// case-insensitive, then an alias.
func canonicalTool(name string) string {
	if _, ok := mustCatalog().specs[name]; ok {
		return name
	}
	lower := strings.ToLower(strings.TrimSpace(name))
	if _, ok := mustCatalog().specs[lower]; ok {
		return lower
	}
	if c, ok := toolAliases[lower]; ok {
		return c
	}
	return name
}

// canonicalArgs renames aliased argument keys when our key is absent.
// Arguments that are not a JSON object are returned unchanged (validation
// reports them).
func canonicalArgs(tool string, args []byte) []byte {
	aliases := argAliases[tool]
	if len(aliases) == 0 {
		return args
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return args
	}
	changed := false
	for from, to := range aliases {
		v, ok := m[from]
		if !ok {
			continue
		}
		if _, taken := m[to]; taken {
			continue
		}
		m[to] = v
		delete(m, from)
		changed = true
	}
	if !changed {
		return args
	}
	out, err := json.Marshal(m)
	if err != nil {
		return args
	}
	return out
}

// mixedCaseNames are spellings models write verbatim (the text-mode parser
// matches names exactly; canonicalTool then folds case).
var mixedCaseNames = []string{"Read", "Write", "Edit", "MultiEdit", "LS", "Glob", "Grep", "Bash", "TodoWrite"}

// aliasNames are the alias tool names, for the text-mode parser.
func aliasNames() []string {
	names := make([]string, 0, len(toolAliases)+len(mixedCaseNames))
	for n := range toolAliases {
		names = append(names, n)
	}
	return append(names, mixedCaseNames...)
}
