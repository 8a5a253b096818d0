package nemesis

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/storage/tokenstore"
	"github.com/fenced/fenced/harness/devcluster"
)

// Violation is one broken safety property.
type Violation struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

// checkInput is everything the checker reads at the end of a run.
type checkInput struct {
	blind, disk       []Record
	blindBad, diskBad []string
	diskErr           error
	store             []tokenstore.Entry
	storeErr          error
	history           []HistoryRecord
	historyErr        error
	fsckOut           string
	fsckOK            bool
	fsckErr           error
	noDisk            bool              // the tokens profile: no shared ext4
	logs              map[string][]byte // node name → its log
}

// gather reads the logs, the store, and the disk (once nothing mounts it).
func (c *cluster) gather(history []HistoryRecord, herr error) checkInput {
	in := checkInput{history: history, historyErr: herr, logs: map[string][]byte{}}
	b, _ := os.ReadFile(c.path("blind.log"))
	in.blind, in.blindBad = ParseRecords(b)
	in.store, in.storeErr = tokenstore.ReadLog(c.path("store.log"))
	for _, n := range c.nodes {
		in.logs[n.name], _ = os.ReadFile(n.dn.Log)
	}
	if c.opts.Tokens {
		in.noDisk = true
		data, err := os.ReadFile(c.path("shared-records"))
		if err != nil && !os.IsNotExist(err) {
			in.diskErr = err
		}
		in.disk, in.diskBad = ParseRecords(data)
		return in
	}
	if err := c.disk.waitUnmounted(30 * time.Second); err != nil {
		in.fsckErr, in.diskErr = err, err
		return in
	}
	in.fsckOut, in.fsckOK = c.disk.fsck()
	data, err := c.disk.readFile("records")
	if err != nil {
		in.diskErr = err
	} else {
		os.WriteFile(c.path("disk-records.log"), data, 0o644)
		in.disk, in.diskBad = ParseRecords(data)
	}
	return in
}

// tenureRun is a maximal run of consecutive records of one (node, epoch).
type tenureRun struct {
	Node        string
	Epoch       uint64
	First, Last time.Time
	From, To    int // record indexes
}

func runsOf(recs []Record) []tenureRun {
	var out []tenureRun
	for i, r := range recs {
		if k := len(out); k > 0 && out[k-1].Node == r.Node && out[k-1].Epoch == r.Epoch {
			out[k-1].Last, out[k-1].To = r.Time, i
			continue
		}
		out = append(out, tenureRun{Node: r.Node, Epoch: r.Epoch, First: r.Time, Last: r.Time, From: i, To: i})
	}
	return out
}

func ts(t time.Time) string { return t.UTC().Format("15:04:05.000000") }

// checkOrder checks one log of writes: each (node, epoch) writes in one
// unbroken run (no two writers interleave), and no run has an epoch below
// one that wrote before it.
func checkOrder(name string, recs []Record) []Violation {
	var out []Violation
	runs := runsOf(recs)
	seen := map[string]int{}
	var highest uint64
	highestAt := -1
	for i, r := range runs {
		key := fmt.Sprintf("%s@%d", r.Node, r.Epoch)
		if j, ok := seen[key]; ok {
			prev := runs[i-1]
			out = append(out, Violation{Check: "interleave (" + name + ")", Detail: fmt.Sprintf(
				"%s wrote again at %s (record %d) after %s@%d wrote at %s; its earlier writes ended at %s: two writers at once",
				key, ts(r.First), r.From+1, prev.Node, prev.Epoch, ts(prev.Last), ts(runs[j].Last))})
		}
		seen[key] = i
		if r.Epoch < highest {
			h := runs[highestAt]
			out = append(out, Violation{Check: "stale writer (" + name + ")", Detail: fmt.Sprintf(
				"%s wrote at %s (record %d) after epoch %d had written (%s@%d from %s)",
				key, ts(r.First), r.From+1, h.Epoch, h.Node, h.Epoch, ts(h.First))})
		} else if r.Epoch > highest {
			highest, highestAt = r.Epoch, i
		}
	}
	return out
}

