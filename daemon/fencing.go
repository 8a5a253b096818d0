package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/unfence"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// topology turns a node's configured fence levels into the engine's form.
func topology(cfg *config.Config, node string) stonith.Topology {
	n, ok := cfg.NodeByName(node)
	if !ok {
		return nil
	}
	var topo stonith.Topology
	for _, l := range n.Fence {
		if l.Watchdog {
			continue // not a device level: the tenure waits it out (see tenure.Machine.expiry)
		}
		var lvl stonith.Level
		for _, ref := range l.Devices {
			dev := cfg.Devices[ref.Device]
			timeout := dev.Timeout.D()
			if timeout <= 0 {
				timeout = cfg.Timing.FenceTimeout.D()
			}
			lvl.Devices = append(lvl.Devices, stonith.Target{
				Device: ref.Device, Agent: dev.Agent, Plug: ref.Plug,
				Params: cfg.Params(ref), Timeout: timeout, Retries: dev.Retries,
			})
		}
		topo = append(topo, lvl)
	}
	return topo
}

// markStorageLevels marks each level of topo whose every device cuts only
// the node's access to the storage, not its power: fabric zoning (agent
// san) and the devices a node unfences itself at start (SCSI-3
// reservations: fence_scsi, fence_mpath; unfence: on_start). A fence
// confirmed by such a level stops nothing of the group that does not use
// the storage.
func markStorageLevels(cfg *config.Config, reg *agents.Registry, topo stonith.Topology) {
	for i := range topo {
		storage := len(topo[i].Devices) > 0
		for _, t := range topo[i].Devices {
			if t.Agent == "san" {
				continue
			}
			self, err := unfence.Wants(reg, t, cfg.Devices[t.Device].Unfence)
			storage = storage && err == nil && self
		}
		topo[i].Storage = storage
	}
}

// Warnings are cfg's warnings (config.Config.Warnings) and those that need
// the agents to tell which devices cut only a node's storage: a node whose
// every fence level does, and that has no watchdog level, is stopped by no
// fence if its stop fails and it cannot reset itself, and a fence of it
// leaves running what of the group does not use the storage.
func Warnings(cfg *config.Config, reg *agents.Registry) config.Problems {
	ws := cfg.Warnings()
	ws = append(ws, secretModeWarnings(cfg)...)
	holds := cfg.Storage.StorageSet() || len(cfg.Resources) > 0
	for i, n := range cfg.Nodes {
		topo := topology(cfg, n.Name)
		if !holds || n.Witness() || len(topo) == 0 || len(n.Fence) > 0 && n.Fence[len(n.Fence)-1].Watchdog {
			continue
		}
		markStorageLevels(cfg, reg, topo)
		if slices.ContainsFunc(topo, func(l stonith.Level) bool { return !l.Storage }) {
			continue
		}
		p := fmt.Sprintf("nodes[%d].fence", i)
		msg := fmt.Sprintf("warning: every fence level of %s cuts only its storage, and it has no watchdog level: if its stop fails and it cannot reset itself, "+
			"no fence stops it (a takeover blocks until `fencectl confirm`)", n.Name)
		if un := cfg.Unchecked(); len(un) > 0 && len(cfg.Resources) > 0 {
			msg += fmt.Sprintf("; and a fence of it leaves running what of the group does not use the storage (resources %s)", strings.Join(un, ", "))
		}
		ws = append(ws, cfg.Problem(p, "%s", msg))
	}
	return ws
}

// Forwarded admin methods.
const (
	fwdFence    = "fence"
	fwdUnfence  = "unfence"
	fwdConfirm  = "confirm"
	fwdStandby  = "standby"
	fwdTransfer = "transfer"
)

var errNotLeader = errors.New("this node does not lead the cluster")

// admin runs an admin request on the leader, forwarding it there if this
// node is not the leader. The answer is a fencing.Record for fence,
// unfence and confirm.
func (d *Daemon) admin(ctx context.Context, method string, req AdminRequest) (json.RawMessage, error) {
	if _, ok := d.cfg.NodeByName(req.Node); !ok && !(method == fwdTransfer && req.Node == "") {
		return nil, &userError{fmt.Errorf("unknown node %q", req.Node)}
	}
	for try := 0; ; try++ {
		var (
			out json.RawMessage
			err error
		)
		if d.raft.IsLeader() {
			out, err = d.adminLocal(ctx, method, req)
		} else if leader := d.raft.Leader(); leader == "" {
			err = errNoLeader
		} else {
			body, _ := json.Marshal(req)
			if out, err = d.members.Call(ctx, leader, method, body); err == nil {
				d.catchUp(ctx)
			}
		}
		// A request about the leader itself (fence or confirm) makes it
		// hand leadership on; retry with the next leader.
		if err != nil && isRetry(err) && try < 5 && ctx.Err() == nil {
			sleepCtx(ctx, d.cfg.Timing.Lease.D()/2)
			continue
		}
		return out, err
	}
}

