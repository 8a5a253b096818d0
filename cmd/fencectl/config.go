package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fenced/fenced/daemon/api"
)

func init() {
	extraCommands = append(extraCommands, newReloadCmd, newConfigCmd)
}

func newReloadCmd(a *app) *cobra.Command {
	return withTimeout(&cobra.Command{
		Use:   "reload",
		Short: "Make the local daemon read its configuration file again (as SIGHUP)",
		Long: `Make the local fenced read its configuration file again and apply, without a
restart, what may change while it runs: devices (agents, parameters — a rotated
password's file —, timeouts, retries, monitor intervals), the nodes' fence
topologies and the alerts. The whole file is checked first, as at start. A file
with problems, or one that changes what only a restart applies (the node list,
names, roles or addresses, timing, storage and resources, data_dir, api,
gossip, watchdog, metrics, history), is refused: every problem is printed as
FILE:LINE: PATH: MESSAGE, the running configuration stays in force, and the
exit status is 1.

Reload every node after editing the cluster-wide part of the file: until every
node runs the same configuration (or ` + "`fencectl config accept`" + ` commits one), a
node whose configuration differs from the cluster's is not eligible for
primacy (see fencectl status).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out api.ReloadReply
			if err := a.call(cmd.Context(), "POST", "/v1/reload", nil, struct{}{}, &out); err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(out)
			}
			printReload(a.out, out)
			return nil
		},
	}, timeoutChange)
}

func printReload(w io.Writer, r api.ReloadReply) {
	changed := "nothing that applies live changed"
	if len(r.Changed) > 0 {
		changed = "applied: " + strings.Join(r.Changed, ", ")
	}
	fmt.Fprintf(w, "%s reloaded %s: %s\n", cell(r.Node), cell(r.File), api.EscapeText(changed))
	switch {
	case r.Committed == "":
		fmt.Fprintf(w, "configuration fingerprint %s (the cluster has none committed yet)\n", cell(r.Fingerprint))
	case r.Match:
		fmt.Fprintf(w, "configuration fingerprint %s: the cluster's\n", cell(r.Fingerprint))
	default:
		fmt.Fprintf(w, "configuration fingerprint %s differs from the cluster's %s: this node is not eligible for primacy\n"+
			"until every node runs this configuration (reload each), or `fencectl config accept` commits it\n", cell(r.Fingerprint), cell(r.Committed))
	}
}

func newConfigCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "The cluster's configuration: accept a changed one"}
	c.AddCommand(withTimeout(&cobra.Command{
		Use:   "accept [NODE]",
		Short: "Commit NODE's configuration (default: this node's) as the cluster's",
		Long: `Commit the fingerprint of NODE's cluster-wide configuration (default: the node
asked) as the cluster's. Nodes whose configuration differs from the committed
one are not eligible for primacy; after accept, those running NODE's are, and
the others (listed) are not until they run it.

The cluster commits a new configuration by itself once every configured node
runs it (edit the file on every node, then reload each or restart each). Use
accept when that cannot happen: a node is down, or the change needs a restart
and the primary still runs the old file. A rolling change that needs a
restart (timing, the storage, ...):

  1. edit the file on every node;
  2. restart the secondaries one at a time (each shows CONFIG MISMATCH);
  3. fencectl config accept         (on a restarted node);
  4. fencectl transfer NODE         (to a restarted node: the old primary is
                                     no longer eligible, and hands over cleanly);
  5. restart the old primary.

Accept refuses a configuration no running data node runs: the cluster would
be left with no node eligible for primacy.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.AdminRequest{}
			if len(args) == 1 {
				req.Node = args[0]
			}
			var out api.ConfigAcceptReply
			if err := a.call(cmd.Context(), "POST", "/v1/config/accept", nil, req, &out); err != nil {
				return err
			}
			out.SchemaVersion = api.SchemaVersion
			if a.output == "json" {
				return a.printJSON(out)
			}
			fmt.Fprintf(a.out, "the cluster's configuration is now %s (%s's)", cell(out.Fingerprint), cell(out.Node))
			if out.Previous != "" && out.Previous != out.Fingerprint {
				fmt.Fprintf(a.out, ", was %s", cell(out.Previous))
			}
			fmt.Fprintln(a.out)
			for _, n := range out.Differing {
				fmt.Fprintf(a.out, "  %s: %s (fingerprint %s): not eligible for primacy until it runs the new file\n", cell(n.Node), cell(n.State), cell(n.Fingerprint))
			}
			return nil
		},
	}, timeoutChange))
	return c
}

// configLines describes the configuration part of a status: a line for
// this node and one per node whose configuration differs (withTimes: with
// how long ago the last reload was).
func configLines(st *api.Status, withTimes bool) []string {
	cs := st.Config
	if cs == nil {
		return nil
	}
	var out []string
	switch {
	case cs.Committed == "" && cs.Match:
		out = append(out, fmt.Sprintf("fingerprint %s (the one a majority runs; not committed yet)", cell(cs.Fingerprint)))
	case cs.Committed == "":
		out = append(out, fmt.Sprintf("fingerprint %s; none committed yet, and no majority runs this one", cell(cs.Fingerprint)))
	case cs.Match:
		out = append(out, fmt.Sprintf("fingerprint %s, the cluster's (committed by %s)", cell(cs.Fingerprint), cell(cs.CommittedBy)))
	default:
		out = append(out, fmt.Sprintf("CONFIG MISMATCH: this node runs %s, the cluster's is %s; differing: %s", cell(cs.Fingerprint), cell(cs.Committed), cell(strings.Join(cs.Differing, ", "))))
	}
	for _, n := range st.Nodes {
		if !n.ConfigMismatch || n.Name == st.Node {
			continue
		}
		keys := "keys not known yet"
		if len(n.ConfigDiffering) > 0 {
			keys = "differing: " + strings.Join(n.ConfigDiffering, ", ")
		}
		out = append(out, fmt.Sprintf("CONFIG MISMATCH %s: runs %s; %s", cell(n.Name), cell(n.Config), cell(keys)))
	}
	if cs.Hint != "" {
		out = append(out, cell(cs.Hint))
	}
	if cs.Warning != "" {
		out = append(out, cell(cs.Warning))
	}
	if r := cs.LastReload; r != nil && !r.OK {
		first, _, _ := strings.Cut(r.Error, "\n")
		when := ""
		if withTimes {
			when = " (" + ago(r.Time) + ")"
		}
		out = append(out, fmt.Sprintf("last reload%s refused: %s (see fencectl reload)", when, cell(first)))
	}
	return out
}

// configCell is a node's CONFIG column.
func configCell(n api.NodeStatus) string {
	switch {
	case n.Config == "":
		return "-"
	case n.ConfigMismatch:
		return "MISMATCH"
	}
	return "ok"
}
