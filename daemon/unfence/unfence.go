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
// Order: the node first waits until it knows a cluster leader — a node cut
// off from the cluster, which the others may have fenced for exactly that
// reason, does not undo that fence on its own — then runs "on" through
// every such device (read back on, as every action), then becomes
// eligible. A failure keeps it ineligible, says why (status shows it under
// self.ineligible), and is retried with backoff. The result is recorded in
// the replicated history through the leader: the first attempt, and the
// success that ends a run of failures, so a device broken for days does
// not flood the history.
package unfence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/stonith"
)

// Source is the eligibility source this package sets (see
// daemon.SetIneligible).
const Source = "unfence"

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
	Fence func(ctx context.Context, req stonith.Request) stonith.Record
	// SetIneligible records why this node may not take primacy ("" clears).
	SetIneligible func(source, reason string)
	// Joined reports whether this node knows a cluster leader.
	Joined func() bool
	// Epoch is the highest epoch this node knows (informational, for the record).
	Epoch func() uint64
	// Commit records a finished unfence in the replicated history.
	Commit func(ctx context.Context, rec stonith.Record) error
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait between tries (default 1s, 30s).
	MinBackoff, MaxBackoff time.Duration
	// JoinPoll is how often Joined is asked while waiting (default 100ms).
	JoinPoll time.Duration
}

// Unfencer unfences this node at start.
type Unfencer struct {
	o    Options
	log  *slog.Logger
	plan plan
	err  error // from planning at New; Run plans again
}

// plan is what to unfence: the topology cut down to the chosen devices,
// and the 1-based levels that have any.
type plan struct {
	topo    stonith.Topology
	levels  []int
	devices []string
}

func (p plan) empty() bool { return len(p.devices) == 0 }

// New decides which devices this node unfences and, when there are any (or
// it cannot tell), makes the node ineligible at once: before the control
// loop's first step, so the node is never primary before Run succeeded.
func New(o Options) *Unfencer {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(30*time.Second, o.MinBackoff)
	}
	if o.JoinPoll <= 0 {
		o.JoinPoll = 100 * time.Millisecond
	}
	u := &Unfencer{o: o, log: o.Logger}
	u.plan, u.err = choose(o.Registry, o.Topology, o.Modes)
	switch {
	case u.err != nil:
		o.SetIneligible(Source, "cannot tell which devices to unfence: "+u.err.Error())
	case !u.plan.empty():
		o.SetIneligible(Source, "not unfenced yet: waiting for a cluster leader (devices "+strings.Join(u.plan.devices, ", ")+")")
	}
	return u
}

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
			use, err := wants(reg, t, modes[t.Device])
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

// wants reports whether t is unfenced at start: by its mode, else by what
// its agent declares.
func wants(reg *agents.Registry, t stonith.Target, mode string) (bool, error) {
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

// Run unfences this node, retrying until it succeeds or ctx ends; on
// success the node becomes eligible. It returns at once when there is
// nothing to unfence.
func (u *Unfencer) Run(ctx context.Context) {
	if u.err == nil && u.plan.empty() {
		return
	}
	delay := u.o.MinBackoff
	failed := 0 // tries that failed so far
	for try := 1; ; try++ {
		if !u.waitJoined(ctx) {
			return
		}
		rec, ok := u.attempt(ctx)
		if ctx.Err() != nil {
			return // stopping: whatever ran was cut short
		}
		if ok {
			u.o.SetIneligible(Source, "")
			u.log.Info("unfenced at start: eligible for primacy", "devices", strings.Join(u.plan.devices, ","), "tries", try)
			u.commit(ctx, rec)
			return
		}
		reason := fmt.Sprintf("unfencing this node failed (try %d, next in %s): %s", try, delay, rec.Error)
		u.o.SetIneligible(Source, reason)
		u.log.Error("unfence at start failed: not eligible for primacy", "try", try, "retry_in", delay, "err", rec.Error)
		if failed == 0 && rec.Kind != "" {
			u.commit(ctx, rec)
		}
		failed++
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, u.o.MaxBackoff)
	}
}

// waitJoined waits until this node knows a cluster leader.
func (u *Unfencer) waitJoined(ctx context.Context) bool {
	for !u.o.Joined() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(u.o.JoinPoll):
		}
	}
	return true
}

// attempt runs one try. A record with an empty Kind means nothing ran
// (the devices could not be chosen).
func (u *Unfencer) attempt(ctx context.Context) (stonith.Record, bool) {
	if u.err != nil {
		u.plan, u.err = choose(u.o.Registry, u.o.Topology, u.o.Modes)
		if u.err != nil {
			return stonith.Record{Error: "cannot tell which devices to unfence: " + u.err.Error()}, false
		}
		if u.plan.empty() {
			return stonith.Record{Outcome: stonith.OutcomeSuccess}, true
		}
	}
	u.o.SetIneligible(Source, "unfencing: running on through "+strings.Join(u.plan.devices, ", "))
	var epoch uint64
	if u.o.Epoch != nil {
		epoch = u.o.Epoch()
	}
	rec := u.o.Fence(ctx, stonith.Request{
		Target: u.o.Self, Topology: u.plan.topo, Levels: u.plan.levels, Action: stonith.ActionOn,
		Reason: "unfence at start", RequestedBy: u.o.Self + " (start)", Executor: u.o.Self, Epoch: epoch,
	})
	return rec, rec.Outcome == stonith.OutcomeSuccess
}

// commit records rec in the replicated history, trying a few times (a
// leader may be changing); the node's eligibility does not wait for it.
func (u *Unfencer) commit(ctx context.Context, rec stonith.Record) {
	if rec.Kind == "" || u.o.Commit == nil {
		return
	}
	var err error
	for i := range 10 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		if err = u.o.Commit(ctx, rec); err == nil {
			return
		}
	}
	u.log.Warn("unfence at start not recorded in the history", "outcome", rec.Outcome, "err", err)
}
