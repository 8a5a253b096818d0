package daemon

import (
	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/unfence"
	"github.com/fenced/fenced/stonith"
)

// newUnfencer sets up this node's unfencing at start (package unfence): the
// devices of its own topology that need "on" from the node itself. The
// driver runs it (driver.Start).
// It fences with engine; epoch is the highest epoch the node knows.
func newUnfencer(cfg *config.Config, reg *agents.Registry, engine *stonith.Engine, epoch func() uint64) *unfence.Unfencer {
	modes := map[string]string{}
	for name, dev := range cfg.Devices {
		modes[name] = dev.Unfence
	}
	return unfence.New(unfence.Options{
		Self: cfg.Node, Topology: topology(cfg, cfg.Node), Modes: modes, Registry: reg,
		Fence: engine.Fence, Epoch: epoch,
	})
}

// unfencePlan is what the driver needs to know of the unfencer.
func unfencePlan(u *unfence.Unfencer) *driver.UnfencePlan {
	p := &driver.UnfencePlan{Devices: u.Devices()}
	if err := u.Err(); err != nil {
		p.Err = err.Error()
	}
	return p
}