// checkHandovers checks that every change of writing node was preceded by
// the old writer's committed release, a fence of it confirmed by
// read-back, or an administrator's confirmation — each after the old
// writer's last write and before the new writer's first — or, storage
// checking tokens, the lease expiry the new holder recorded, before its
// first write.
func checkHandovers(recs []Record, hist []HistoryRecord) (out []Violation, changes int) {
	runs := runsOf(recs)
	for i := 1; i < len(runs); i++ {
		a, b := runs[i-1], runs[i]
		if a.Node == b.Node {
			continue
		}
		changes++
		covered := false
		for _, h := range hist {
			if h.Target != a.Node || h.Outcome != "success" {
				continue
			}
			ok := h.Kind == "confirm" || h.Kind == "fence" && h.Action != "on" || h.Kind == "release" && h.Epoch >= a.Epoch
			at := h.At()
			if ok && !at.Before(a.Last) && !at.After(b.First) {
				covered = true
				break
			}
			// With storage that checks tokens, the former's writes go on
			// being accepted until the new epoch's first one (they are
			// refused from then on: the order check): its lease expiry
			// need only come before that first write.
			if h.Kind == "lease-expiry" && !at.Before(a.First) && !at.After(b.First) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, Violation{Check: "handover", Detail: fmt.Sprintf(
				"writer changed from %s@%d (last write %s) to %s@%d (first write %s) with no committed release, confirmed fence or confirmation of %s in between",
				a.Node, a.Epoch, ts(a.Last), b.Node, b.Epoch, ts(b.First), a.Node)})
		}
	}
	return out, changes
}

var panicRE = regexp.MustCompile(`(?m)^panic: |^fatal error: |^goroutine \d+ \[running\]:|^WARNING: DATA RACE`)

// maxPerCheck bounds the violations reported per check; the rest are
// counted.
const maxPerCheck = 5

// check runs every check and says what it checked.
func check(in checkInput) (vs []Violation, checks []string) {
	count := map[string]int{}
	defer func() {
		for _, k := range sortedKeys(count) {
			if n := count[k] - maxPerCheck; n > 0 {
				vs = append(vs, Violation{Check: k, Detail: fmt.Sprintf("… and %d more of this kind", n)})
			}
		}
	}()
	add := func(v ...Violation) {
		for _, x := range v {
			if count[x.Check]++; count[x.Check] <= maxPerCheck {
				vs = append(vs, x)
			}
		}
	}
	for _, b := range in.blindBad {
		add(Violation{"blind log", "unreadable " + b})
	}
	add(checkOrder("blind log", in.blind)...)
	checks = append(checks, fmt.Sprintf("epoch-blind log: %d writes in %d tenures, no interleaving, no stale writer", len(in.blind), len(runsOf(in.blind))))
	if in.diskErr != nil {
		add(Violation{"shared disk", in.diskErr.Error()})
	} else {
		for _, b := range in.diskBad {
			add(Violation{"shared disk", "unreadable " + b})
		}
		add(checkOrder("shared disk", in.disk)...)
		where := "file on the shared ext4"
		if in.noDisk {
			where = "shared file of the writes the token store accepted"
		}
		checks = append(checks, fmt.Sprintf("%s: %d writes in %d tenures, no interleaving, no stale writer", where, len(in.disk), len(runsOf(in.disk))))
	}
	switch {
	case in.noDisk:
	case in.fsckErr != nil:
		add(Violation{"fsck", in.fsckErr.Error()})
	case !in.fsckOK:
		add(Violation{"fsck", "e2fsck -fn found problems:\n" + in.fsckOut})
	default:
		checks = append(checks, "e2fsck -fn: clean")
	}
	if in.storeErr != nil {
		add(Violation{"token store", in.storeErr.Error()})
	} else if err := tokenstore.Check(in.store); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			add(Violation{"token store", line})
		}
	} else {
		acc, stale := 0, 0
		for _, e := range in.store {
			switch e.Result {
			case tokenstore.Accepted:
				acc++
			case tokenstore.Stale:
				stale++
			}
		}
		checks = append(checks, fmt.Sprintf("token store: %d writes accepted, %d stale ones rejected, none accepted late", acc, stale))
	}
	if in.historyErr != nil {
		add(Violation{"handover", "no fence history: " + in.historyErr.Error()})
	} else {
		hv, n := checkHandovers(in.blind, in.history)
		add(hv...)
		checks = append(checks, fmt.Sprintf("%d changes of writer, each after a release, confirmed fence, confirmation or lease expiry (%d history records)", n, len(in.history)))
	}
	names := make([]string, 0, len(in.logs))
	for name := range in.logs {
		names = append(names, name)
	}
	for name, b := range in.logs {
		if loc := panicRE.FindIndex(b); loc != nil {
			end := min(len(b), loc[0]+400)
			add(Violation{"panic", fmt.Sprintf("%s log: %s", name, string(b[loc[0]:end]))})
		}
		if strings.Contains(string(b), devcluster.BMCPassword) {
			add(Violation{"secret", name + " log contains the BMC password"})
		}
	}
	checks = append(checks, fmt.Sprintf("node logs (%d): no panic, no BMC password", len(names)))
	return vs, checks
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
