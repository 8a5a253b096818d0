package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon/api"
)

func init() {
	extraCommands = append(extraCommands, newResourceCmd)
}

func newResourceCmd(a *app) *cobra.Command {
	res := &cobra.Command{Use: "resource", Short: "Show the resource group this node runs as primary"}
	res.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List this node's resources in start order: state, last monitor, failures",
		Long: `List the resources of the group on the node fencectl talks to, in start order:
kind, state (stopped, starting, running, stopping, failed), monitor interval,
last monitor and its result, and failures since the daemon started. Only the
primary runs them; ask the primary's fencectl for the live view.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := fetchResources(cmd.Context(), a)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(l)
			}
			fmt.Fprintf(a.out, "Resources on %s (%s):\n", l.Node, l.Role)
			printResources(a.out, l)
			return nil
		},
	})
	return res
}

func fetchResources(ctx context.Context, a *app) (api.ResourceList, error) {
	var l api.ResourceList
	err := a.call(ctx, "GET", "/v1/resources", nil, nil, &l)
	return l, err
}

func printResources(w io.Writer, l api.ResourceList) {
	if len(l.Resources) == 0 {
		fmt.Fprintln(w, "  none configured")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tKIND\tSTATE\tMONITOR\tLAST MONITOR\tRESULT\tFAILURES")
	for _, r := range l.Resources {
		result := r.LastResult
		if len(result) > 60 {
			result = strings.ToValidUTF8(result[:57], "") + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\tevery %gs\t%s\t%s\t%d\n", cell(r.Name), cell(r.Kind), cell(r.State), r.MonitorIntervalSec, ago(r.LastMonitor), cell(result), r.Failures)
	}
	tw.Flush()
	for _, r := range l.Resources {
		if r.LastError != "" {
			fmt.Fprintf(w, "  %s: last error: %s\n", cell(r.Name), cell(r.LastError))
		}
	}
}
