package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// taskCommands builds `agent task` and the commands that manage tasks.
func taskCommands(f *Factory) []*cobra.Command {
	return []*cobra.Command{{
		Use:   "task PROMPT",
		Short: "Run a task in a sandbox and hand back a branch for review",
		Args:  cobra.ExactArgs(1),
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent task: not implemented yet")
		},
	}}
}
