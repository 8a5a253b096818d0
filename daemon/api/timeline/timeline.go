// Package timeline reads the failovers out of the replicated history: for
// each grant of primacy, the phases its takeover went through (detect,
// release, elect, fence, confirm, start), each on the node it concerns,
// with offsets from the first; and draws them, as text for `fencectl
// history --timeline` and as SVG for the status page. It reads records
// only (package fencing), so fencectl links nothing more for it.
//
// The times come from the records, which carry each node's wall clock:
// the election, the grant, the confirmation and the start are the new
// primary's own; a fence's end is its executor's. A timeline is a picture
// of what happened, good to the precision of the nodes' clocks; nothing
// decides on it.
package timeline

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
)

// Phases, in the order a takeover passes through them.
const (
	PhaseDetect  = "detect"  // the former primary's last contact until the campaign began
	PhaseRelease = "release" // the former primary released (a handover)
	PhaseElect   = "elect"   // the campaign until the epoch was asked for
	PhaseFence   = "fence"   // a fence of a node that may still run the storage, to its read-back
	PhaseConfirm = "confirm" // from the grant or the fence until the holder before is confirmed stopped and the start committed
	PhaseStart   = "start"   // the resources starting, until the primary serves
)

// Phase is one bar of a failover.
type Phase struct {
	Name string `json:"name"`
	// Node is the node the phase concerns: the former primary (detect,
	// release), the one fenced or confirmed (fence), else the new primary.
	Node  string    `json:"node"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Open: still under way (End is the time the timeline was built).
	Open   bool   `json:"open,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Marks are moments within it (a read-back that confirmed a fence).
	Marks []Mark `json:"marks,omitempty"`
}

// Mark is a moment within a phase.
type Mark struct {
	Label string    `json:"label"`
	At    time.Time `json:"at"`
}

// Outcomes of a failover.
const (
	OutcomeServing    = "serving"     // the new primary served
	OutcomeInProgress = "in progress" // not serving yet
	OutcomeBlocked    = "blocked"     // every fence path failed; retrying
	OutcomeEnded      = "ended"       // the tenure ended before it served
)

// Failover is one grant of primacy and the takeover it started.
type Failover struct {
	Epoch uint64 `json:"epoch"`
	// From is the holder before ("" = none: the first grant); To the
	// new primary.
	From string `json:"from,omitempty"`
	To   string `json:"to"`
	// Start is the first phase's start: the phases' offsets count from
	// it. Granted is the grant, Serving when the new primary began to
	// serve (zero: it did not).
	Start   time.Time `json:"start"`
	Granted time.Time `json:"granted"`
	Serving time.Time `json:"serving,omitzero"`
	Outcome string    `json:"outcome"`
	// Reason says how the holder before left, and why the tenure ended
	// if it ended before serving.
	Reason string  `json:"reason,omitempty"`
	Phases []Phase `json:"phases"`
}

// End is the last phase's end.
func (f Failover) End() time.Time {
	end := f.Start
	for _, p := range f.Phases {
		if p.End.After(end) {
			end = p.End
		}
	}
	return end
}

// Offset is t's offset from the failover's start.
func (f Failover) Offset(t time.Time) time.Duration { return t.Sub(f.Start) }

// Build reads the failovers out of history (oldest first, as the state
// machine keeps it) and returns the newest last of them (all for last
// <= 0), oldest first. now ends the phases still under way.
func Build(history []fencing.Record, now time.Time, last int) []Failover {
	var out []Failover
	prevGrant := time.Time{}
	for i, r := range history {
		if r.Kind != fencing.KindPrimacy {
			continue
		}
		out = append(out, build(history, i, prevGrant, now))
		prevGrant = r.Started
	}
	if last > 0 && len(out) > last {
		out = out[len(out)-last:]
	}
	return out
}

