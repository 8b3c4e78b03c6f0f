package orchestrator

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/sandbox"
)

// MCPServerConfig declares an MCP server: a command run inside the task's
// sandbox (in the sandbox image, with the workspace as working directory),
// speaking MCP over its standard streams.
type MCPServerConfig struct {
	Command string            `mapstructure:"command" json:"command"`
	Args    []string          `mapstructure:"args" json:"args"`
	Env     map[string]string `mapstructure:"env" json:"env"`
	// FromRepository marks a server the repository's own config declared
	// (untrusted like the repository; it runs in the sandbox all the same).
	FromRepository bool `mapstructure:"-" json:"from_repository,omitempty"`
}

// repositoryMCPWarnings name the MCP servers a repository declared itself,
// for the review.
func (o *Orchestrator) repositoryMCPWarnings() []string {
	var out []string
	for name, s := range o.opts.MCPServers {
		if s.FromRepository {
			out = append(out, fmt.Sprintf("the repository's .agent/config.yaml declared the MCP server %q (command %q); it ran inside the sandbox", name, strings.Join(append([]string{s.Command}, s.Args...), " ")))
		}
	}
	sort.Strings(out)
	return out
}

// mcpServers are the configured servers, each started in sb on demand
// through the exec API; the agent gets only their streams.
func (o *Orchestrator) mcpServers(sb *sandbox.Sandbox) []agent.MCPServer {
	names := make([]string, 0, len(o.opts.MCPServers))
	for n := range o.opts.MCPServers {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []agent.MCPServer
	for _, n := range names {
		cfg := o.opts.MCPServers[n]
		if cfg.Command == "" {
			continue
		}
		env := make([]string, 0, len(cfg.Env))
		for k, v := range cfg.Env {
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		cmd := append([]string{cfg.Command}, cfg.Args...)
		out = append(out, agent.MCPServer{Name: n, Open: func(ctx context.Context) (io.ReadCloser, io.WriteCloser, error) {
			p, err := sb.StartStdio(ctx, cmd, env)
			if err != nil {
				return nil, nil, err
			}
			return p.Stdout, p.Stdin, nil
		}})
	}
	return out
}

// mcpServersFor are the servers a sub-agent of type typ may use: those
// whose tools its allow-list can match at all (its own sandbox starts them).
func (o *Orchestrator) mcpServersFor(sb *sandbox.Sandbox, typ agent.AgentType) []agent.MCPServer {
	var out []agent.MCPServer
	for _, s := range o.mcpServers(sb) {
		if typ.AllowsServer(s.Name) {
			out = append(out, s)
		}
	}
	return out
}
