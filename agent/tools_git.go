package agent

// History tools. The toolbox answers them inside the sandbox from the
// task's read-only history; they never change the workspace.
const (
	ToolGitDiff  = "git_diff"
	ToolGitLog   = "git_log"
	ToolGitShow  = "git_show"
	ToolGitBlame = "git_blame"
)

var gitToolSpecs = []toolSpec{
	{
		name: ToolGitDiff, kind: kindWorkspaceRead,
		oneLine: "show what you changed (diff of the workspace)",
		description: "Show the changes in the workspace as a diff: against \"head\" (default) what you changed in this run, " +
			"against \"base\" everything the task changed since it started. New and deleted files are included. " +
			"Use it to review your work before you finish.",
		schema: `{"type":"object","properties":{
			"against":{"type":"string","enum":["head","base"],"description":"\"head\" (default) or \"base\"."},
			"path":{"type":"string","description":"Limit the diff to this file or directory."}}}`,
	},
	{
		name: ToolGitLog, kind: kindWorkspaceRead,
		oneLine:     "list the commits of the branch you work on",
		description: "List the most recent commits of the branch you work on (newest first), optionally only those touching a path.",
		schema: `{"type":"object","properties":{
			"n":{"type":"integer","minimum":1,"maximum":500,"description":"Number of commits. Default 20."},
			"path":{"type":"string","description":"Only commits that changed this file or directory."}}}`,
	},
	{
		name: ToolGitShow, kind: kindWorkspaceRead,
		oneLine: "show a commit, or a file as it was at a commit",
		description: "Show a commit (message and diff), or with path the content of that file at that commit. " +
			"rev is a commit hash from git_log, \"head\", \"base\", or an expression like \"head~2\".",
		schema: `{"type":"object","properties":{
			"rev":{"type":"string","minLength":1,"description":"Commit: a hash, \"head\", \"base\", \"head~1\"..."},
			"path":{"type":"string","description":"A file: show its content at rev instead of the commit."}},
			"required":["rev"]}`,
	},
	{
		name: ToolGitBlame, kind: kindWorkspaceRead,
		oneLine:     "show which commit last changed each line of a file",
		description: "Show, for each line of a file, the commit that last changed it (lines you changed show as not committed yet).",
		schema: `{"type":"object","properties":{
			"path":{"type":"string","minLength":1,"description":"File path relative to the workspace root."}},
			"required":["path"]}`,
	},
}
