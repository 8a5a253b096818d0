package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon/api"
)

func init() {
	extraCommands = append(extraCommands, func(_ context.Context, s *stdio) *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				fmt.Fprintf(s.out, "fenced %s (%s)\n", api.Version, runtime.Version())
				return nil
			},
		}
	})
}
