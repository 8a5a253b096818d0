package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/health"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// A leader whose own path to a target's fence devices is broken hands the
// power-off to a peer whose checks find one (package driver, "Handing a
// fence to a peer"). These are the two requests that takes, over gossip's
// authenticated calls, and the peer's side of them.
const (
	fwdFencePath = "fence-path" // "what do your device checks find of X's fence path?"
	fwdFenceRun  = "fence-run"  // "run this power-off of X, which I lead, and send me its record"
)

type fencePathReq struct {
	Target string `json:"target"`
}

type fencePathResp struct {
	Path string `json:"path"`
}

type fenceRunReq struct {
	Request driver.FenceRequest `json:"request"`
}

// engineRequest is the fencing engine's form of a driver's request, with
// the target's topology as this node's configuration has it.
func (d *Daemon) engineRequest(fr driver.FenceRequest) stonith.Request {
	cfg := d.config()
	req := stonith.Request{Target: fr.Target, Action: fr.Action, Reason: fr.Reason, RequestedBy: fr.RequestedBy, Executor: fr.Executor,
		Epoch: fr.Epoch, ID: fr.ID, Levels: fr.Levels, PowerOnly: fr.PowerOnly, TargetBoot: fr.TargetBoot, Topology: topology(cfg, fr.Target)}
	markStorageLevels(cfg, d.registry(), req.Topology)
	return req
}

// fencePathTo is what this node's device checks find of target's fence
// path (health.Path). A node never fences itself: its own path is none.
func (d *Daemon) fencePathTo(target string) string {
	n, ok := d.config().NodeByName(target)
	if !ok || target == d.self {
		return health.PathNone
	}
	levels := make([][]string, len(n.Fence))
	for i, l := range n.Fence {
		for _, ref := range l.Devices {
			levels[i] = append(levels[i], ref.Device)
		}
	}
	switch p := health.Path(levels, d.fence.health.Get); p {
	case health.PathWorking:
		return driver.PathWorking
	case health.PathFailing:
		return driver.PathFailing
	default:
		return p
	}
}

// fenceBound is the longest a power-off of target can run through this
// node's engine: every try of every device of every level, one after the
// other, with the pauses between tries.
func (d *Daemon) fenceBound(target string) time.Duration {
	var bound time.Duration
	for _, lvl := range topology(d.config(), target) {
		for _, t := range lvl.Devices {
			timeout := t.Timeout
			if timeout <= 0 {
				timeout = d.fence.engine.DefaultTimeout
			}
			retries := max(t.Retries, 0)
			bound += time.Duration(1+retries)*timeout + time.Duration(retries)*8*d.fence.engine.RetryDelay
		}
	}
	return bound
}

// delegateMargin is what a leader waits for a peer's fence beyond the
// fence's own bound: the calls there and back, and a peer slow to start.
func (d *Daemon) delegateMargin() time.Duration { return max(d.cfg.Timing.Lease.D(), 2*time.Second) }

// answerFencePath answers a leader's fwdFencePath.
func (d *Daemon) answerFencePath(body []byte) ([]byte, error) {
	var req fencePathReq
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	return json.Marshal(fencePathResp{Path: d.fencePathTo(req.Target)})
}

// errDelegate is a refused fwdFenceRun.
var errDelegate = errors.New("fence refused")

// answerFenceRun runs a power-off the leader, from, hands this node, and
// answers its record. Refused: anything but a power-off, a fence of this
// node itself, a request not addressed to this node, from a node this one
// does not know as the leader, or at an epoch below the one this node
// knows (an old leader's). It commits nothing: the leader does.
func (d *Daemon) answerFenceRun(ctx context.Context, from string, body []byte) ([]byte, error) {
	var rr fenceRunReq
	if err := json.Unmarshal(body, &rr); err != nil {
		return nil, fmt.Errorf("fence handed on by %s: %w", from, err)
	}
	req := rr.Request
	refuse := func(format string, args ...any) ([]byte, error) {
		err := fmt.Errorf("%w: %s asked %s to %s %s: %s", errDelegate, from, d.self, req.Action, req.Target, fmt.Sprintf(format, args...))
		d.log.Warn("fence handed on refused", "from", from, "target", req.Target, "fence_id", req.ID, "epoch", req.Epoch, "err", err)
		return nil, err
	}
	if why := fenceRunRefusal(req, from, d.self, d.raft.Leader(), d.raft.FSM().HoldersOf(req.Group)); why != "" {
		return refuse("%s", why)
	}
	sreq := d.engineRequest(req)
	if len(sreq.Topology) == 0 {
		return refuse("%s has no fence devices in this node's configuration", req.Target)
	}
	d.log.Warn("fencing for the leader, which cannot reach the devices itself", "leader", from, "target", req.Target,
		"fence_id", req.ID, "epoch", req.Epoch)
	fctx, cancel := context.WithTimeout(ctx, d.fenceBound(req.Target))
	defer cancel()
	go d.cancelOnceConfirmed(fctx, cancel, req)
	return json.Marshal(d.fence.engine.Fence(fctx, sreq))
}

