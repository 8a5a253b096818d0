package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fenced/fenced/daemon/api"
)

func init() {
	extraCommands = append(extraCommands, newStatusCmd)
}

func newStatusCmd(a *app) *cobra.Command {
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster: quorum, primary and epoch, running fences, every node, where each resource runs",
		Long: `Show the cluster as the local node sees it: quorum (the votes this node
reaches now against those needed, and whether it hears a leader), the primary
and its epoch with the last change of primacy (who, when, why), this node's own
view, the fences running (how long, and on the node that runs one, the step of
each device: session, command, read-back, waiting to retry), every configured
node with its FENCE PATH as this node's device checks see it (working: every
device of one of its levels passed its last check; a fence or unfence read back
counts as a check) and (standby) in its ROLE, where each resource of the group
runs cluster-wide (from each node's gossip; "node2?" when that gossip is older
than a lease), and the resources of this node's group (see resource list).

Without quorum the Primary line reads LAST KNOWN, UNCONFIRMED: it is the
replicated state as this node last learned it, and may name a dead node.

A node none of whose levels works gets a warning
line naming each device and what failed ("node2: no working fence path:
node2-bmc auth failed 3m ago; pdu-a ok"): if it failed now, its takeover
would block. A node does not check the devices that fence only itself; ask
another node about its own path.

With --watch it keeps asking the daemon every --interval: on a terminal the
view is redrawn in place (like crm_mon); otherwise, and with -o json, it
prints only what changed — a line per change, or one JSON status document
per line. A daemon that stops answering is reported and asked again.
Ctrl-C ends it with exit status 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("--interval %v: must be positive", interval)}
			}
			if watch {
				return a.watchStatus(cmd.Context(), interval)
			}
			var st api.Status
			if err := a.call(cmd.Context(), "GET", "/v1/status", nil, nil, &st); err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(st)
			}
			printStatus(a.out, &st)
			// This node's resources (table only: resource list -o json
			// has them as JSON).
			if res, err := fetchResources(cmd.Context(), a); err == nil && len(res.Resources) > 0 {
				fmt.Fprintf(a.out, "\nResources on %s (%s):\n", res.Node, res.Role)
				printResources(a.out, res)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "keep showing the status: redrawn on a terminal, else what changed (Ctrl-C ends)")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch asks the daemon")
	return cmd
}

func printStatus(w io.Writer, st *api.Status) {
	fmt.Fprintf(w, "Cluster:  %s (this node: %s)", cell(st.Cluster), cell(st.Node))
	if l := clusterVersionLine(st.ClusterVersion); l != "" {
		fmt.Fprintf(w, ", %s", l)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Quorum:   %s\n", quorumLine(st.Quorum))
	p := st.Primary
	fmt.Fprintf(w, "Primary:  %s\n", primaryLine(p))
	if p.Node != "" && !p.Blocked && p.Reason != "" {
		fmt.Fprintf(w, "          %s\n", cell(p.Reason))
	}
	if l := changeLine(p, time.Now()); l != "" {
		fmt.Fprintf(w, "          %s\n", l)
	}
	for _, n := range slices.Sorted(maps.Keys(p.Unclean)) {
		fmt.Fprintf(w, "UNCLEAN:  %s may still run the group (%s); only a fence that removes its power, or `fencectl confirm %s --yes`, clears it\n",
			cell(n), cell(p.Unclean[n]), cell(n))
	}
	s := st.Self
	fmt.Fprintf(w, "This node: %s, raft %s (term %d), knows epoch %d", cell(s.Role), cell(s.Raft), s.Term, s.KnownEpoch)
	if s.Epoch > 0 {
		fmt.Fprintf(w, ", holds epoch %d, lease %.2fs left", s.Epoch, s.LeaseLeftSec)
	}
	fmt.Fprintln(w)
	if s.Ineligible != "" {
		fmt.Fprintf(w, "           NOT ELIGIBLE for primacy: %s\n", cell(s.Ineligible))
	}
	if s.NotReady != "" {
		fmt.Fprintf(w, "           not ready for primacy yet: %s\n", cell(s.NotReady))
	}
	if wd := s.Watchdog; wd != nil && wd.Armed && !wd.Advertised {
		fmt.Fprintf(w, "           watchdog %s armed, NOT ADVERTISED for the watchdog level: %s\n", cell(wd.Device), cell(wd.Note))
	}
	for i, l := range configLines(st, true) {
		label := "Config:   "
		if i > 0 {
			label = "          "
		}
		fmt.Fprintf(w, "%s%s\n", label, l)
	}
	for i, l := range append(pendingLines(st, true), fenceWarnings(st, time.Now(), true)...) {
		label := "Fencing:  "
		if i > 0 {
			label = "          "
		}
		fmt.Fprintf(w, "%s%s\n", label, l)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tKIND\tADDRESS\tGOSSIP\tRAFT\tROLE\tEPOCH\tSTORAGE\tFENCE PATH\tCONFIG\tKEYS\tLAST CONTACT\tVERSION")
	var lost []string
	for _, n := range st.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(n.Name), cell(n.Kind), cell(n.Address), gossipCell(n), cell(n.Raft), roleCell(n),
			epochCell(n), cell(n.Storage), pathCell(st, n.Name), configCell(n), cell(strings.Join(n.Keys, ",")), ago(n.LastContact), cell(n.Version))
		if n.Kind == "witness" && n.Gossip != "alive" && n.Gossip != "suspect" {
			lost = append(lost, n.Name)
		}
	}
	tw.Flush()
	if len(st.Nodes) > 0 && len(st.Self.Keys) > 0 {
		fmt.Fprintln(w, "KEYS: cluster key IDs, the first encrypts (see gossip.key_file)")
	}
	for _, l := range keyWarnings(st.Nodes) {
		fmt.Fprintf(w, "! %s\n", l)
	}
	for _, n := range st.Nodes {
		if n.Stale && (n.Role != "" || n.Epoch != 0) {
			fmt.Fprintln(w, "? gossip older than one lease, or a primacy the replicated state gives another: may no longer be true")
			break
		}
	}
	for _, n := range lost {
		fmt.Fprintf(w, "\nWitness %s is lost (not seen by gossip): one more failure of a voter leaves no majority.\n", cell(n))
	}
	if len(st.Resources) > 0 {
		fmt.Fprintf(w, "\nResources (cluster-wide, from each node's gossip):\n")
		for _, l := range placeLines(st.Resources) {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}

// quorumLine is what this node reaches: votes reachable now against those
// needed, and whether it hears a leader (issue 24: "3 of 3 configured
// nodes seen" beside "no quorum" said nothing of what was missing).
func quorumLine(q api.QuorumStatus) string {
	have := "yes"
	if !q.Have {
		have = "NO"
	}
	if q.Reachable == 0 && q.Seen > 0 {
		// An older daemon: it counts only what gossip sees.
		return fmt.Sprintf("%s — %d of %d configured nodes seen, %d needed, leader %s", have, q.Seen, q.Configured, q.Needed, cell(q.Leader))
	}
	l := fmt.Sprintf("%s — %d of %d votes reachable, %d needed", have, q.Reachable, q.Configured, q.Needed)
	switch {
	case q.LeaderHeard:
		l += ", leader " + cell(q.Leader)
	case q.Leader != "":
		l += fmt.Sprintf(", NO LEADER HEARD (%s silent for %s)", cell(q.Leader), shortAgo(time.Duration(q.LeaderSilentSec*float64(time.Second))))
	default:
		l += ", NO LEADER"
	}
	if q.Seen != q.Reachable {
		l += fmt.Sprintf("; gossip lists %d alive or suspect", q.Seen)
	}
	if q.Incarnation != "" {
		l += fmt.Sprintf("; voting set %s (from a recovery): votes are its voters'", q.Incarnation)
	}
	return l
}

// primaryLine is the replicated holder; without quorum, marked as what
// this node last learned: never shown as current.
func primaryLine(p api.PrimaryInfo) string {
	var l string
	switch {
	case p.Node == "":
		l = "none yet"
	case p.Blocked:
		l = fmt.Sprintf("%s, epoch %d, BLOCKED: %s", cell(p.Node), p.Epoch, cell(p.Reason))
	default:
		l = fmt.Sprintf("%s, epoch %d, %s", cell(p.Node), p.Epoch, cell(p.State))
	}
	if p.LastKnown {
		return "LAST KNOWN, UNCONFIRMED (this node has no quorum): " + l
	}
	return l
}

// changeLine is the last change of primacy: who, epoch, when, why.
func changeLine(p api.PrimaryInfo, now time.Time) string {
	if p.Node == "" || p.Change == "" && p.Since == nil {
		return ""
	}
	l := fmt.Sprintf("epoch %d granted to %s", p.Epoch, cell(p.Node))
	if p.Since != nil {
		l += fmt.Sprintf(" at %s (%s ago)", p.Since.Local().Format("15:04:05"), shortAgo(now.Sub(*p.Since)))
	}
	if p.Change != "" {
		l += ": " + cell(p.Change)
	}
	return l
}

// pendingLines are the fences running, with how long, and what each
// device does now (on the node that runs it) or the last attempt.
// relative: with times (the live view), not for --watch's change lines.
func pendingLines(st *api.Status, relative bool) []string {
	var out []string
	for _, f := range st.PendingFences {
		l := fmt.Sprintf("%s of %s (%s) by %s, epoch %d: RUNNING", cell(f.Kind), cell(f.Target), cell(f.Action), cell(f.Executor), f.Epoch)
		if relative {
			l += " for " + time.Duration(f.ElapsedSec*float64(time.Second)).Round(100*time.Millisecond).String()
		}
		if f.Runs > 1 {
			l += fmt.Sprintf(", run %d", f.Runs)
		}
		var steps []string
		for _, s := range f.Steps {
			d := fmt.Sprintf("device %s (level %d), try %d: %s", cell(s.Device), s.Level, s.Try, cell(s.Step))
			if relative {
				d += " for " + time.Duration(s.ForSec*float64(time.Second)).Round(100*time.Millisecond).String()
			}
			steps = append(steps, d)
		}
		switch {
		case len(steps) > 0:
			l += "; " + strings.Join(steps, "; ")
		case f.LastAttempt != nil:
			a := f.LastAttempt
			l += fmt.Sprintf("; last: device %s (level %d), try %d %s", cell(a.Device), a.Level, a.Try, cell(a.Result))
			if a.Error != "" {
				l += ": " + cell(a.Error)
			}
		default:
			l += "; no device attempt recorded yet"
		}
		out = append(out, l)
	}
	return out
}

// placeLines say where each resource runs, crm_mon style: "db
// (ocf:heartbeat:pgsql): running on node1", a "?" after a node whose
// gossip is stale.
func placeLines(places []api.ResourcePlace) []string {
	var out []string
	for _, r := range places {
		l := cell(r.Name)
		if r.Kind != "" {
			l += " (" + cell(r.Kind) + ")"
		}
		if len(r.On) == 0 {
			out = append(out, l+": stopped everywhere")
			continue
		}
		var on []string
		for _, o := range r.On {
			state := cell(o.State)
			switch o.State {
			case "failed":
				state = "FAILED (may still run)"
			case "unknown":
				state = "MAY STILL RUN (node gone, not confirmed stopped)"
			}
			n := cell(o.Node)
			if o.Stale {
				n += "?"
			}
			on = append(on, state+" on "+n)
		}
		out = append(out, l+": "+strings.Join(on, ", "))
	}
	return out
}

// gossipCell is what gossip says of a node, or for one it does not see,
// what the replicated state knows: OFF (fenced, when and by whom), UNCLEAN
// or MAY RUN THE STORAGE.
func gossipCell(n api.NodeStatus) string {
	switch n.Down {
	case "fenced":
		return fmt.Sprintf("OFF (fenced %s by %s)", ago(n.FencedAt), cell(n.FencedBy))
	case "unclean":
		return "UNCLEAN"
	case "unconfirmed":
		return "DOWN, MAY RUN THE STORAGE"
	}
	return cell(n.Gossip)
}

// roleCell is the role a node gossips, marked when it is stale: never two
// primaries.
func roleCell(n api.NodeStatus) string {
	r := cell(n.Role)
	if n.Stale && n.Role != "" {
		r += "?"
	}
	if n.Standby {
		r += " (standby)"
	}
	return r
}

func epochCell(n api.NodeStatus) string {
	if n.Epoch == 0 || n.Down != "" {
		return "-"
	}
	if n.Stale {
		return strconv.FormatUint(n.Epoch, 10) + "?"
	}
	return strconv.FormatUint(n.Epoch, 10)
}

// watchStatus polls the status until ctx ends (Ctrl-C), which is a clean
// exit. Only what makes retrying pointless (permission denied) ends it
// early.
func (a *app) watchStatus(ctx context.Context, every time.Duration) error {
	tty := a.output == "table" && isTerminal(a.out)
	var last *api.Status
	lastErr := ""
	for {
		var st api.Status
		err := a.call(ctx, "GET", "/v1/status", nil, nil, &st)
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now()
		var ee *exitError
		switch {
		case errors.As(err, &ee) && ee.code == exitPermission:
			return err
		case err != nil:
			msg := err.Error()
			switch {
			case tty:
				a.redraw(now, every, func(w io.Writer) { fmt.Fprintf(w, "fenced does not answer: %s\n", api.EscapeText(msg)) })
			case msg == lastErr:
			case a.output == "json":
				code := exitFailure
				if ee != nil {
					code = ee.code
				}
				b, _ := json.Marshal(api.Error{SchemaVersion: api.SchemaVersion, Message: msg, Code: codes[code], ExitCode: code})
				fmt.Fprintf(a.errw, "%s\n", b)
			default:
				fmt.Fprintf(a.out, "%s fenced does not answer: %s\n", stamp(now), api.EscapeText(msg))
			}
			lastErr, last = msg, nil
		default:
			lastErr = ""
			switch {
			case tty:
				a.redraw(now, every, func(w io.Writer) { printStatus(w, &st) })
			case a.output == "json":
				if last == nil || !sameStatus(last, &st) {
					b, _ := json.Marshal(st)
					fmt.Fprintf(a.out, "%s\n", b)
				}
			default:
				for _, l := range statusChanges(last, &st) {
					fmt.Fprintf(a.out, "%s %s\n", stamp(now), l)
				}
			}
			last = &st
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// redraw replaces the terminal's screen with a header and body, line by
// line (clearing each line's rest and what is below), so it does not flicker.
func (a *app) redraw(now time.Time, every time.Duration, body func(io.Writer)) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Every %v: fencectl status — %s (Ctrl-C to quit)\n\n", every, now.Format("2006-01-02 15:04:05"))
	body(&b)
	var out bytes.Buffer
	out.WriteString("\x1b[H")
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		out.WriteString(strings.TrimSuffix(l, "\n"))
		if strings.HasSuffix(l, "\n") {
			out.WriteString("\x1b[K\n")
		}
	}
	out.WriteString("\x1b[J")
	a.out.Write(out.Bytes())
}

func stamp(t time.Time) string { return t.Format(time.RFC3339) }

// sameStatus compares two status documents without what changes on every
// poll (lease left, last contact, round-trip time, how long a leader has
// been silent, how long a fence and its steps have run).
func sameStatus(a, b *api.Status) bool {
	strip := func(s api.Status) []byte {
		s.Self.LeaseLeftSec = 0
		s.Nodes = slices.Clone(s.Nodes)
		for i := range s.Nodes {
			s.Nodes[i].LastContact, s.Nodes[i].RTTMillis = nil, 0
		}
		s.Quorum.LeaderSilentSec = 0
		s.PendingFences = slices.Clone(s.PendingFences)
		for i := range s.PendingFences {
			f := &s.PendingFences[i]
			f.ElapsedSec, f.Steps = 0, slices.Clone(f.Steps)
			for j := range f.Steps {
				f.Steps[j].ForSec = 0
			}
		}
		j, _ := json.Marshal(s)
		return j
	}
	return bytes.Equal(strip(*a), strip(*b))
}

// statusChanges describes st as lines, one per subject (quorum, primary,
// this node, each node), and returns those that differ from before (all of
// them the first time; before nil).
func statusChanges(before, st *api.Status) []string {
	var prev map[string]string
	var prevKeys []string
	if before != nil {
		prevKeys, prev = statusLines(before)
	}
	keys, now := statusLines(st)
	var out []string
	for _, k := range keys {
		if prev[k] != now[k] {
			out = append(out, now[k])
		}
	}
	for _, k := range prevKeys {
		if _, ok := now[k]; !ok {
			out = append(out, k+": gone from the status")
		}
	}
	return out
}

func statusLines(st *api.Status) ([]string, map[string]string) {
	keys := []string{"quorum", "primary", "this node"}
	m := map[string]string{}
	q := st.Quorum
	// Without the silence's length: it changes on every poll.
	q.LeaderSilentSec = 0
	m["quorum"] = "quorum: " + strings.Replace(quorumLine(q), " silent for 0s", " silent", 1)
	m["primary"] = "primary: " + primaryLine(st.Primary)
	if p := st.Primary; p.Change != "" {
		m["primary"] += "; " + cell(p.Change)
	}
	if l := clusterVersionLine(st.ClusterVersion); l != "" {
		keys = append(keys, "cluster version")
		m["cluster version"] = l
	}
	s := st.Self
	m["this node"] = fmt.Sprintf("this node: %s (%s), raft %s (term %d), knows epoch %d, holds epoch %d, storage %s, standby %v",
		cell(st.Node), cell(s.Role), cell(s.Raft), s.Term, s.KnownEpoch, s.Epoch, cell(s.Storage), s.Standby)
	if s.Ineligible != "" {
		m["this node"] += ", not eligible: " + cell(s.Ineligible)
	}
	if s.NotReady != "" {
		m["this node"] += ", not ready yet: " + cell(s.NotReady)
	}
	if cl := configLines(st, false); len(cl) > 0 {
		keys = append(keys, "config")
		m["config"] = "config: " + strings.Join(cl, "; ")
	}
	for _, n := range st.Nodes {
		k := "node " + cell(n.Name)
		keys = append(keys, k)
		m[k] = fmt.Sprintf("%s (%s): %s, raft %s, role %s, epoch %d, storage %s, fence path %s, config %s, version %s", k, cell(n.Kind), cell(n.Gossip), cell(n.Raft), cell(n.Role), n.Epoch, cell(n.Storage), pathCell(st, n.Name), configCell(n), cell(n.Version))
		if n.Standby {
			m[k] += ", standby"
		}
	}
	for _, l := range pendingLines(st, false) {
		k := "fence " + l[:strings.Index(l, ":")]
		keys = append(keys, k)
		m[k] = "fencing: " + l
	}
	for i, l := range placeLines(st.Resources) {
		k := "resource " + st.Resources[i].Name
		keys = append(keys, k)
		m[k] = "resource: " + l
	}
	// A node without a working fence path gets a line of its own, without
	// times (they would change on every poll).
	for _, l := range fenceWarnings(st, time.Time{}, false) {
		k := "fencing " + l[:strings.Index(l, ":")]
		keys = append(keys, k)
		m[k] = "fencing: " + l
	}
	return keys, m
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// clusterVersionLine is "cluster version: 2", or "cluster version: 1
// (node3 runs an older fenced; 2 once every voter advertises it)" ("" from
// a daemon that reports none).
func clusterVersionLine(v *api.ClusterVersion) string {
	if v == nil {
		return ""
	}
	l := fmt.Sprintf("cluster version: %d", v.Committed)
	if len(v.HeldBy) > 0 {
		held := make([]string, len(v.HeldBy))
		for i, h := range v.HeldBy {
			held[i] = cell(h)
		}
		l += fmt.Sprintf(" (%s; %d once every voter advertises it)", strings.Join(held, ", "), v.Committed+1)
	}
	if v.Halted != "" {
		l += "; THIS NODE HALTED: " + cell(v.Halted)
	}
	return l
}

// keyWarnings names the nodes in gossip whose primary key (the one they
// encrypt with) another such node does not hold: those two cannot read
// each other, as in a rotation step run out of order.
func keyWarnings(nodes []api.NodeStatus) []string {
	var out []string
	for _, a := range nodes {
		if len(a.Keys) == 0 || a.Gossip != "alive" && a.Gossip != "suspect" {
			continue
		}
		for _, b := range nodes {
			if b.Name == a.Name || len(b.Keys) == 0 || b.Gossip != "alive" && b.Gossip != "suspect" {
				continue
			}
			if !slices.Contains(b.Keys, a.Keys[0]) {
				out = append(out, fmt.Sprintf("%s encrypts with key %s, which %s does not hold: add it there before making it first", cell(a.Name), cell(a.Keys[0]), cell(b.Name)))
			}
		}
	}
	return out
}
