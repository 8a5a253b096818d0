package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/fenced/fenced/stonith/fencing"
)

// Handing a fence to a peer. The leader fences, but its own path to the
// target's devices may be the broken one (a wrong password file on this
// node, a BMC network this node does not reach) while another node's
// checks of the same devices are green. A power-off is then run on such a
// peer, under this node's request: the same record ID, epoch, target,
// levels and reason, with the peer as executor. The peer runs it through
// its own fencing engine and reads the state back; it sends the record,
// attempts and read-backs included, and commits nothing. This node checks
// that the record answers its request and commits it like one of its own
// (Fence, commitResult): the peer's read-back is as good as this node's,
// the peer being an authenticated member of the cluster, and nothing acts
// on it before it is committed by the leader.
//
// Only power-offs are handed on: running one on another node can stop
// the target, never start anything; an unfence or a reboot always runs
// here. The target is never the executor.

// executor chooses where req runs: here, unless req is a power-off that
// this node's checks find no working path for (or whose last run here
// reached none of the target's devices), and a peer's own checks find one;
// then the first such peer in rank order. The fast path asks nobody: a
// path that works here, or that was never checked, is taken at once. With
// no peer's path working, or no answer within half a lease, the fence runs
// here anyway (a check can be wrong; a fence not tried certainly fails).
func (d *Driver) executor(s *Scope, req FenceRequest, done func(executor string)) {
	self := d.cfg.Machine.Self
	if req.Action != fencing.ActionOff {
		done(self)
		return
	}
	why := ""
	switch {
	case d.unreached[req.Target]:
		why = "its last fence here reached none of its devices"
	case d.env.Effects.FencePath(req.Target) == PathFailing:
		why = "this node's device checks find no working fence path to it"
	default:
		done(self)
		return
	}
	var order []string
	for _, n := range d.env.Peers.Rank() {
		if n != self && n != req.Target {
			order = append(order, n)
		}
	}
	if len(order) == 0 {
		done(self)
		return
	}
	lg := d.lg.With("target", req.Target, "epoch", req.Epoch)
	lg.Warn("asking the other nodes which of them can fence", "why", why)
	ctx, cancel := context.WithCancel(s.Context())
	answers := map[string]string{} // node → its path ("" = no answer)
	finished := false
	var stop func()
	finish := func(executor string) {
		if finished {
			return
		}
		finished = true
		cancel()
		if stop != nil {
			stop()
		}
		if executor == self {
			lg.Warn("no other node finds a working fence path either: fencing from here")
		} else {
			lg.Warn("fence handed to a node whose checks find a working path", "executor", executor)
		}
		done(executor)
	}
	// decide picks the first of order that answered working once every
	// node ranked before it answered otherwise (all: or never will).
	decide := func(all bool) {
		for _, n := range order {
			path, answered := answers[n]
			switch {
			case answered && path == PathWorking:
				finish(n)
				return
			case !answered && !all:
				return
			}
		}
		finish(self)
	}
	stop = d.env.Clock.After(d.cfg.Machine.Timing.Lease/2, func() { decide(true) })
	s.OnCancel(func() { finish(self) })
	for _, n := range order {
		d.env.Peers.FencePath(ctx, n, req.Target, func(path string, ok bool) {
			if finished {
				return
			}
			if !ok {
				path = ""
			}
			answers[n] = path
			decide(len(answers) == len(order))
		})
	}
}

// delegate runs req on req.Executor, a peer, and hands back its record, or
// a record of unknown outcome when none came back that answers req: the
// peer may have died mid-fence, and the fence may have run; the machine
// retries it (perhaps here, perhaps on another peer), as after any fence
// not confirmed.
func (d *Driver) delegate(s *Scope, req FenceRequest, done func(fencing.Record)) {
	started := d.env.Clock.Wall()
	d.env.Peers.Fence(s, req, func(rec fencing.Record, err error) {
		if err == nil {
			err = answers(req, rec)
		}
		if err != nil {
			d.lg.Error("fence handed to a peer: no result from it, outcome unknown", "target", req.Target, "executor", req.Executor,
				"fence_id", req.ID, "err", err)
			rec = fencing.Record{ID: req.ID, Kind: fencing.KindFence, Target: req.Target, Action: req.Action, Epoch: req.Epoch,
				Started: started, Finished: d.env.Clock.Wall(), Outcome: fencing.OutcomeUnknown,
				Error: fmt.Sprintf("handed to %s: %v", req.Executor, err)}
		}
		// What was asked is this node's to say, not the peer's.
		rec.Reason, rec.RequestedBy, rec.Executor = req.Reason, req.RequestedBy, req.Executor
		done(rec)
	})
}

// answers reports whether rec, from the node that ran req, is the record
// of req.
func answers(req FenceRequest, rec fencing.Record) error {
	if rec.ID != req.ID || rec.Kind != fencing.KindFence || rec.Target != req.Target || rec.Action != req.Action ||
		rec.Epoch != req.Epoch || rec.Executor != req.Executor {
		return fmt.Errorf("its record (fence %d: %s %s at epoch %d by %s) is not of the request (fence %d: %s %s at epoch %d by %s)",
			rec.ID, rec.Action, rec.Target, rec.Epoch, rec.Executor, req.ID, req.Action, req.Target, req.Epoch, req.Executor)
	}
	switch rec.Outcome {
	case fencing.OutcomeSuccess, fencing.OutcomeFailed, fencing.OutcomeUnknown:
		return nil
	}
	return errors.New("its record has no outcome (" + rec.Outcome + ")")
}

// ranFence remembers how a power-off went: one run here that reached no
// device of its target (refused credentials, no answer) sends the next to
// a peer; a confirmed one, wherever it ran, forgets that.
func (d *Driver) ranFence(req FenceRequest, rec fencing.Record) {
	if req.Action != fencing.ActionOff {
		return
	}
	switch {
	case rec.Outcome == fencing.OutcomeSuccess:
		delete(d.unreached, req.Target)
	case req.Executor == d.cfg.Machine.Self && len(rec.Attempts) > 0 && !readBackAny(rec):
		if d.unreached == nil {
			d.unreached = map[string]bool{}
		}
		d.unreached[req.Target] = true
	}
}

// readBackAny reports whether a device of rec read a power state back: it
// answered, and took the credentials.
func readBackAny(rec fencing.Record) bool {
	for _, a := range rec.Attempts {
		if a.ReadBack == "on" || a.ReadBack == "off" {
			return true
		}
	}
	return false
}
