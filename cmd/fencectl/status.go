package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon"
)

func init() {
	extraCommands = append(extraCommands, func(a *app) *cobra.Command {
		return &cobra.Command{
			Use:   "status",
			Short: "Show the cluster: quorum, primary and epoch, every node, this node's resources",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				var st daemon.Status
				if err := a.call(cmd.Context(), "GET", "/v1/status", nil, nil, &st); err != nil {
					return err
				}
				res, rerr := fetchResources(cmd.Context(), a)
				if a.output == "json" {
					if rerr != nil {
						return a.printJSON(st)
					}
					return a.printJSON(struct {
						daemon.Status
						Resources []daemon.ResourceStatus `json:"resources"`
					}{st, res.Resources})
				}
				printStatus(a, &st)
				if rerr == nil && len(res.Resources) > 0 {
					fmt.Fprintf(a.out, "\nResources on %s (%s):\n", res.Node, res.Role)
					printResources(a.out, res)
				}
				return nil
			},
		}
	})
}

func printStatus(a *app, st *daemon.Status) {
	w := a.out
	q := st.Quorum
	have := "yes"
	if !q.Have {
		have = "NO"
	}
	fmt.Fprintf(w, "Cluster:  %s (this node: %s)\n", st.Cluster, st.Node)
	fmt.Fprintf(w, "Quorum:   %s — %d of %d configured nodes seen, %d needed\n", have, q.Seen, q.Configured, q.Needed)
	p := st.Primary
	switch {
	case p.Node == "":
		fmt.Fprintf(w, "Primary:  none yet\n")
	case p.Blocked:
		fmt.Fprintf(w, "Primary:  %s, epoch %d, BLOCKED: %s\n", p.Node, p.Epoch, p.Reason)
	default:
		fmt.Fprintf(w, "Primary:  %s, epoch %d, %s\n", p.Node, p.Epoch, p.State)
		if p.Reason != "" {
			fmt.Fprintf(w, "          %s\n", p.Reason)
		}
	}
	s := st.Self
	fmt.Fprintf(w, "This node: %s, raft %s (term %d), knows epoch %d", s.Role, s.Raft, s.Term, s.KnownEpoch)
	if s.Epoch > 0 {
		fmt.Fprintf(w, ", holds epoch %d, lease %.2fs left", s.Epoch, s.LeaseLeftSec)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tGOSSIP\tRAFT\tROLE\tEPOCH\tSTORAGE\tLAST CONTACT\tVERSION")
	for _, n := range st.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", n.Name, n.Address, n.Gossip, dash(n.Raft), dash(n.Role), n.Epoch, dash(n.Storage), ago(n.LastContact), dash(n.Version))
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
