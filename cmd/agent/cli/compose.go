package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// NewCmdCompose builds `agent compose`.
func NewCmdCompose(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "compose",
		Short: "Render the compose file of the llama-server stack",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent compose: not implemented yet")
		},
	}
}
