package daemon

import (
	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/unfence"
)

// newUnfencer sets up this node's unfencing at start (package unfence): the
// devices of its own topology that need "on" from the node itself. The
// driver runs it (driver.Start).
func newUnfencer(d *Daemon) *unfence.Unfencer {
	reg := d.registry()
	modes := map[string]string{}
	for name, dev := range d.cfg.Devices {
		modes[name] = dev.Unfence
	}
	return unfence.New(unfence.Options{
		Self: d.self, Topology: topology(d.cfg, d.self), Modes: modes, Registry: reg,
		Fence: d.engine.Fence,
		Epoch: d.KnownEpoch,
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
