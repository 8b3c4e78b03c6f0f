package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// NewCmdSandbox builds `agent sandbox`.
func NewCmdSandbox(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "sandbox",
		Short: "Create and use hardened workspace containers (debug surface)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent sandbox: not implemented yet")
		},
	}
}