// catchUp waits, at most a commit timeout, until this node has applied
// what the leader had committed once it answered: an admin's request that
// a follower forwarded is then in the follower's own history and status
// when its answer is printed (`fencectl fence`, then `fencectl history`,
// on a follower showed the fence still pending).
func (d *Daemon) catchUp(ctx context.Context) {
	target := d.leaderCommit()
	deadline := time.Now().Add(d.commitTimeout())
	for target > 0 && d.raft.AppliedIndex() < target && time.Now().Before(deadline) {
		select {
		case <-d.raft.FSM().Changed():
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

const retryMarker = "retry: "

// isRetry reports an error that a later leader may not have. Errors from
// a forwarded request arrive as text, so the text is matched as well.
func isRetry(err error) bool {
	msg := err.Error()
	return errors.Is(err, errNoLeader) || errors.Is(err, errNotLeader) || strings.HasPrefix(msg, retryMarker) ||
		strings.Contains(msg, errNoLeader.Error()) || strings.Contains(msg, errNotLeader.Error())
}

// userError marks a request that is wrong rather than failed.
type userError struct{ err error }

func (e *userError) Error() string { return e.err.Error() }
func (e *userError) Unwrap() error { return e.err }

func (d *Daemon) adminLocal(ctx context.Context, method string, req AdminRequest) (json.RawMessage, error) {
	if !d.raft.IsLeader() {
		return nil, errNotLeader
	}
	switch method {
	case fwdFence, fwdUnfence:
		if req.Node == d.self {
			// Only the leader fences, and it cannot confirm its own
			// power-off: hand leadership on and let the next leader do it.
			d.handOff("")
			return nil, fmt.Errorf("%s%s leads the cluster; handing leadership on", retryMarker, d.self)
		}
		action := fencing.ActionOff
		switch {
		case method == fwdUnfence:
			action = fencing.ActionOn
		case req.Action == fencing.ActionReboot:
			action = fencing.ActionReboot
		case req.Action != "" && req.Action != fencing.ActionOff:
			return nil, &userError{fmt.Errorf("action %q: want off or reboot", req.Action)}
		}
		if len(topology(d.config(), req.Node)) == 0 {
			return nil, &userError{fmt.Errorf("node %s has no fence devices configured", req.Node)}
		}
		// The fence outlives the request: an admin's Ctrl-C (or a lost
		// connection) detaches from it, and a fence cut off half-way
		// would leave the node in a state nobody asked for.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adminTimeout)
		defer cancel()
		rec := d.runFence(fctx, driver.FenceRequest{Target: req.Node, Action: action, Reason: req.Reason, RequestedBy: req.RequestedBy})
		return json.Marshal(rec)
	case fwdConfirm:
		for _, m := range d.members.Members() {
			if m.Name == req.Node && m.State == "alive" {
				return nil, &userError{fmt.Errorf("%s is alive in the cluster's gossip: confirm is only for nodes that are down", req.Node)}
			}
		}
		now := time.Now()
		rec := fencing.Record{Kind: fencing.KindConfirm, Target: req.Node, Reason: req.Reason, RequestedBy: req.RequestedBy,
			Executor: d.self, Epoch: d.raft.FSM().State().Epoch, Started: now, Finished: now, Outcome: fencing.OutcomeSuccess}
		res, err := d.raft.Apply(quorum.Command{Op: quorum.OpRecord, Record: &rec}, d.commitTimeout())
		if err != nil {
			return nil, err
		}
		rec.ID = res.(uint64)
		d.log.Warn("MANUAL CONFIRMATION: node recorded as down without a fence", "target", req.Node, "by", req.RequestedBy, "fence_id", rec.ID)
		return json.Marshal(rec)
	case fwdStandby:
		if _, err := d.raft.Apply(quorum.Command{Op: quorum.OpStandby, Node: req.Node, Flag: req.Flag}, d.commitTimeout()); err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"node": req.Node, "standby": req.Flag})
	case fwdTransfer:
		if req.Node == d.self {
			return nil, &userError{fmt.Errorf("%s is already the primary-elect", req.Node)}
		}
		if err := d.transferRefusal(req.Node); err != nil {
			return nil, err
		}
		d.handOff(req.Node)
		return json.Marshal(map[string]any{"from": d.self, "to": req.Node})
	}
	return nil, fmt.Errorf("unknown admin method %q", method)
}

func sleepCtx(ctx context.Context, dur time.Duration) {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
