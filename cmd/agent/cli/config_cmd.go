package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
)

// keyDocs says what each configuration key is for; `agent config` and
// README's table show it (a test keeps the three in step).
var keyDocs = map[string]string{
	"state_dir":                 "tasks, sessions, logs, worktrees",
	"sandbox.image":             "image of the task containers (any image works: the toolbox is mounted in)",
	"sandbox.memory":            "memory limit per sandbox",
	"sandbox.cpus":              "CPU limit per sandbox, in cores",
	"sandbox.pids":              "process limit per sandbox",
	"sandbox.tmpfs":             "size of /tmp and the home tmpfs",
	"sandbox.disk":              "bound of a task's workspace on disk (0: none)",
	"sandbox.spare_checkouts":   "ready-made checkouts kept per commit so the next task on it starts at once (0: none)",
	"sandbox.pool":              "started sandboxes kept waiting per image and settings in use, claimed by the next task or sub-agent (0: none)",
	"sandbox.min_free":          "free space the state directory must keep while a task runs (0: none)",
	"sandbox.gpu_reserve":       "free GPU memory the model server keeps on a GPU task --gpus shares (0: no check)",
	"sandbox.toolbox":           "path of agent-toolbox (default: next to agent)",
	"sandbox.isolation":         "runc (namespaces + seccomp) or runsc (gVisor's user-space kernel)",
	"sandbox.runtime":           "engine's name of the runtime giving the isolation (default: the engine's for runc, runsc for runsc)",
	"sandbox.seccomp":           "default (the engine's profile) or strict (the project's allowlist)",
	"sandbox.shell":             "shell of the bash tool (default: bash if present, else sh)",
	"sandbox.egress":            "hosts the sandbox may reach through the logged proxy (default: no network)",
	"llm.url":                   "OpenAI-compatible endpoint (default: the managed llama-server)",
	"llm.api_key":               "API key sent to llm.url",
	"llm.model":                 "the .gguf file `agent llm up` serves",
	"llm.served_model":          "model name a task asks the server for (default: the server's)",
	"llm.image":                 "image of the managed llama-server",
	"llm.port":                  "port of the managed llama-server on 127.0.0.1",
	"llm.ctx":                   "total context of the managed server, shared by its slots",
	"llm.parallel":              "parallel slots of the managed server",
	"llm.gpus":                  "all, none, amd or NVIDIA ids (0,1)",
	"llm.start_timeout":         "how long `llm up` waits for the model to load",
	"llm.stall_timeout":         "end a reply that makes no progress for this long",
	"llm.reply_timeout":         "end any single reply that takes longer than this",
	"agent.max_iterations":      "model turns per user message",
	"agent.tool_mode":           "auto, native or text (for models without tool calling)",
	"agent.test":                "test command run in the sandbox after the agent's last turn: the review's verdict (default: test: of .agent/environment.yaml)",
	"agent.test_timeout":        "how long that test command may run",
	"agent.sub_agents":          "offer spawn_agents (a worktree and sandbox each)",
	"agent.hooks.session_start": "shell commands run inside the sandbox when a session starts",
	"agent.hooks.pre_tool":      "shell commands run inside the sandbox before each tool; non-zero blocks it",
	"agent.hooks.post_tool":     "shell commands run inside the sandbox after each tool",
	"images.mirror":             "Debian mirror for image builds (default: the host's apt mirror)",
	"env.egress":                "hosts environment setup steps may reach (e.g. an internal module proxy)",
	"env.default_file":          "your own environment file for repositories without one",
	"env.repos":                 "replace a repository's environment: [{repo: DIR, file: PATH}]",
	"env.include":               "untracked files (globs) copied from your checkout into each task's worktree",
	"env.bases":                 "images a repository's .agent/environment.yaml may name as base:, besides sandbox.image and images agent built",
	"env.seed_host_caches":      "mount your ~/go/pkg/mod read-only as a last-resort module source",
	"env.off":                   "ignore environment definitions",
}

