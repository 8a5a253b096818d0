package driver

import (
	"fmt"
	"strings"
	"time"

	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
)

// What a node does when its daemon starts, before it may take primacy: it
// probes for resources of the group left running here (a mount or an
// address that a crashed daemon, or a machine that rebooted into a stale
// state, left behind) and stops them; and it unfences itself through the
// devices of its own topology that need "on" from the node itself (SCSI-3
// reservations: fence_scsi, fence_mpath; or devices with unfence:
// on_start). Until each has succeeded, the node is ineligible for primacy
// (its reason under the source names below).

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
)

// Start begins the start-up work: the probe and the unfence. Call it once,
// before the first Step, so that the node is ineligible from that step on.
func (d *Driver) Start() {
	if d.cfg.Probe {
		d.env.Observer.Ineligible(SourceProbe, "probing for resources left running here")
		d.probe(startMinBackoff)
	}
	if p := d.cfg.Unfence; p.needed() {
		if p.Err != "" {
			d.env.Observer.Ineligible(SourceUnfence, "cannot tell which devices to unfence: "+p.Err)
		} else {
			d.env.Observer.Ineligible(SourceUnfence, "not unfenced yet: waiting for a cluster leader (devices "+strings.Join(p.Devices, ", ")+")")
		}
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
// a mount left on a rebooted node must not run twice).
func (d *Driver) probe(backoff time.Duration) {
	d.env.Effects.Probe(d.life(), func(err error) {
		if err == nil {
			d.env.Observer.Ineligible(SourceProbe, "")
			d.lg.Info("resources probed: none runs here")
			return
		}
		d.env.Observer.Ineligible(SourceProbe, err.Error())
		d.lg.Warn("resources left running here could not be stopped: not eligible for primacy", "err", err, "retry_in", backoff)
		d.env.Clock.After(backoff, func() { d.probe(min(backoff*2, startMaxBackoff)) })
	})
}

// unfence unfences this node, retrying until it succeeds. It first waits
// until it knows a cluster leader: a node cut off from the cluster, which
// the others may have fenced for exactly that reason, does not undo that
// fence on its own. The result is recorded in the replicated history
// through the leader: the first attempt, and the success that ends a run
// of failures, so a device broken for days does not flood the history.
func (d *Driver) unfence(try, failed int, delay time.Duration) {
	if d.life().Cancelled() {
		return
	}
	if d.env.Log.Leader() == "" {
		d.env.Clock.After(joinPoll, func() { d.unfence(try, failed, delay) })
		return
	}
	d.env.Effects.Unfence(d.life(), func(rec stonith.Record, ok bool) {
		if ok {
			d.env.Observer.Ineligible(SourceUnfence, "")
			d.lg.Info("unfenced at start: eligible for primacy", "devices", strings.Join(d.cfg.Unfence.Devices, ","), "tries", try)
			d.commitUnfence(rec, 0)
			return
		}
		d.env.Observer.Ineligible(SourceUnfence, fmt.Sprintf("unfencing this node failed (try %d, next in %s): %s", try, delay, rec.Error))
		d.lg.Error("unfence at start failed: not eligible for primacy", "try", try, "retry_in", delay, "err", rec.Error)
		if failed == 0 && rec.Kind != "" {
			d.commitUnfence(rec, 0)
		}
		d.env.Clock.After(delay, func() { d.unfence(try+1, failed+1, min(2*delay, startMaxBackoff)) })
	})
}

// commitUnfence records this node's unfencing of itself through the
// leader, trying a few times (a leader may be changing); the node's
// eligibility does not wait for it.
func (d *Driver) commitUnfence(rec stonith.Record, try int) {
	if rec.Kind == "" {
		return
	}
	rec.ID = 0
	d.env.Peers.Forward(quorum.Command{Op: quorum.OpRecord, Record: &rec}, func(err error) {
		if err == nil {
			return
		}
		if try >= 9 {
			d.lg.Warn("unfence at start not recorded in the history", "outcome", rec.Outcome, "err", err)
			return
		}
		d.env.Clock.After(time.Second, func() { d.commitUnfence(rec, try+1) })
	})
}
