package driver

import (
	"fmt"
	"strings"
	"time"

	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// What a node does when its daemon starts, before it may take primacy:
//
//  1. It probes for resources of the group left running here (a mount or
//     an address that a crashed daemon, or a stop that failed, left
//     behind) and stops them. If one cannot be stopped, the node says so
//     in the replicated state (unclean: it may run the group), so that the
//     leader fences it through a level that removes its power, and keeps
//     probing. (A listing of the node as maybe running the group stays as
//     it is: only a fence, or an admin's confirmation, clears it. The probe
//     sees what the group knows of; a fence stops everything.)
//  2. Then, and only then, it unfences itself through the devices of its
//     own topology that need "on" from the node itself (SCSI-3
//     reservations: fence_scsi, fence_mpath; or devices with unfence:
//     on_start) — once it knows a cluster leader (a node cut off from the
//     cluster, which the others may have fenced for exactly that reason,
//     does not undo that fence on its own), and only if it was not fenced
//     during this boot, or an admin consented (unfenceRule).
//
// Until both have succeeded, the node is ineligible for primacy (its reason
// under the source names below).

// Eligibility sources the driver sets (see Observer.Ineligible).
const (
	SourceProbe   = "resources"
	SourceUnfence = "unfence"
)

// UnfencePlan is what this node unfences at start.
type UnfencePlan struct {
	// Devices are the devices of its own topology that it unfences itself.
	Devices []string
	// Err, when set, says why the devices could not be chosen; each
	// attempt chooses again.
	Err string
}

func (p *UnfencePlan) needed() bool { return p != nil && (len(p.Devices) > 0 || p.Err != "") }

// Backoff of the start-up retries.
const (
	startMinBackoff = time.Second
	startMaxBackoff = 30 * time.Second
	joinPoll        = 100 * time.Millisecond
	// consentPoll is how often a node that may not unfence itself yet
	// looks for an admin's consent.
	consentPoll = time.Second
	// forwardTries bounds the attempts to have the leader commit one of
	// this node's own records (a leader may be changing).
	forwardTries = 10
)

// Start begins the start-up work: the probe, then the unfence. Call it
// once, before the first Step, so that the node is ineligible from that
// step on.
func (d *Driver) Start() {
	unfence := d.cfg.Unfence.needed()
	if unfence {
		if p := d.cfg.Unfence; p.Err != "" {
			d.setIneligible(SourceUnfence, "cannot tell which devices to unfence: "+p.Err)
		} else {
			d.setIneligible(SourceUnfence, "not unfenced yet: waiting for the probe and a cluster leader (devices "+strings.Join(p.Devices, ", ")+")")
		}
	}
	if d.cfg.Probe {
		d.setIneligible(SourceProbe, "probing for resources left running here")
		d.probe(startMinBackoff, false)
		return
	}
	if unfence {
		d.unfence(1, 0, startMinBackoff)
	}
}

// life is the scope of work that lasts as long as the driver.
func (d *Driver) life() *Scope {
	if d.lifeScope == nil {
		d.lifeScope = NewScope(d.base)
	}
	return d.lifeScope
}

// probe probes until nothing of the group runs here, retrying with backoff;
// until then the node stays ineligible for primacy (a floating address or
// a mount left on a rebooted node must not run twice), and the replicated
// state lists it as unclean (marked: that was asked once already).
func (d *Driver) probe(backoff time.Duration, marked bool) {
	if d.life().Cancelled() {
		return
	}
	d.env.Effects.Probe(d.life(), func(err error) {
		if err == nil {
			d.setIneligible(SourceProbe, "")
			d.lg.Info("resources probed: none runs here")
			if d.cfg.Unfence.needed() {
				d.unfence(1, 0, startMinBackoff)
			}
			return
		}
		d.setIneligible(SourceProbe, err.Error())
		d.lg.Error("resources left running here could not be stopped: not eligible for primacy; asking the leader to fence this node",
			"err", err, "retry_in", backoff)
		if _, listed := d.holders().Unclean[d.cfg.Machine.Self]; !marked || !listed {
			why := "the probe at start found resources of the group running here that it could not stop: " + err.Error()
			d.markUnclean(why, nil)
			// The probe covers every group of the node: what it could not
			// stop may be any group's.
			for _, g := range d.cfg.ProbeGroups {
				if g != d.cfg.Group {
					d.markUncleanIn(g, why, nil)
				}
			}
		}
		d.env.Clock.After(backoff, func() { d.probe(min(backoff*2, startMaxBackoff), true) })
	})
}

// markUnclean tells the cluster that something of the group may still run
// here that this node can neither stop nor reset itself away: it is listed
// as maybe running the group, and only a fence that removes its power, its
// own release or an admin's confirmation clears that. then, if set, runs
// once it is recorded or given up.
func (d *Driver) markUnclean(reason string, then func()) { d.markUncleanIn(d.cfg.Group, reason, then) }

// markUncleanIn is markUnclean in group g.
func (d *Driver) markUncleanIn(g, reason string, then func()) {
	self := d.cfg.Machine.Self
	d.lg.Error("this node may still run the group: asking the leader to fence it (power levels only)", "group", groupName(g), "reason", reason)
	d.forward(quorum.Command{Op: quorum.OpUnclean, Node: self, Group: g, Epoch: d.env.Log.Holders(g).Epoch, Reason: reason}, 0, func(err error) {
		if err != nil {
			d.lg.Error("could not tell the cluster that this node may still run the group", "err", err)
		}
		if then != nil {
			then()
		}
	})
}

// cannotReset: a self-fence found no way to reset the machine (no watchdog
// device, sysrq refused). The node is never released, so it stays listed
// as maybe running the group; it is marked unclean, so that only a level
// that removes its power (or an admin) confirms it stopped; then the
// daemon exits, and the probe of its next start tries the stop again.
func (d *Driver) cannotReset(reason string) {
	d.exiting = true
	d.markUnclean("its stop failed and it could not reset itself: "+reason, func() {
		d.env.Effects.Exit(reason)
	})
}

// forward has the leader commit c, one of this node's own commands,
// trying a few times (a leader may be changing).
func (d *Driver) forward(c quorum.Command, try int, done func(error)) {
	d.env.Peers.Forward(c, func(err error) {
		if err == nil || try+1 >= forwardTries {
			done(err)
			return
		}
		d.env.Clock.After(time.Second, func() { d.forward(c, try+1, done) })
	})
}

// unfence unfences this node, retrying until it succeeds. The result is
// recorded in the replicated history through the leader: the first
// attempt, and the success that ends a run of failures, so a device broken
// for days does not flood the history.
func (d *Driver) unfence(try, failed int, delay time.Duration) {
	if d.life().Cancelled() {
		return
	}
	if d.env.Log.Leader() == "" || !d.env.Log.Joined() {
		// The rule reads the history: the cluster's, not what this
		// node's log held when it stopped (the fence that cut it off was
		// committed after).
		d.env.Clock.After(joinPoll, func() { d.unfence(try, failed, delay) })
		return
	}
	if why := listedThisBoot(d.holders(), d.cfg.Machine.Self, d.cfg.Boot); why != "" {
		if d.setIneligible(SourceUnfence, why) {
			d.lg.Warn("not unfencing this node yet: it may still run the group from before its daemon restarted", "why", why)
		}
		d.env.Clock.After(consentPoll, func() { d.unfence(try, failed, delay) })
		return
	}
	if ok, why := unfenceRule(d.env.Log.History(), d.cfg.Machine.Self, d.cfg.Boot); !ok {
		if d.setIneligible(SourceUnfence, why) {
			d.lg.Error("not unfencing this node: it was fenced during this boot", "why", why)
		}
		d.env.Clock.After(consentPoll, func() { d.unfence(try, failed, delay) })
		return
	}
	d.env.Effects.Unfence(d.life(), func(rec fencing.Record, ok bool) {
		if ok {
			d.setIneligible(SourceUnfence, "")
			d.lg.Info("unfenced at start: eligible for primacy", "devices", strings.Join(d.cfg.Unfence.Devices, ","), "tries", try)
			d.commitUnfence(rec)
			return
		}
		d.setIneligible(SourceUnfence, fmt.Sprintf("unfencing this node failed (try %d, next in %s): %s", try, delay, rec.Error))
		d.lg.Error("unfence at start failed: not eligible for primacy", "try", try, "retry_in", delay, "err", rec.Error)
		if failed == 0 && rec.Kind != "" {
			d.commitUnfence(rec)
		}
		d.env.Clock.After(delay, func() { d.unfence(try+1, failed+1, min(2*delay, startMaxBackoff)) })
	})
}

// setIneligible sets a reason of the driver's own, reporting whether it
// changed.
func (d *Driver) setIneligible(source, reason string) bool {
	if d.reasons == nil {
		d.reasons = map[string]string{}
	}
	if d.reasons[source] == reason {
		return false
	}
	d.reasons[source] = reason
	d.env.Observer.Ineligible(source, reason)
	return true
}

// unfenceRule says whether node, in the boot boot, may unfence itself:
// its probe found nothing of the group running (the caller's to know), and
// its newest fence (a successful off) is from another boot, or an admin's
// unfence of it (fencectl unfence) came after that fence. A fence during
// this boot cut the node off from the storage while something of the group
// may still have run here — a mount its crashed daemon left, an
// application still writing: unfencing would give that back its storage.
// A fence whose target boot is not known counts as one of this boot.
func unfenceRule(history []fencing.Record, node, boot string) (bool, string) {
	var fence *fencing.Record
	consent := false
	for i := len(history) - 1; i >= 0 && fence == nil; i-- {
		r := &history[i]
		switch {
		case r.Target != node:
		case r.Kind == fencing.KindUnfence && r.RequestedBy != node+" (start)" && r.Outcome != fencing.OutcomePending:
			consent = true // an admin's, after every fence older than it
		case r.Kind == fencing.KindFence && r.Outcome == fencing.OutcomeSuccess && r.Action != fencing.ActionOn:
			fence = r
		}
	}
	switch {
	case fence == nil, consent:
		return true, ""
	case anotherBoot(fence.TargetBoot, boot):
		return true, ""
	}
	when := "during this boot"
	if fence.TargetBoot == "" || boot == "" {
		when = "and the boot it was in is not known"
	}
	return false, fmt.Sprintf("fenced by %s at %s (%s) %s: unfencing would give the storage back to whatever of the group still runs here; "+
		"reboot this node, or run `fencectl unfence %s` once nothing of the group runs here",
		dash(fence.Executor), fence.Finished.UTC().Format(time.RFC3339), dash(fence.Reason), when, node)
}

// listedThisBoot is why node, in the boot boot, may not unfence itself
// yet ("" if it may): the replicated state lists it as maybe running the
// group (a mount intent with neither a release nor a confirmed stop since)
// from this very boot, or a boot not known. Its daemon died holding the
// group, and what it left may include writers its probe cannot see. The
// takeover that follows fences it, and a fence is committed only once it
// has cut the node off: an unfence begun before that commit would land
// after the cut and undo it, while the new holder runs the group (the
// rule on fences during this boot, unfenceRule, reads only committed
// fences). So the node waits until the listing is cleared — by that fence
// (then unfenceRule keeps it fenced until a reboot or `fencectl unfence`),
// by a lease expiry on storage that checks tokens, by a watchdog reset or
// by `fencectl confirm` — and a listing from an earlier boot is no reason
// to wait: that boot, and everything it ran, is gone.
func listedThisBoot(h quorum.Holders, node, boot string) string {
	e, listed := h.Unconfirmed[node]
	if !listed {
		return ""
	}
	if anotherBoot(h.Boots[node], boot) {
		return ""
	}
	return fmt.Sprintf("listed as maybe running the group since its mount intent at epoch %d, in this boot: not unfencing until "+
		"the takeover fences it (then a reboot or `fencectl unfence %s`), or `fencectl confirm %s` once nothing of the group runs here", e, node, node)
}

// anotherBoot reports whether boot ID was known to be another boot than
// now (both known, and different): what that boot ran is gone.
func anotherBoot(was, now string) bool { return was != "" && now != "" && was != now }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// commitUnfence records this node's unfencing of itself through the
// leader; the node's eligibility does not wait for it.
func (d *Driver) commitUnfence(rec fencing.Record) {
	if rec.Kind == "" {
		return
	}
	rec.ID = 0
	d.forward(quorum.Command{Op: quorum.OpRecord, Record: &rec}, 0, func(err error) {
		if err != nil {
			d.lg.Warn("unfence at start not recorded in the history", "outcome", rec.Outcome, "err", err)
		}
	})
}