// secretKeys are shown as set or not, never by value.
var secretKeys = []string{"llm.api_key"}

// configEntry is one row of `agent config`.
type configEntry struct {
	Key    string `json:"key"`
	Value  any    `json:"value"`
	Origin string `json:"origin"` // flag, env, project, user or default
	// Source is the file, variable or flag behind the origin ("" for
	// default).
	Source      string `json:"source"`
	Env         string `json:"env"`
	Project     bool   `json:"project_may_set"`
	Description string `json:"description"`
}

// ConfigOptions are the inputs of `agent config`.
type ConfigOptions struct {
	IO      *IOStreams
	Factory *Factory
	Keys    []string
	JSON    bool
}

// NewCmdConfig builds `agent config`.
func NewCmdConfig(f *Factory, runF func(context.Context, *ConfigOptions) error) *cobra.Command {
	opts := &ConfigOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "config [KEY...]",
		Short: "Show the effective configuration and where each value comes from",
		Long: `Show every configuration key (or the KEYs given), its effective value and
its origin: flag, env (AGENT_*), project (the repository's .agent/config.yaml),
user ($XDG_CONFIG_HOME/agent/config.yaml) or default. Precedence is in that
order. A repository's config may set only some keys (project_may_set).`,
		Example: `  agent config
  agent config sandbox.memory llm.url
  agent config --json | jq '.keys[] | select(.origin != "default")'`,
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return knownKeys(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, k := range args {
				if err := checkKey(k); err != nil {
					return UsageErrorf("%v", err)
				}
			}
			opts.Keys = args
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return configRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"keys": [{"key", "value", "origin", "source", "env", "project_may_set", "description"}], "files": {...}} as JSON`)
	return cmd
}

func configRun(_ context.Context, opts *ConfigOptions) error {
	if _, err := opts.Factory.Config(); err != nil {
		return err
	}
	l := opts.Factory.conf
	keys := opts.Keys
	if len(keys) == 0 {
		keys = knownKeys()
	}
	entries := make([]configEntry, 0, len(keys))
	for _, k := range keys {
		origin, source := l.origin(k)
		v := l.v.Get(k)
		if slices.Contains(secretKeys, k) && fmt.Sprint(v) != "" {
			v = "(set)"
		}
		entries = append(entries, configEntry{Key: k, Value: v, Origin: origin, Source: source, Env: envVar(k),
			Project: slices.Contains(projectKeys, k), Description: keyDocs[k]})
	}
	if opts.JSON {
		return writeJSON(opts.IO.Out, map[string]any{"keys": entries,
			"files": map[string]string{"user": l.userFile, "project": l.projectFile}})
	}
	c := colors{on: opts.IO.Color(opts.IO.OutTTY)}
	tb := &table{w: opts.IO.Out, width: opts.IO.Width()}
	tb.row("KEY", "ORIGIN", "VALUE")
	for _, e := range entries {
		val := formatValue(e.Value)
		origin := e.Origin
		if e.Origin == originDefault {
			origin = c.Dim(origin)
		} else {
			origin = c.Cyan(origin)
		}
		tb.row(e.Key, origin, termtext.Line(val))
	}
	if err := tb.flush(); err != nil {
		return err
	}
	// The files, so a user knows which one to edit.
	for _, fl := range []struct{ what, path string }{{"user config", l.userFile}, {"project config", l.projectFile}} {
		p := termtext.Path(fl.path)
		if fl.path == "" {
			p = "(none)"
		}
		fmt.Fprintf(opts.IO.ErrOut, "%s: %s\n", fl.what, p)
	}
	return nil
}

func formatValue(v any) string {
	switch x := v.(type) {
	case []string:
		return "[" + strings.Join(x, ", ") + "]"
	case []any:
		parts := make([]string, len(x))
		for i, p := range x {
			parts[i] = fmt.Sprint(p)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case string:
		if x == "" {
			return `""`
		}
		return x
	}
	return fmt.Sprint(v)
}
