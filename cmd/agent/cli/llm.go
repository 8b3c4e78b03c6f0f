package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// NewCmdLLM builds `agent llm`.
func NewCmdLLM(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "llm",
		Short: "Manage the local llama-server",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent llm: not implemented yet")
		},
	}
}
