package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon/api"
)

func init() {
	extraCommands = append(extraCommands, func(a *app) *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "Print fencectl's version and the daemon's",
			Long: `Print the version of fencectl and of the fenced daemon it talks to (with the
node's name). When the daemon does not answer, fencectl's own version is
printed and the command fails as any other would.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				v := api.Versions{SchemaVersion: api.SchemaVersion, Client: api.BuildInfo{Version: api.Version, Go: runtime.Version()}}
				var d api.VersionInfo
				err := a.call(cmd.Context(), "GET", "/v1/version", nil, nil, &d)
				if err == nil {
					v.Daemon = &api.BuildInfo{Version: d.Version, Go: d.Go, Node: d.Node}
				}
				if a.output == "json" {
					if perr := a.printJSON(v); perr != nil {
						return perr
					}
					return err
				}
				fmt.Fprintf(a.out, "fencectl %s (%s)\n", v.Client.Version, v.Client.Go)
				if v.Daemon != nil {
					fmt.Fprintf(a.out, "fenced   %s (%s) on %s\n", cell(v.Daemon.Version), cell(v.Daemon.Go), cell(v.Daemon.Node))
				}
				return err
			},
		}
	})
}
