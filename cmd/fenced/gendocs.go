package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/cmd/internal/docgen"
	"github.com/fenced/fenced/daemon/api"
)

func init() {
	extraCommands = append(extraCommands, func(context.Context, *stdio) *cobra.Command {
		// Hidden: packaging runs it on the freshly built binary, so the man
		// pages and completions come from the very commands being shipped.
		return docgen.Command(api.Version)
	})
}
