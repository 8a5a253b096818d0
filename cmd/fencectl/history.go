package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/api/timeline"
	"github.com/fenced/fenced/stonith/fencing"
)

// timeMillis is how fencectl shows the history's times: to the
// millisecond, as the records keep them.
const timeMillis = "2006-01-02 15:04:05.000"

func newHistoryCmd(a *app) *cobra.Command {
	var (
		verbose, drawTimeline bool
		since                 string
		kinds                 []string
		last                  int
	)
	cmd := &cobra.Command{
		Use:   "history [NODE]",
		Short: "Show the replicated history: fences, confirmations, releases, elections, grants of primacy",
		Long: `Show the replicated history, oldest first: every fence and unfence with its
device actions (-v), admin confirmations, releases, lease expiries and
watchdog confirmations, the raft elections (recorded by the node that won:
term, the leader before and when it was last heard) and the grants of
primacy (epoch, the holder before, the phases of the takeover). Times are
local, to the millisecond. NODE keeps the records about that node: its
fences and releases, the elections it won, the primacy it was granted.

--since keeps what happened after a moment: a duration back from now (90s,
10m, 2h, 3d) or an RFC 3339 time (2026-12-02T03:00:00Z, or with an offset).
--kind keeps the records of the kinds named (repeat it or separate them with
commas): ` + strings.Join(fencing.Kinds, ", ") + `.

--timeline draws the last failovers (--last, default 3) instead, each as a
small Gantt chart: the phases detect (the former primary's last contact
until the campaign began), release (a handover), elect (the campaign until
the epoch was asked for), fence (until the read-back confirmed the node
off), confirm (until the holder before was confirmed stopped and the start
committed), start (the resources starting, until the primary served), each
on its node, with millisecond offsets from the first. On a terminal the bars
are drawn with block characters to its width; otherwise in plain ASCII.
With -o json it prints the failovers as JSON (docs/schema/timeline.json).
The times are the nodes' own clocks: a timeline is as precise as they agree.

history.limit (fenced.yaml) bounds how many records the cluster keeps, of
every kind together.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			f, err := newHistoryFilter(since, kinds, now)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			node := ""
			if len(args) == 1 {
				node = args[0]
			}
			if drawTimeline {
				if len(kinds) > 0 {
					return &exitError{code: exitUsage, err: fmt.Errorf("--kind: not with --timeline (a failover's phases come from records of every kind)")}
				}
				if last < 1 {
					return &exitError{code: exitUsage, err: fmt.Errorf("--last %d: must be at least 1", last)}
				}
				return a.printTimeline(cmd, node, f, last, now)
			}
			if cmd.Flags().Changed("last") {
				return &exitError{code: exitUsage, err: fmt.Errorf("--last: only with --timeline")}
			}
			q := url.Values{}
			if node != "" {
				q.Set("node", node)
			}
			var h api.History
			if err := a.call(cmd.Context(), "GET", "/v1/history", q, nil, &h); err != nil {
				return err
			}
			h.Records = f.apply(h.Records, node)
			if a.output == "json" {
				return a.printJSON(h)
			}
			if len(h.Records) == 0 {
				if f.any() || node != "" {
					fmt.Fprintln(a.out, "no history matches")
				} else {
					fmt.Fprintln(a.out, "no history")
				}
				return nil
			}
			printRecords(a, h.Records, verbose)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "show every device action")
	cmd.Flags().StringVar(&since, "since", "", "only what happened since: a duration back from now (10m, 2h, 3d) or an RFC 3339 time")
	cmd.Flags().StringSliceVar(&kinds, "kind", nil, "only records of these kinds (comma-separated or repeated): "+strings.Join(fencing.Kinds, ", "))
	cmd.Flags().BoolVar(&drawTimeline, "timeline", false, "draw the last failovers as a timeline of their phases")
	cmd.Flags().IntVar(&last, "last", 3, "with --timeline: how many failovers")
	return cmd
}

// historyFilter is what --since and --kind keep.
type historyFilter struct {
	since time.Time       // zero: any time
	kinds map[string]bool // nil: every kind
}

func (f historyFilter) any() bool { return !f.since.IsZero() || f.kinds != nil }

// newHistoryFilter parses --since and --kind (now: the moment a duration
// counts back from).
func newHistoryFilter(since string, kinds []string, now time.Time) (historyFilter, error) {
	var f historyFilter
	if since != "" {
		t, err := parseSince(since, now)
		if err != nil {
			return f, err
		}
		f.since = t
	}
	for _, k := range kinds {
		for _, k := range strings.Split(k, ",") {
			k = strings.ToLower(strings.TrimSpace(k))
			if !slices.Contains(fencing.Kinds, k) {
				return f, fmt.Errorf("--kind %q: no such kind of record; want one of %s", k, strings.Join(fencing.Kinds, ", "))
			}
			if f.kinds == nil {
				f.kinds = map[string]bool{}
			}
			f.kinds[k] = true
		}
	}
	return f, nil
}

// parseSince reads --since: a duration back from now (Go's units, and d
// for days) or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	bad := fmt.Errorf("--since %q: want a duration back from now (90s, 10m, 2h, 3d) or an RFC 3339 time (2026-12-02T03:00:00Z)", s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		n, nerr := strconv.ParseUint(days, 10, 16)
		if nerr != nil {
			return time.Time{}, bad
		}
		d, err = time.Duration(n)*24*time.Hour, nil
	}
	switch {
	case err != nil:
		return time.Time{}, bad
	case d < 0:
		return time.Time{}, fmt.Errorf("--since %q: a duration back from now must not be negative", s)
	}
	return now.Add(-d), nil
}

// keep reports whether r passes the filter: of a kind asked for, and
// started or finished at or after since (or still pending).
func (f historyFilter) keep(r fencing.Record) bool {
	if f.kinds != nil && !f.kinds[r.Kind] {
		return false
	}
	if f.since.IsZero() {
		return true
	}
	return !r.Started.Before(f.since) || !r.Finished.IsZero() && !r.Finished.Before(f.since) || r.Outcome == fencing.OutcomePending
}

// about reports whether r is about node: its target (the node fenced,
// released, elected or granted primacy).
func about(r fencing.Record, node string) bool { return node == "" || r.Target == node }

// apply keeps the records that pass the filter and are about node.
func (f historyFilter) apply(recs []fencing.Record, node string) []fencing.Record {
	out := []fencing.Record{}
	for _, r := range recs {
		if f.keep(r) && about(r, node) {
			out = append(out, r)
		}
	}
	return out
}

// keepFailover reports whether a failover passes --since (it ended at or
// after it) and NODE (the node is in one of its phases).
func (f historyFilter) keepFailover(fo timeline.Failover, node string) bool {
	if !f.since.IsZero() && fo.End().Before(f.since) {
		return false
	}
	if node == "" || fo.To == node || fo.From == node {
		return true
	}
	return slices.ContainsFunc(fo.Phases, func(p timeline.Phase) bool { return p.Node == node })
}

// Timeline is `fencectl history --timeline -o json`.
type Timeline struct {
	SchemaVersion int                 `json:"schemaVersion"`
	Failovers     []timeline.Failover `json:"failovers"`
}

func (a *app) printTimeline(cmd *cobra.Command, node string, f historyFilter, last int, now time.Time) error {
	var h api.History
	if err := a.call(cmd.Context(), "GET", "/v1/history", nil, nil, &h); err != nil {
		return err
	}
	all := timeline.Build(h.Records, now, 0)
	fs := []timeline.Failover{}
	for _, fo := range all {
		if f.keepFailover(fo, node) {
			fs = append(fs, fo)
		}
	}
	if len(fs) > last {
		fs = fs[len(fs)-last:]
	}
	if a.output == "json" {
		return a.printJSON(Timeline{SchemaVersion: api.SchemaVersion, Failovers: fs})
	}
	if len(fs) == 0 {
		fmt.Fprintln(a.out, "no failover in the history")
		return nil
	}
	o := timeline.TextOptions{Width: 100}
	if w, ok := terminalWidth(a.out); ok {
		o.Width, o.Blocks = w, true
	}
	return timeline.Text(a.out, fs, o)
}

// terminalWidth is w's width in columns, when w is a terminal.
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(w) {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 80, true
	}
	return int(ws.Col), true
}
