package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// NewCmdDoctor builds `agent doctor`.
func NewCmdDoctor(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check that this machine can run tasks",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("agent doctor: not implemented yet")
		},
	}
}
