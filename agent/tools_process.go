package agent

// Background process tools. The toolbox runs them inside the sandbox (its
// serve session owns the processes); the agent only describes them.
const (
	ToolProcessStart  = "process_start"
	ToolProcessOutput = "process_output"
	ToolProcessStop   = "process_stop"
)

var processToolSpecs = []toolSpec{
	{
		name: ToolProcessStart, kind: kindWorkspaceWrite,
		oneLine: "start a long-running command (dev server, watcher) in the background",
		description: "Start a command that keeps running in the background, such as a dev server or a file watcher, " +
			"and return its id at once. Run the program in the foreground inside the command (e.g. \"python3 -m http.server 8000\", " +
			"\"httpd -f -p 8080\"): a program that detaches itself is killed. Read its output with process_output and end it with " +
			"process_stop; every background process is killed when the task ends. Use bash for commands that finish.",
		schema: `{"type":"object","properties":{
			"command":{"type":"string","minLength":1,"description":"The command line, run with sh -c in the workspace."}},
			"required":["command"]}`,
	},
	{
		name: ToolProcessOutput, kind: kindWorkspaceRead,
		oneLine: "read a background process's output and state",
		description: "Return a background process's state (running or how it ended) and its output. " +
			"Pass since (the \"next since\" number of the previous answer) to get only new output.",
		schema: `{"type":"object","properties":{
			"id":{"type":"string","minLength":1,"description":"The id process_start returned, e.g. \"p1\"."},
			"since":{"type":"integer","minimum":0,"description":"Byte offset to read from. Default 0: all output still kept."}},
			"required":["id"]}`,
	},
	{
		name: ToolProcessStop, kind: kindWorkspaceWrite,
		oneLine:     "stop a background process",
		description: "Stop a background process and everything it started, and return the end of its output.",
		schema: `{"type":"object","properties":{
			"id":{"type":"string","minLength":1,"description":"The id process_start returned, e.g. \"p1\"."}},
			"required":["id"]}`,
	},
}