// build is the failover of history[at], a primacy record; since is the
// grant before it (zero: none), before which nothing belongs to it.
func build(history []fencing.Record, at int, since, now time.Time) Failover {
	p := history[at]
	f := Failover{Epoch: p.Epoch, From: p.Previous, To: p.Target, Granted: p.Started, Reason: p.Reason}
	if f.From == f.To {
		f.From = ""
	}
	// The election that made the new primary leader: its newest before
	// the grant, and after the grant before it.
	var elect *fencing.Record
	for i := at - 1; i >= 0; i-- {
		r := &history[i]
		if r.Kind == fencing.KindPrimacy && r.Started.Before(since) {
			break
		}
		if r.Kind == fencing.KindElection && r.Target == p.Target && !r.Finished.After(p.Started.Add(time.Second)) && !r.Finished.Before(since) {
			elect = r
			break
		}
	}
	if elect != nil {
		campaign := elect.Started
		if campaign.Before(since) {
			// A folded re-election: its first campaign was long before.
			campaign = elect.Finished
		}
		if e := elect.Previous; e != "" && e != elect.Target && !elect.LastContact.IsZero() && !elect.LastContact.After(campaign) && campaign.Equal(elect.Started) {
			f.Phases = append(f.Phases, Phase{Name: PhaseDetect, Node: e, Start: elect.LastContact, End: campaign,
				Detail: fmt.Sprintf("%s last heard from %s; silent %s before the campaign", elect.Target, e, ms(campaign.Sub(elect.LastContact)))})
		}
		detail := fmt.Sprintf("won raft term %d", elect.Term)
		if elect.Runs > 1 {
			detail = fmt.Sprintf("re-elected in raft term %d", elect.Term)
		}
		f.Phases = append(f.Phases, Phase{Name: PhaseElect, Node: p.Target, Start: campaign, End: later(p.Started, campaign),
			Detail: detail + "; epoch asked for at the end"})
	}
	// What stopped the holder before, and whatever else may have run the
	// storage: the takeover's fences and the confirmations at this epoch
	// (an admin's fence is not a phase of it), a release since the grant
	// before.
	gate := p.Started
	var how []string
	for _, r := range history {
		switch {
		case r.Kind == fencing.KindRelease && p.Previous != "" && r.Target == p.Previous && !r.Started.Before(since) && !r.Started.After(p.Started):
			f.Phases = append(f.Phases, Phase{Name: PhaseRelease, Node: r.Target, Start: r.Started, End: later(r.Finished, r.Started),
				Detail: fmt.Sprintf("released epoch %d: %s", r.Epoch, r.Reason)})
			how = append(how, r.Target+" released")
		case r.Epoch != p.Epoch || r.Started.Before(p.Started.Add(-time.Second)):
		case r.Kind == fencing.KindFence && r.Action != fencing.ActionOn && strings.HasSuffix(r.RequestedBy, "(takeover)"):
			ph := Phase{Name: PhaseFence, Node: r.Target, Start: r.Started, End: r.Finished, Detail: fenceDetail(r)}
			if r.Finished.IsZero() || r.Outcome == fencing.OutcomePending {
				ph.End, ph.Open = later(now, r.Started), true
			}
			if r.Outcome == fencing.OutcomeSuccess {
				ph.Marks = append(ph.Marks, Mark{Label: "read back off", At: readBackAt(r)})
				how = append(how, r.Target+" fenced")
			}
			f.Phases = append(f.Phases, ph)
			gate = later(ph.End, gate)
		case r.Kind == fencing.KindConfirm || r.Kind == fencing.KindExpiry || r.Kind == fencing.KindWatchdog:
			if r.Outcome == fencing.OutcomeSuccess {
				how = append(how, fmt.Sprintf("%s: %s", r.Target, confirmWord(r.Kind)))
				gate = later(r.Finished, gate)
			}
		}
	}
	// The new primary's own steps: the mount intent, serving, an end.
	var mounting, serving, ended *fencing.Step
	blocked := false
	for i := range p.Steps {
		s := &p.Steps[i]
		switch s.Phase {
		case "mounting":
			mounting = s
		case "serving":
			serving = s
		case "blocked":
			blocked = true
		case "demoting", "releasing", "secondary", "stopped", "self-fenced":
			if ended == nil {
				ended = s
			}
		}
	}
	confirmEnd := now
	switch {
	case mounting != nil:
		confirmEnd = mounting.At
	case serving != nil:
		confirmEnd = serving.At
	case ended != nil:
		confirmEnd = ended.At
	}
	detail := "nothing to wait for"
	if len(how) > 0 {
		detail = strings.Join(how, "; ")
	}
	if f.From != "" || len(how) > 0 {
		f.Phases = append(f.Phases, Phase{Name: PhaseConfirm, Node: p.Target, Start: gate, End: later(confirmEnd, gate),
			Open: mounting == nil && serving == nil && ended == nil, Detail: detail + "; then the start committed"})
	}
	if mounting != nil {
		ph := Phase{Name: PhaseStart, Node: p.Target, Start: mounting.At, Detail: "resources starting with epoch " + fmt.Sprint(p.Epoch)}
		switch {
		case serving != nil:
			ph.End, ph.Detail = later(serving.At, mounting.At), fmt.Sprintf("resources started with epoch %d: serving", p.Epoch)
		case ended != nil:
			ph.End, ph.Detail = later(ended.At, mounting.At), "ended before serving: "+ended.Reason
		default:
			ph.End, ph.Open = later(now, mounting.At), true
		}
		f.Phases = append(f.Phases, ph)
	}
	switch {
	case serving != nil:
		f.Outcome, f.Serving = OutcomeServing, serving.At
	case ended != nil:
		f.Outcome = OutcomeEnded
		f.Reason = strings.TrimSuffix(f.Reason+"; ended before serving: "+ended.Reason, ": ")
	case blocked:
		f.Outcome = OutcomeBlocked
	default:
		f.Outcome = OutcomeInProgress
	}
	f.Start = p.Started
	for _, ph := range f.Phases {
		if ph.Start.Before(f.Start) {
			f.Start = ph.Start
		}
	}
	slices.SortStableFunc(f.Phases, func(a, b Phase) int { return a.Start.Compare(b.Start) })
	return f
}

// readBackAt is when the read-back that confirmed fence r came: the end of
// its successful off (of the newest run: an earlier run's attempts are
// gone), else the record's end.
func readBackAt(r fencing.Record) time.Time {
	if r.Runs <= 1 {
		for _, a := range slices.Backward(r.Attempts) {
			if a.Result == fencing.ResultSuccess && a.Action != fencing.ActionOn {
				if at := r.Started.Add(a.Start + a.Duration); !at.After(r.Finished) {
					return at
				}
				break
			}
		}
	}
	return r.Finished
}

func fenceDetail(r fencing.Record) string {
	var devs []string
	for _, a := range r.Attempts {
		if d := a.Device + " " + a.Result; !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	s := fmt.Sprintf("%s of %s by %s: %s", r.Action, r.Target, r.Executor, r.Outcome)
	if len(devs) > 0 {
		s += " (" + strings.Join(devs, ", ") + ")"
	}
	if r.Runs > 1 {
		s += fmt.Sprintf(", %d runs", r.Runs)
	}
	if r.Error != "" && r.Outcome != fencing.OutcomeSuccess {
		s += ": " + r.Error
	}
	return s
}

func confirmWord(kind string) string {
	switch kind {
	case fencing.KindConfirm:
		return "confirmed down by an admin"
	case fencing.KindExpiry:
		return "lease certainly over (the storage checks tokens)"
	}
	return "its watchdog has reset it"
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ms writes d in milliseconds ("1502 ms").
func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
