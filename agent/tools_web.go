package agent

// ToolWebFetch fetches a URL inside the sandbox, through the task's egress
// proxy (so the task's allowlist decides and every connection is logged).
// It is offered only when the task has network access at all.
const ToolWebFetch = "web_fetch"

var webToolSpecs = []toolSpec{
	{
		name: ToolWebFetch, kind: kindWorkspaceRead,
		oneLine: "fetch a web page (as text) from an allowed host",
		description: "Fetch a URL and return its content as text (HTML is converted to plain text; long pages are cut). " +
			"Only hosts the task's network policy allows can be reached; others are denied.",
		schema: `{"type":"object","properties":{
			"url":{"type":"string","minLength":1,"description":"An absolute http or https URL."}},
			"required":["url"]}`,
	},
}
