package orchestrator

import (
	"fmt"

	"github.com/localagent/agent/agent"
)

// agentTypes are the built-in sub-agent types with the configured ones
// added (a configured type replaces a built-in one of the same name).
func (o *Orchestrator) agentTypes() map[string]agent.AgentType {
	types := agent.BuiltinAgentTypes()
	for name, t := range o.opts.AgentTypes {
		types[name] = t
	}
	return types
}

// agentType resolves a spawn_agents task's type; "" is the default type.
func (o *Orchestrator) agentType(name string) (string, agent.AgentType, error) {
	if name == "" {
		name = agent.DefaultAgentType
	}
	types := o.agentTypes()
	t, ok := types[name]
	if !ok {
		return name, t, fmt.Errorf("unknown sub-agent type %q; the types are: %s", name, agent.AgentTypeNames(types))
	}
	return name, t, nil
}

// stopNote tells the parent when a sub-agent was stopped by its budget
// rather than finishing: its summary may be incomplete.
func stopNote(res agent.Result) string {
	if res.StopReason == agent.StopMaxIterations {
		return fmt.Sprintf("[stopped: the sub-agent used its whole budget of %d model requests before finishing]", res.Iterations)
	}
	return ""
}
