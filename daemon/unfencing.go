package daemon

import (
	"context"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/unfence"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
)

// newUnfencer sets up this node's unfencing at start (package unfence): the
// devices of its own topology that need "on" from the node itself. When
// there are any, the node is ineligible from here on, before the control
// loop's first step, until Run has unfenced it.
func newUnfencer(d *Daemon) *unfence.Unfencer {
	reg := d.opts.Registry
	if reg == nil {
		reg = agents.Default
	}
	modes := map[string]string{}
	for name, dev := range d.cfg.Devices {
		modes[name] = dev.Unfence
	}
	return unfence.New(unfence.Options{
		Self: d.self, Topology: topology(d.cfg, d.self), Modes: modes, Registry: reg,
		Fence:         d.engine.Fence,
		SetIneligible: d.SetIneligible,
		Joined:        func() bool { return d.raft.Leader() != "" },
		Epoch:         d.KnownEpoch,
		Commit:        d.commitOwnUnfence,
		Logger:        d.log.With("component", "unfence"),
	})
}

// commitOwnUnfence records this node's unfencing of itself through the
// leader (see acceptForwarded).
func (d *Daemon) commitOwnUnfence(ctx context.Context, rec stonith.Record) error {
	ctx, cancel := context.WithTimeout(ctx, d.commitTimeout())
	defer cancel()
	rec.ID = 0
	return d.forwardCommand(ctx, quorum.Command{Op: quorum.OpRecord, Record: &rec})
}
