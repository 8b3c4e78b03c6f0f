package agent

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/localagent/agent/agent/llm"
)

//go:embed prompt.tmpl
var promptText string

var promptTmpl = template.Must(template.New("system").Parse(promptText))

// instructionFiles are read from the workspace root, first found wins.
var instructionFiles = []string{"AGENTS.md", "AGENT.md", "CLAUDE.md", ".agent/instructions.md"}

// instructionsMax caps project instructions: a huge file must not crowd out
// the conversation in a small context window.
const instructionsMax = 16 << 10

type promptTool struct {
	Name, OneLine, Description, Schema string
}

type promptData struct {
	Env              Environment
	Tools            []promptTool
	TextMode         bool
	Date             string
	HookOutput       string
	Instructions     string
	InstructionsFile string
	Memory           string
	PlanMode         bool
}

// numberedLine matches read_file's line-number prefix ("   12\t" or "12: "
// or "12|"), which is stripped from instruction files.
var numberedLine = regexp.MustCompile(`^\s*\d+(\t|: |\|)`)

// readInstructions reads the first project instruction file found at the
// workspace root. It goes THROUGH the workspace (inside the sandbox): the
// host never opens workspace files for the agent, so a symlink in the
// repository cannot make the agent read a host file.
func readInstructions(ctx context.Context, ws Workspace) (name, text string, err error) {
	for _, f := range instructionFiles {
		args, _ := json.Marshal(map[string]any{"path": f, "limit": 2000})
		res, err := ws.Call(ctx, ToolReadFile, args)
		if err != nil {
			return "", "", fmt.Errorf("reading %s: %w", f, err)
		}
		if res.IsError {
			continue
		}
		return f, stripLineNumbers(shorten(res.Output, instructionsMax, "instructions cut")), nil
	}
	return "", "", nil
}

// stripLineNumbers removes line-number prefixes when every non-empty line
// carries one.
func stripLineNumbers(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for _, l := range lines {
		if l != "" && !numberedLine.MatchString(l) && !strings.HasPrefix(l, "[") {
			return strings.TrimSpace(s)
		}
	}
	for i, l := range lines {
		if loc := numberedLine.FindStringIndex(l); loc != nil {
			lines[i] = l[loc[1]:]
		}
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// leanPct: when the full tool definitions and the base prompt would take
// more than this share of the window, the lean definitions are used (a
// 2048-token llama-server slot could otherwise hold little else).
const leanPct = 30

// toolDefs are the tool definitions this agent sends.
func (a *Agent) toolDefs() map[string]llm.Tool {
	defs := mustCatalog().wire
	if a.lean {
		defs = mustCatalog().lean
	}
	if len(a.runner.mcp) == 0 {
		return defs
	}
	all := make(map[string]llm.Tool, len(defs)+len(a.runner.mcp))
	for k, v := range defs {
		all[k] = v
	}
	for k, t := range a.runner.mcp {
		all[k] = t.def
	}
	return all
}

// systemPrompt renders the system prompt for the current mode.
func (a *Agent) systemPrompt() string {
	cat := mustCatalog()
	d := promptData{
		Env:              a.opts.Env,
		TextMode:         a.mode == ToolModeText,
		Date:             time.Now().UTC().Format("2006-01-02"),
		HookOutput:       strings.TrimSpace(a.hookOut),
		Instructions:     a.projInstr,
		InstructionsFile: a.projFile,
		Memory:           a.memNotes,
		PlanMode:         a.opts.PlanMode,
	}
	defs := a.toolDefs()
	for _, n := range a.runner.names() {
		d.Tools = append(d.Tools, promptTool{
			Name: n, OneLine: oneLineOf(cat, n, defs[n]), Description: defs[n].Function.Description,
			Schema: string(defs[n].Function.Parameters),
		})
	}
	var b bytes.Buffer
	if err := promptTmpl.Execute(&b, d); err != nil {
		// The template is a constant of this package; data cannot make it fail.
		return "You are a coding agent. Use the tools to complete the task."
	}
	return b.String()
}

// oneLineOf is a tool's line in the system prompt's list: our own, or the
// first line of an MCP tool's description.
func oneLineOf(cat *toolCatalog, name string, def llm.Tool) string {
	if s, ok := cat.specs[name]; ok {
		return s.oneLine
	}
	line, _, _ := strings.Cut(def.Function.Description, "\n")
	if r := []rune(line); len(r) > 160 {
		line = string(r[:160]) + "…"
	}
	return line
}
