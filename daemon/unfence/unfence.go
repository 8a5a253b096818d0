// Package unfence runs, when a node starts, the "on" that some of its fence
// devices need from the node itself before it may use the shared storage,
// and keeps the node ineligible for primacy until that has succeeded.
//
// SCSI-3 persistent reservation agents (fence_scsi, fence_mpath) fence a
// node by removing its registration key from the shared disks; the node
// registers it again with "on", and only it can (the registration belongs
// to its own initiator). Their FenceAgentAPI metadata marks that action
// on_target="1" automatic="1". A device of this node's own topology is
// unfenced at start when its agent says so (see agents.StartUnfencer), or
// when the configuration says devices.NAME.unfence: on_start (fabric
// zoning a node restores for itself, say); unfence: never turns it off.
//
// This package chooses the devices and runs one attempt ("on" through every
// such device, read back on, as every action). When the node does it, and
// what it waits for first, is the tenure driver's (package daemon/driver,
// start.go), so that the simulator runs the same sequence.
package unfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// Modes of a device (devices.NAME.unfence).
const (
	ModeAuto    = ""         // as the agent declares
	ModeOnStart = "on_start" // always
	ModeNever   = "never"
)

// Options configure an Unfencer.
type Options struct {
	Self string
	// Topology is this node's own fence topology.
	Topology stonith.Topology
	// Modes maps a device to its unfence mode.
	Modes    map[string]string
	Registry *agents.Registry
	// Fence runs a request (the stonith engine's Fence).
	Fence func(ctx context.Context, req stonith.Request) fencing.Record
	// Epoch is the highest epoch this node knows (informational, for the record).
	Epoch func() uint64
}

// Unfencer unfences this node at start.
type Unfencer struct {
	o    Options
	plan plan
	err  error // from planning at New; Attempt plans again
}

// plan is what to unfence: the topology cut down to the chosen devices,
// and the 1-based levels that have any.
type plan struct {
	topo    stonith.Topology
	levels  []int
	devices []string
}

func (p plan) empty() bool { return len(p.devices) == 0 }

// New decides which devices this node unfences; it changes nothing.
func New(o Options) *Unfencer {
	u := &Unfencer{o: o}
	u.plan, u.err = choose(o.Registry, o.Topology, o.Modes)
	return u
}

// Err is why the devices could not be chosen at New (nil: they were).
func (u *Unfencer) Err() error { return u.err }

// Devices lists the devices this node unfences at start (nil when none,
// or when that could not be decided).
func (u *Unfencer) Devices() []string { return u.plan.devices }

// choose picks the devices of topo to unfence at start.
func choose(reg *agents.Registry, topo stonith.Topology, modes map[string]string) (plan, error) {
	var p plan
	var errs []error
	for i, lvl := range topo {
		var kept stonith.Level
		for _, t := range lvl.Devices {
			use, err := Wants(reg, t, modes[t.Device])
			if err != nil {
				errs = append(errs, fmt.Errorf("device %s: %w", t.Device, err))
				continue
			}
			if use {
				kept.Devices = append(kept.Devices, t)
				p.devices = append(p.devices, t.Device)
			}
		}
		p.topo = append(p.topo, kept)
		if len(kept.Devices) > 0 {
			p.levels = append(p.levels, i+1)
		}
	}
	return p, errors.Join(errs...)
}

// Wants reports whether t is unfenced at start by the node it fences: by
// its mode, else by what its agent declares. Such a device cuts only the
// node's access to the storage (a SCSI-3 registration is the node's own).
func Wants(reg *agents.Registry, t stonith.Target, mode string) (bool, error) {
	switch mode {
	case ModeOnStart:
		return true, nil
	case ModeNever:
		return false, nil
	case ModeAuto:
	default:
		return false, fmt.Errorf("unfence mode %q", mode)
	}
	if reg == nil {
		return false, errors.New("no agent registry")
	}
	k, ok := reg.Lookup(t.Agent)
	if !ok {
		return false, fmt.Errorf("unknown agent %q", t.Agent)
	}
	p := make(agents.Params, len(t.Params)+1)
	for n, v := range t.Params {
		p[n] = v
	}
	if t.Plug != "" {
		p["plug"] = t.Plug
	}
	// Building an agent touches no device (exec reads the program's
	// metadata, cached since the configuration was validated).
	a, err := k.New(p, nil)
	if err != nil {
		return false, err
	}
	if c, ok := a.(agents.Closer); ok {
		defer c.Close()
	}
	su, ok := a.(agents.StartUnfencer)
	return ok && su.UnfenceAtStart(), nil
}

// Attempt runs one try; ok reports the devices were read back on. A record
// with an empty Kind means nothing ran (the devices could not be chosen).
// Not safe for concurrent use.
func (u *Unfencer) Attempt(ctx context.Context) (fencing.Record, bool) {
	if u.err != nil {
		u.plan, u.err = choose(u.o.Registry, u.o.Topology, u.o.Modes)
		if u.err != nil {
			return fencing.Record{Error: "cannot tell which devices to unfence: " + u.err.Error()}, false
		}
		if u.plan.empty() {
			return fencing.Record{Outcome: fencing.OutcomeSuccess}, true
		}
	}
	var epoch uint64
	if u.o.Epoch != nil {
		epoch = u.o.Epoch()
	}
	rec := u.o.Fence(ctx, stonith.Request{
		Target: u.o.Self, Topology: u.plan.topo, Levels: u.plan.levels, Action: fencing.ActionOn,
		Reason: "unfence at start", RequestedBy: u.o.Self + " (start)", Executor: u.o.Self, Epoch: epoch,
	})
	return rec, rec.Outcome == fencing.OutcomeSuccess
}