// cancelOnceConfirmed ends a fence handed on here (cancel) once the node
// it was asked for no longer needs one: listed as maybe running its group
// (or as a former holder) when it began, and listed no more — an admin
// confirmed it down, it released. The leader's own wait is cancelled then
// too (its takeover goes on), but only this node can stop the run: left
// going, its next try powers off a node that may have been brought back
// (the nemesis saw it). A fence of a node not listed when it began (an
// admin's `fencectl fence`) runs to its end.
func (d *Daemon) cancelOnceConfirmed(ctx context.Context, cancel context.CancelFunc, req driver.FenceRequest) {
	if watchConfirmed(ctx, d.raft.FSM(), req) {
		d.log.Warn("fence handed on here cancelled: its target is confirmed stopped meanwhile", "target", req.Target,
			"fence_id", req.ID, "epoch", req.Epoch)
		cancel()
	}
}

// replicated is what watchConfirmed reads of the state machine
// (*quorum.FSM).
type replicated interface {
	Changed() <-chan struct{}
	HoldersOf(group string) quorum.Holders
}

// watchConfirmed waits until req's target, listed for req's group when it
// is called, is listed no more (true), or ctx ends (false); false at once
// if it is not listed.
func watchConfirmed(ctx context.Context, fsm replicated, req driver.FenceRequest) bool {
	changed := fsm.Changed() // before looking: no change missed
	if !fsm.HoldersOf(req.Group).Lists(req.Target) {
		return false
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
		changed = fsm.Changed()
		if !fsm.HoldersOf(req.Group).Lists(req.Target) {
			return true
		}
	}
}

// fenceRunRefusal says why node self refuses to run req, a fence handed on
// by from ("" = it runs it): only a power-off of another node, named to
// run here, recorded, asked by the raft leader (leader, as this node
// knows it) — or, for a group other than the default one, by that
// group's holder at the request's epoch (group: the group's state as
// applied here) — and at an epoch no older than the group's.
func fenceRunRefusal(req driver.FenceRequest, from, self, leader string, group quorum.Holders) string {
	named := req.Group != "" && req.Group != quorum.DefaultGroup
	holder := named && group.Holder == from && group.Epoch == req.Epoch
	switch {
	case req.Action != fencing.ActionOff:
		return "only a power-off is run for another node"
	case req.Target == self:
		return "a node never fences itself"
	case req.Executor != self:
		return fmt.Sprintf("the request names %s to run it", req.Executor)
	case leader != from && !holder:
		if named {
			return fmt.Sprintf("%s neither leads the cluster as this node knows it (leader: %q) nor holds group %s at epoch %d (holder: %q at %d)",
				from, leader, req.Group, req.Epoch, group.Holder, group.Epoch)
		}
		return fmt.Sprintf("%s does not lead the cluster as this node knows it (leader: %q)", from, leader)
	case req.Epoch < group.Epoch:
		return fmt.Sprintf("its epoch %d is below epoch %d, which this node knows", req.Epoch, group.Epoch)
	case req.ID == 0:
		return "the request was not recorded"
	}
	return ""
}

// Fence hands req to req.Executor (gossipPeers is the driver's Peers) and
// waits for its record, at most the fence's bound and a margin.
func (p gossipPeers) Fence(s *driver.Scope, req driver.FenceRequest, done func(fencing.Record, error)) {
	d := p.d
	body, _ := json.Marshal(fenceRunReq{Request: req})
	parent := s.Context()
	d.async(func() func() {
		ctx, cancel := context.WithTimeout(parent, d.fenceBound(req.Target)+d.delegateMargin())
		defer cancel()
		out, err := d.members.Call(ctx, req.Executor, fwdFenceRun, body)
		var rec fencing.Record
		if err == nil {
			err = json.Unmarshal(out, &rec)
		}
		if err == nil && len(rec.Attempts) > maxForwardedAttempts {
			err = fmt.Errorf("its record has %d attempts, more than %d", len(rec.Attempts), maxForwardedAttempts)
		}
		if err != nil {
			return func() { done(fencing.Record{}, err) }
		}
		rec.Error = boundText(rec.Error, maxForwardedText)
		for i := range rec.Attempts {
			a := &rec.Attempts[i]
			a.Error, a.Stderr = boundText(a.Error, maxForwardedText), boundText(a.Stderr, maxForwardedText)
		}
		return func() { done(rec, nil) }
	})
}

// FencePath asks node what its checks find of target's fence path.
func (p gossipPeers) FencePath(ctx context.Context, node, target string, done func(string, bool)) {
	d := p.d
	body, _ := json.Marshal(fencePathReq{Target: target})
	d.async(func() func() {
		out, err := d.members.Call(ctx, node, fwdFencePath, body)
		var resp fencePathResp
		if err != nil || json.Unmarshal(out, &resp) != nil {
			return func() { done("", false) }
		}
		return func() { done(api.CleanText(resp.Path), true) }
	})
}

// Rank lists the other nodes in rank order after this one.
func (p gossipPeers) Rank() []string {
	d := p.d
	return rankOrder(d.config(), d.raft.FSM().Holders().Standby, d.self)
}
