// Package driver runs one node's tenure machine (package tenure) against
// the world. It feeds the machine the time, raft's leadership, the
// replicated state and the results of earlier actions, and carries out the
// actions the machine returns: log writes in the order asked, the
// lease-bound query, fence-then-commit, the release (forwarded to the
// leader when this node no longer leads), the storage, the watchdog. It
// decides nothing of its own; every rule of who may act, and when, lives in
// the machine.
//
// The driver is written once, for the daemon and for the simulator
// (daemon/tenure/sim), against small interfaces: Log (raft and the
// replicated state), Peers (the other nodes), Clock, Effects (the fencing
// engine, the resource group, the watchdog) and Observer (status, alerts,
// metrics). The daemon's implementations wrap raft, memberlist, the stonith
// engine and the resource group; the simulator's are virtual. So every
// configuration path the daemon takes, the simulator takes too.
//
// Concurrency: a Driver is not safe for concurrent use. All of its methods,
// and every callback it hands to its interfaces, run on one loop — the
// daemon's control goroutine, or a simulated process. An implementation
// that blocks does its work elsewhere and calls back on that loop; it may
// also call back before it returns.
package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// Log is the replicated log and its state machine, as this node has
// applied them. done callbacks run on the driver's loop.
type Log interface {
	// IsLeader reports whether this node leads raft now.
	IsLeader() bool
	// Leader is the node that leads raft as far as this one knows ("" =
	// none).
	Leader() string
	// Joined reports that this node has applied what the leader had
	// committed when this node first asked it, since it started: its
	// history is the cluster's, not what its own log held when it stopped.
	// Knowing a leader is not that: a follower learns the leader from a
	// heartbeat before it has caught up.
	Joined() bool
	// Holders is the replicated state the tenure of group reads ("" is
	// the default group).
	Holders(group string) quorum.Holders
	// History is the fence history, oldest first.
	History() []fencing.Record
	// SinceContact is how long ago this node last heard from leader (ok
	// false: it has no record of it).
	SinceContact(leader string) (time.Duration, bool)
	// Apply commits c (this node must lead): done gets the state machine's
	// answer, or an error when it refused c or c was not committed.
	Apply(c quorum.Command, done func(res any, err error))
	// Acquire commits an acquire: the first renewal of the epoch it grants,
	// begun at t0 on this node's clock. done gets the quorum.Grant.
	Acquire(c quorum.Command, t0 tenure.Time, done func(res any, err error))
	// Confirm renews the lease of group's epoch: done(nil) once a
	// majority stored an entry created after t0, the renewal's start on
	// this node's clock.
	Confirm(group string, epoch uint64, t0 tenure.Time, done func(err error))
	// Transfer hands raft leadership to `to` ("" = the implementation's
	// choice of successor).
	Transfer(to string, done func(err error))
	// Propose commits c on the raft leader, wherever it is: here if this
	// node leads, else forwarded to it; done gets the state machine's
	// answer. t0, if not zero, is when the renewal c carries began on
	// this node's clock (an acquire, a renewal). It is how the holder of
	// a group other than the default one, which need not lead raft,
	// writes (tenure.Config.OffLeader).
	Propose(c quorum.Command, t0 tenure.Time, done func(res any, err error))
	// Move asks the leader to place group, placed on this node, on `to`
	// ("" = the implementation's choice of successor): an OffLeader
	// group's handover, as Transfer is the default group's. It is
	// refused if the group is no longer placed here (OpPlace's From).
	Move(group, to string, done func(err error))
}

// Peers are the other configured nodes.
type Peers interface {
	// Forward commits c on the leader, wherever it is (a command about this
	// node that the leader accepts from it: a release, an unfence record).
	Forward(c quorum.Command, done func(err error))
	// Contact asks node how long ago it last heard from leader: ok false
	// when it did not answer (before ctx ended), known false when it has no
	// record of leader.
	Contact(ctx context.Context, node, leader string, done func(elapsed time.Duration, known, ok bool))
	// Boot is the boot ID node last advertised ("" if never).
	Boot(node string) string
	// Rank lists the other configured nodes in rank order
	// (quorum.RankOrder after this node): the order in which a fence is
	// handed to one of them.
	Rank() []string
	// FencePath asks node what its own device checks find of target's
	// fence path (PathWorking, PathFailing, or anything else: not known);
	// ok false when it did not answer before ctx ended.
	FencePath(ctx context.Context, node, target string, done func(path string, ok bool))
	// Fence has node (req.Executor) run req, a power-off this node leads,
	// requested and recorded, and hands back the record of what it did,
	// with its attempts and read-backs; it commits nothing. err: no
	// record came back (node refused, or did not answer within the
	// fence's time bound and a margin: the fence may still have run).
	// The scope's end stops the wait, not the fence.
	Fence(s *Scope, req FenceRequest, done func(rec fencing.Record, err error))
}

// States of a fence path, as a node's own device checks find it (the
// daemon's package health): every device of at least one level answered
// its last check, or every level has a device that failed it. Anything
// else is not known.
const (
	PathWorking = "working"
	PathFailing = "failing"
)

// Clock is this node's boot-time clock (CLOCK_BOOTTIME) and its wall clock.
type Clock interface {
	Now() tenure.Time
	// Wall is the wall-clock time records carry (informational).
	Wall() time.Time
	// After calls f on the driver's loop once d has passed, unless stop is
	// called first.
	After(d time.Duration, f func()) (stop func())
}

// Effects are what the driver does to this machine and its devices.
type Effects interface {
	// Fence runs req through the fencing engine (power off or on, read
	// back); done gets the record of what happened. It commits nothing.
	Fence(s *Scope, req FenceRequest, done func(fencing.Record))
	// FencePath is what this node's own device checks find of target's
	// fence path (see PathWorking); it never blocks.
	FencePath(target string) string
	// Start starts the storage (the resource group) with epoch as its
	// token; previous is the former holder.
	Start(s *Scope, epoch uint64, previous string, done func(err error))
	// Monitor checks the storage; a result after s ended is not delivered.
	Monitor(s *Scope, done func(err error))
	// Stop stops the storage, giving up at deadline (this node's clock).
	Stop(deadline tenure.Time, done func(err error))
	// ArmWatchdog arms the watchdog if one is configured and returns the
	// timeout to advertise (0: none armed).
	ArmWatchdog() time.Duration
	// DisarmWatchdog disarms it once nothing held runs any more.
	DisarmWatchdog()
	// SelfFence resets this machine: it may still run the storage and
	// cannot prove otherwise. It reports false when no reset is under way
	// (no watchdog, and sysrq refused): the machine keeps running.
	SelfFence(reason string) (resetting bool)
	// Exit ends the daemon after a self-fence that could not reset the
	// machine (the service manager starts it again; its probe at start
	// stops what is left).
	Exit(reason string)
	// Probe checks, on a node that does not hold the storage, that nothing
	// of the resource group runs here, and stops what does; an error means
	// something may still run.
	Probe(s *Scope, done func(err error))
	// Unfence runs "on" through the devices this node unfences itself at
	// start (UnfencePlan); ok reports it was confirmed. A record with no
	// Kind means nothing ran.
	Unfence(s *Scope, done func(rec fencing.Record, ok bool))
}

// Observer is told what the driver did, for status, alerts and metrics.
type Observer interface {
	// Stepped follows every step of the machine (before: its phase before
	// the step; ev: the event it took, if any; acts: what it asked for),
	// before the step's actions run.
	Stepped(before tenure.Phase, ev tenure.Event, acts []tenure.Action, m *tenure.Machine)
	// FenceStarted and FenceDone bracket every fence this node runs.
	FenceStarted(req FenceRequest)
	FenceDone(rec fencing.Record)
	// Ineligible records (reason != "") or clears why this node may not
	// take primacy, for one of the driver's sources (SourceProbe,
	// SourceUnfence); Env.Ineligible reports them back.
	Ineligible(source, reason string)
}

// FenceRequest is a fence the driver runs: the fencing engine's request
// (stonith.Request) without the topology, which the Effects know.
type FenceRequest struct {
	Target string
	// Action is fencing.ActionOff, ActionReboot or ActionOn.
	Action      string
	Reason      string
	RequestedBy string
	Executor    string
	Epoch       uint64
	// ID is the history record's, once committed.
	ID uint64
	// Levels, for an unfence, are the 1-based levels to run (nil: all).
	Levels []int
	// PowerOnly: only levels that remove the node's power may confirm it
	// (the node is unclean).
	PowerOnly bool
	// TargetBoot is the boot the target may run the group in.
	TargetBoot string
	// Group is the resource group whose takeover asked for the fence
	// ("" for the default group, and for an admin's fence); the records
	// carry it.
	Group string
}

// Config is what a driver knows of its node and cluster.
type Config struct {
	Machine tenure.Config
	// Group is the resource group this driver's machine holds or takes
	// over ("" is the default group, the only one of a configuration
	// without `groups:`). Every command it writes names it.
	Group string
	// Nodes are the configured voters, this one included; Majority is how
	// many of them make a majority.
	Nodes    []string
	Majority int
	// Probe: a resource group runs here, to probe at start.
	Probe bool
	// OtherGroups are the cluster's other groups: an OffLeader group's
	// machine takes its group on no node that another group lists as
	// maybe running it, or as a former holder, while another node holds
	// that group (it may be fenced for it at any moment).
	OtherGroups []string
	// ProbeGroups are the other groups whose resources the probe covers
	// (the node's start-up work is one driver's): a probe that cannot
	// stop what it found marks the node unclean in each of them too.
	ProbeGroups []string
	// Unfence is what this node unfences at start (nil: nothing).
	Unfence *UnfencePlan
	// Boot is this machine's boot ID (/proc/sys/kernel/random/boot_id).
	Boot   string
	Logger *slog.Logger
}

// Env is the world a driver runs in.
type Env struct {
	Log      Log
	Peers    Peers
	Clock    Clock
	Effects  Effects
	Observer Observer
	// Kick asks the loop for a Step soon: an event was posted.
	Kick func()
	// Ineligible says why this node may not take primacy now ("" = it
	// may); NotYet why it does not take it yet (tenure.Input.NotYet).
	Ineligible func() string
	NotYet     func() string
	// Context is the parent of every tenure's Scope (the daemon's hard
	// stop ends it); nil = context.Background().
	Context context.Context
	// Fences is shared by the drivers of one node, one per group, so
	// that a node they all take over from is fenced once (nil: this
	// driver's own).
	Fences *Fences
}

// Driver is one node's tenure machine and its driver.
type Driver struct {
	cfg   Config
	env   Env
	lg    *slog.Logger
	m     *tenure.Machine
	base  context.Context
	scope *Scope
	// lifeScope is the start-up work's (see life).
	lifeScope *Scope
	// reasons are the eligibility reasons the driver set (by source).
	reasons map[string]string

	events  []tenure.Event
	writes  []func(done func())
	writing bool
	// exiting: a self-fence could not reset the machine; the daemon exits
	// once this node is marked unclean (or that was given up).
	exiting bool
	// unreached are the targets whose last power-off run here failed
	// without any of their devices reading a power state back (refused
	// credentials, no answer): their next one is handed to a peer whose
	// checks find a working path (see executor).
	unreached map[string]bool
}

// New returns the driver of a node that holds nothing.
func New(cfg Config, env Env) *Driver {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if env.Context == nil {
		env.Context = context.Background()
	}
	if env.Ineligible == nil {
		env.Ineligible = func() string { return "" }
	}
	if env.NotYet == nil {
		env.NotYet = func() string { return "" }
	}
	if env.Kick == nil {
		env.Kick = func() {}
	}
	if env.Fences == nil {
		env.Fences = &Fences{}
	}
	return &Driver{cfg: cfg, env: env, lg: cfg.Logger, m: tenure.New(cfg.Machine), base: env.Context}
}

// Machine is the tenure machine, for reading (phase, epoch, lease); only
// the driver steps it.
func (d *Driver) Machine() *tenure.Machine { return d.m }

// Post queues an event for the machine (one per Step, in order) and kicks
// the loop.
func (d *Driver) Post(ev tenure.Event) {
	if d.m.Done() {
		return
	}
	d.events = append(d.events, ev)
	d.env.Kick()
}

// Pending reports queued events: the loop should step again.
func (d *Driver) Pending() bool { return len(d.events) > 0 }

// Done reports that the machine will do nothing more, and neither will
// the driver.
func (d *Driver) Done() bool { return d.m.Done() && !d.exiting }

// Wake is when the machine next needs a step even if nothing happens
// (tenure.Never: only an event or a change can move it).
func (d *Driver) Wake(now tenure.Time) tenure.Time { return d.m.Wake(now) }

// HandOff asks for a graceful handover: release, then leadership to `to`
// ("" = any).
func (d *Driver) HandOff(to string) { d.Post(tenure.HandoverAsked{To: to}) }

// Reconfigure hands the machine a new configuration (a live reload; the
// timing never changes live).
func (d *Driver) Reconfigure(cfg tenure.Config) {
	d.cfg.Machine = cfg
	d.Post(tenure.Reconfigured{Config: cfg})
}

// Shutdown asks for a graceful stop: release, then stop.
func (d *Driver) Shutdown() { d.Post(tenure.ShutdownAsked{}) }

// committedOf is the replicated state as the machine reads it.
func committedOf(v quorum.Holders) tenure.Committed {
	tv := tenure.Committed{Epoch: v.Epoch, Holder: v.Holder, HolderState: v.HolderState, LeaseOf: v.LeaseOf, Formers: v.Formers,
		Unconfirmed: v.Unconfirmed, Standby: v.Standby, Watchdogs: v.Watchdogs}
	if len(v.Unclean) > 0 {
		tv.Unclean = make(map[string]bool, len(v.Unclean))
		for n := range v.Unclean {
			tv.Unclean[n] = true
		}
	}
	if len(v.Timings) > 0 {
		tv.Timings = make(map[string]tenure.Timing, len(v.Timings))
		for n, t := range v.Timings {
			tv.Timings[n] = tenure.Timing{Lease: t.Lease, Margin: t.Margin, Grace: t.Grace}
		}
	}
	return tv
}

// holders is the replicated state of this driver's group.
func (d *Driver) holders() quorum.Holders { return d.env.Log.Holders(d.cfg.Group) }

// offLeader: this driver's group is held wherever it is placed, not by the
// raft leader (tenure.Config.OffLeader).
func (d *Driver) offLeader() bool { return d.cfg.Machine.OffLeader }

// leads is the machine's Input.Leader: this node leads raft, or, for an
// OffLeader group, the group is placed on it in the state this node has
// applied since it caught up with the leader (a node back from a crash
// still reads the placement of before it; the leader may have moved the
// group since).
func (d *Driver) leads() bool {
	if d.offLeader() {
		return d.env.Log.Joined() && d.holders().Placement == d.cfg.Machine.Self
	}
	return d.env.Log.IsLeader()
}

// apply commits c: on this node, which must lead raft, or for an OffLeader
// group on the leader wherever it is (t0: the renewal c carries, if any).
func (d *Driver) apply(c quorum.Command, t0 tenure.Time, done func(res any, err error)) {
	switch {
	case d.offLeader():
		d.env.Log.Propose(c, t0, done)
	case c.Op == quorum.OpAcquire:
		d.env.Log.Acquire(c, t0, done)
	default:
		d.env.Log.Apply(c, done)
	}
}

// Group is the resource group this driver's machine is for ("" is the
// default group).
func (d *Driver) Group() string { return d.cfg.Group }

// listedElsewhere says why this node may take no group now because
// another group lists it as maybe running it, or as a former holder whose
// lease may run, under another holder ("" if none does): that holder may
// fence it at any moment, and what started here would stop with the
// power.
func (d *Driver) listedElsewhere() string {
	self := d.cfg.Machine.Self
	for _, g := range d.cfg.OtherGroups {
		if v := d.env.Log.Holders(g); v.Lists(self) && v.Holder != self {
			return fmt.Sprintf("listed as maybe running group %s, which %s holds: it may be fenced for it", groupName(g), dash(v.Holder))
		}
	}
	return ""
}

// timing is what this node advertises of its own lease timing.
func (d *Driver) timing() *quorum.HolderTiming {
	t := d.cfg.Machine.Timing
	return &quorum.HolderTiming{Lease: t.Lease, Margin: t.Margin, Grace: t.Grace}
}

// Step advances the machine by one input (the next queued event, if any)
// and carries out what it returns.
func (d *Driver) Step() {
	if d.m.Done() {
		return
	}
	var ev tenure.Event
	if len(d.events) > 0 {
		ev = d.events[0]
		d.events = d.events[1:]
	}
	before := d.m.Phase()
	inel := d.env.Ineligible()
	if why := d.listedElsewhere(); why != "" && d.offLeader() {
		// (Only a group held off the leader: the default group's
		// ineligible leader would hand raft leadership on, and the next
		// may be listed too.)
		inel = strings.TrimPrefix(inel+"; "+why, "; ")
	}
	acts := d.m.Step(tenure.Input{Now: d.env.Clock.Now(), Leader: d.leads(), Committed: committedOf(d.holders()),
		Ineligible: inel, NotYet: d.env.NotYet(), Event: ev})
	if after := d.m.Phase(); before == tenure.Releasing && (after == tenure.Secondary || after == tenure.Stopped) {
		d.env.Effects.DisarmWatchdog()
	}
	d.env.Observer.Stepped(before, ev, acts, d.m)
	for _, a := range acts {
		d.act(a)
	}
	if len(d.events) > 0 {
		d.env.Kick()
	}
}

// Scope is the in-flight work of one tenure (a fence, a bound query, a
// start, a monitor): a Cancel action ends it, and its results no longer
// matter. Cancelled and OnCancel belong to the driver's loop; Context may
// be handed to any goroutine.
type Scope struct {
	ctx       context.Context
	cancel    context.CancelFunc
	cancelled bool
	hooks     []func()
}

// NewScope returns a scope that ends with parent or at End (admin fences
// run in one of their own).
func NewScope(parent context.Context) *Scope {
	ctx, cancel := context.WithCancel(parent)
	return &Scope{ctx: ctx, cancel: cancel}
}

// Context ends when the scope is cancelled.
func (s *Scope) Context() context.Context { return s.ctx }

// Cancelled reports whether the scope ended.
func (s *Scope) Cancelled() bool { return s.cancelled }

// OnCancel runs f on the loop when the scope ends (at once if it has).
func (s *Scope) OnCancel(f func()) {
	if s.cancelled {
		f()
		return
	}
	s.hooks = append(s.hooks, f)
}

// End cancels the scope and runs its OnCancel hooks.
func (s *Scope) End() {
	if s.cancelled {
		return
	}
	s.cancelled = true
	s.cancel()
	hooks := s.hooks
	s.hooks = nil
	for _, f := range hooks {
		f()
	}
}

// tenureScope is the current tenure's scope.
func (d *Driver) tenureScope() *Scope {
	if d.scope == nil {
		d.scope = NewScope(d.base)
	}
	return d.scope
}

// post hands a result to the machine.
func (d *Driver) post(ev tenure.Event) { d.Post(ev) }

// write queues a log write; writes run one at a time, in the order queued,
// so they are committed in the order the machine asked for them.
func (d *Driver) write(f func(done func())) {
	d.writes = append(d.writes, f)
	d.runWrites()
}

func (d *Driver) runWrites() {
	if d.writing || len(d.writes) == 0 {
		return
	}
	f := d.writes[0]
	d.writes = d.writes[1:]
	d.writing = true
	f(func() {
		d.writing = false
		d.runWrites()
	})
}

// act carries out one action.
func (d *Driver) act(a tenure.Action) {
	t := d.cfg.Machine.Timing
	self := d.cfg.Machine.Self
	lg, log, fx := d.lg, d.env.Log, d.env.Effects
	switch a := a.(type) {
	case tenure.Acquire:
		d.write(func(done func()) {
			d.apply(quorum.Command{Op: quorum.OpAcquire, Group: d.cfg.Group, Node: self, Time: d.env.Clock.Wall(), Timing: d.timing()}, a.T0, func(res any, err error) {
				defer done()
				if err != nil {
					lg.Warn("acquire epoch", "err", err)
					d.post(tenure.AcquireDone{Err: err})
					return
				}
				g := res.(quorum.Grant)
				lg.Info("elected: epoch granted", "epoch", g.Epoch, "previous", g.Previous, "lease_of", g.LeaseOf)
				d.post(tenure.AcquireDone{Grant: tenure.Grant{Epoch: g.Epoch, Previous: g.Previous, LeaseOf: g.LeaseOf}})
			})
		})
	case tenure.Confirm:
		d.write(func(done func()) {
			d.confirm(a.Epoch, a.T0, func(err error) {
				// A renewal slower than a heartbeat eats into the lease:
				// the early sign of a primary about to give it up.
				if now := d.env.Clock.Now(); err == nil && now.Sub(a.T0) > t.Heartbeat {
					lg.Warn("lease renewal slow", "epoch", a.Epoch, "took", now.Sub(a.T0).Round(time.Millisecond),
						"lease_left", max(t.ActingUntil(a.T0).Sub(now), 0).Round(time.Millisecond))
				}
				d.post(tenure.ConfirmDone{Epoch: a.Epoch, T0: a.T0, Err: err})
				done()
			})
		})
	case tenure.AskBound:
		d.leaseBound(d.tenureScope(), a.Former, func(bound tenure.Time, ok bool) {
			if ok {
				lg.Info("lease of the former primary bounded by a majority", "epoch", a.Epoch, "former", a.Former,
					"wait_left", max(0, t.SuccessorWait(bound).Sub(d.env.Clock.Now())).Round(time.Millisecond))
			}
			d.post(tenure.BoundDone{Epoch: a.Epoch, Bound: bound, OK: ok})
		})
	case tenure.Record:
		d.write(func(done func()) {
			d.apply(quorum.Command{Op: quorum.OpState, Group: d.cfg.Group, Node: self, Epoch: a.Epoch, State: a.State, Reason: a.Reason}, 0, func(_ any, err error) {
				if err != nil {
					lg.Warn("commit holder state", "state", a.State, "err", err)
				}
				done()
			})
		})
	case tenure.Fence:
		s := d.tenureScope()
		failed := map[string]string{}
		var next func(i int)
		next = func(i int) {
			if i == len(a.Targets) {
				d.post(tenure.FenceDone{Epoch: a.Epoch, Failed: failed})
				return
			}
			n := a.Targets[i]
			d.fenceOnce(s, FenceRequest{Target: n, Action: fencing.ActionOff, Reason: a.Reason,
				RequestedBy: self + " (takeover)", Epoch: a.Epoch, Group: d.cfg.Group}, func(rec fencing.Record) {
				if rec.Outcome != fencing.OutcomeSuccess {
					failed[n] = fmt.Sprintf("fence %s: %s: %s", n, rec.Outcome, rec.Error)
				}
				next(i + 1)
			})
		}
		next(0)
	case tenure.MountIntent:
		d.write(func(done func()) {
			// Armed first: the advertisement must be true from the moment
			// the storage may start.
			wd := fx.ArmWatchdog()
			d.apply(quorum.Command{Op: quorum.OpState, Group: d.cfg.Group, Node: self, Epoch: a.Epoch, State: quorum.HolderMounting, Watchdog: wd,
				Timing: d.timing(), Boot: d.cfg.Boot}, 0, func(_ any, err error) {
				d.post(tenure.MountIntentDone{Epoch: a.Epoch, Err: err})
				done()
			})
		})
	case tenure.Start:
		fx.Start(d.tenureScope(), a.Epoch, a.Previous, func(err error) { d.post(tenure.StartDone{Epoch: a.Epoch, Err: err}) })
	case tenure.Expire:
		d.write(func(done func()) {
			d.recordExpiry(a, func(err error) {
				d.post(tenure.ExpireDone{Epoch: a.Epoch, Err: err})
				done()
			})
		})
	case tenure.Monitor:
		fx.Monitor(d.tenureScope(), func(err error) { d.post(tenure.MonitorDone{Epoch: a.Epoch, Err: err}) })
	case tenure.Stop:
		fx.Stop(a.Deadline, func(err error) { d.post(tenure.StopDone{Epoch: a.Epoch, Err: err}) })
	case tenure.Release:
		d.write(func(done func()) {
			d.release(a.Epoch, a.Reason, func(err error) {
				d.post(tenure.ReleaseDone{Epoch: a.Epoch, Err: err})
				done()
			})
		})
	case tenure.Transfer:
		if d.offLeader() {
			log.Move(d.cfg.Group, a.To, func(err error) {
				if errors.Is(err, quorum.ErrStale) {
					// Placed elsewhere already: what the handover wanted.
					err = nil
				}
				d.post(tenure.TransferDone{Err: err})
			})
			break
		}
		log.Transfer(a.To, func(err error) { d.post(tenure.TransferDone{Err: err}) })
	case tenure.Cancel:
		if d.scope != nil {
			s := d.scope
			d.scope = nil
			s.End()
		}
	case tenure.SelfFence:
		lg.Error("storage did not stop within the grace period: self-fencing", "epoch", d.m.Epoch(), "reason", a.Reason)
		if !fx.SelfFence(a.Reason) {
			d.cannotReset(a.Reason)
		}
	default:
		lg.Error("tenure: unknown action", "action", fmt.Sprintf("%T", a))
	}
}

// confirm renews the lease at epoch begun at t0: for the default group,
// the Log's confirmation that this leader still leads a majority; for an
// OffLeader group, an OpRenew committed through the leader, which the
// state machine refuses once the epoch is superseded, the group released
// or placed elsewhere (quorum.OpRenew).
func (d *Driver) confirm(epoch uint64, t0 tenure.Time, done func(error)) {
	if !d.offLeader() {
		d.env.Log.Confirm(d.cfg.Group, epoch, t0, done)
		return
	}
	d.env.Log.Propose(quorum.Command{Op: quorum.OpRenew, Group: d.cfg.Group, Node: d.cfg.Machine.Self, Epoch: epoch}, t0,
		func(_ any, err error) { done(err) })
}

// release commits that this node stopped the storage it held at epoch; a
// successor then takes over without fencing. Committed here while this
// node leads, else forwarded to the leader. If it cannot be committed, the
// successor fences this node, which is also safe.
func (d *Driver) release(epoch uint64, reason string, done func(error)) {
	c := quorum.Command{Op: quorum.OpRelease, Group: d.cfg.Group, Node: d.cfg.Machine.Self, Epoch: epoch, Reason: reason, Time: d.env.Clock.Wall()}
	forward := func() {
		d.env.Peers.Forward(c, func(err error) {
			if err != nil {
				d.lg.Warn("release not recorded; the next primary will fence this node", "epoch", epoch, "err", err)
			}
			done(err)
		})
	}
	if d.offLeader() {
		d.env.Log.Propose(c, 0, func(_ any, err error) {
			if err != nil {
				d.lg.Warn("release not recorded; the group's next holder will fence this node", "group", groupName(d.cfg.Group), "epoch", epoch, "err", err)
			}
			done(err)
		})
		return
	}
	if !d.env.Log.IsLeader() {
		forward()
		return
	}
	d.env.Log.Apply(c, func(_ any, err error) {
		switch {
		case err == nil:
			done(nil)
		case d.env.Log.IsLeader():
			d.lg.Warn("release not committed yet", "epoch", epoch, "err", err)
			done(err)
		default:
			forward()
		}
	})
}

// recordExpiry commits, for each target, that it is confirmed stopped
// without a fence: its lease certainly ended and the storage checks tokens,
// or its advertised watchdog has reset it.
func (d *Driver) recordExpiry(a tenure.Expire, done func(error)) {
	targets := slices.Sorted(maps.Keys(a.Targets))
	var errs []error
	var next func(i int)
	next = func(i int) {
		if i == len(targets) {
			done(errors.Join(errs...))
			return
		}
		n := targets[i]
		kind, reason := fencing.KindExpiry, "taken over by lease expiry (storage checks tokens)"
		if a.Targets[n] == tenure.ExpiryWatchdog {
			kind, reason = fencing.KindWatchdog, "confirmed by watchdog timeout"
		}
		now := d.env.Clock.Wall()
		rec := fencing.Record{Kind: kind, Target: n, Reason: reason, RequestedBy: d.cfg.Machine.Self + " (takeover)", Executor: d.cfg.Machine.Self,
			Epoch: a.Epoch, Started: now, Finished: now, Outcome: fencing.OutcomeSuccess, Group: d.cfg.Group}
		d.apply(quorum.Command{Op: quorum.OpRecord, Group: d.cfg.Group, Record: &rec}, 0, func(_ any, err error) {
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n, err))
			} else {
				d.lg.Warn("former holder confirmed stopped without a fence", "epoch", a.Epoch, "target", n, "how", reason)
			}
			next(i + 1)
		})
	}
	next(0)
}

// leaseBound finds a point on this node's clock after which former
// certainly renewed its lease no more, from a majority of the configured
// nodes' last contact with it (see tenure.BoundOf for why it is safe); ok
// is false if not enough of them answered within lease/2. This node's own
// record counts as one answer; once a majority answered, it waits a moment
// for the rest (any majority gives a valid bound, more allow a tighter
// one).
func (d *Driver) leaseBound(s *Scope, former string, done func(tenure.Time, bool)) {
	clock := d.env.Clock
	ctx, cancel := context.WithCancel(s.Context())
	now := clock.Now()
	own := now
	if e, ok := d.env.Log.SinceContact(former); ok {
		own = now.Add(-e)
	}
	got := []tenure.Time{own}
	pending := len(d.cfg.Nodes) - 1
	finished, grace := false, false
	var stops []func()
	finish := func() {
		if finished {
			return
		}
		finished = true
		cancel()
		for _, stop := range stops {
			stop()
		}
		done(tenure.BoundOf(got, d.cfg.Majority))
	}
	stops = append(stops, clock.After(d.cfg.Machine.Timing.Lease/2, finish))
	s.OnCancel(finish)
	for _, n := range d.cfg.Nodes {
		if n == d.cfg.Machine.Self {
			continue
		}
		d.env.Peers.Contact(ctx, n, former, func(elapsed time.Duration, known, ok bool) {
			if finished {
				return
			}
			pending--
			if ok && elapsed >= 0 {
				at := clock.Now()
				if known {
					at = at.Add(-elapsed)
				}
				got = append(got, at)
			}
			switch {
			case pending == 0:
				finish()
			case len(got) >= d.cfg.Majority && !grace:
				grace = true
				stops = append(stops, clock.After(50*time.Millisecond, finish))
			}
		})
	}
	if pending == 0 {
		finish()
	}
}

// Fence runs a fence request for this node, which must lead a majority:
// the request is committed first (a fence never runs unrecorded), then the
// engine runs it — here, or for a power-off on a peer whose own device
// checks reach the target when this node's do not (see executor) — then
// the result is committed, retried while this node still leads. done gets
// the record; its outcome is success only when the engine that ran it
// confirmed the action by read-back and the result was committed. Admin
// fences (fencectl fence, unfence) come through here too.
func (d *Driver) Fence(s *Scope, req FenceRequest, done func(fencing.Record)) {
	log := d.env.Log
	self := d.cfg.Machine.Self
	if req.Epoch == 0 {
		req.Epoch = log.Holders(req.Group).Epoch
	}
	kind := fencing.KindFence
	if req.Action == fencing.ActionOn {
		kind = fencing.KindUnfence
	} else {
		// The boot the target may run the storage in: its mount
		// intent's, else what its gossip last advertised. It decides
		// whether the target may unfence itself again (see unfenceRule).
		v := log.Holders(req.Group)
		req.TargetBoot = v.Boots[req.Target]
		if req.TargetBoot == "" {
			req.TargetBoot = d.env.Peers.Boot(req.Target)
		}
		// A node that could neither stop what it ran nor reset itself
		// is stopped only by losing its power.
		if _, unclean := v.Unclean[req.Target]; unclean {
			req.PowerOnly = true
		}
	}
	d.executor(s, req, func(executor string) {
		req.Executor = executor
		pending := fencing.Record{Kind: kind, Target: req.Target, Action: req.Action, Reason: req.Reason,
			RequestedBy: req.RequestedBy, Executor: req.Executor, Epoch: req.Epoch, Started: d.env.Clock.Wall(), Outcome: fencing.OutcomePending,
			TargetBoot: req.TargetBoot, Group: req.Group}
		d.apply(quorum.Command{Op: quorum.OpRecord, Group: req.Group, Record: &pending}, 0, func(res any, err error) {
			if err != nil {
				pending.Outcome, pending.Error, pending.Finished = fencing.OutcomeFailed, "not run: could not record the request: "+err.Error(), d.env.Clock.Wall()
				done(pending)
				return
			}
			req.ID = res.(uint64)
			if req.Action == fencing.ActionOn {
				req.Levels = LastFenceLevels(log.History(), req.Target)
			}
			d.env.Observer.FenceStarted(req)
			ran := func(rec fencing.Record) {
				rec.TargetBoot, rec.Group = req.TargetBoot, req.Group
				d.ranFence(req, rec)
				d.commitResult(rec, 0, func(rec fencing.Record) {
					d.env.Observer.FenceDone(rec)
					done(rec)
				})
			}
			if executor == self {
				d.env.Effects.Fence(s, req, ran)
			} else {
				d.delegate(s, req, ran)
			}
		})
	})
}

// commitResult commits a fence's result: it must be committed before anyone
// acts on it; retried while this node still leads.
func (d *Driver) commitResult(rec fencing.Record, try int, done func(fencing.Record)) {
	r := rec
	d.apply(quorum.Command{Op: quorum.OpRecord, Group: rec.Group, Record: &r}, 0, func(_ any, err error) {
		if err == nil {
			done(rec)
			return
		}
		if d.leads() && try < 5 {
			d.env.Clock.After(100*time.Millisecond, func() { d.commitResult(rec, try+1, done) })
			return
		}
		d.lg.Error("fence result not committed", "fence_id", rec.ID, "outcome", rec.Outcome, "err", err)
		if rec.Outcome == fencing.OutcomeSuccess {
			rec.Outcome = fencing.OutcomeUnknown
			rec.Error = "confirmed off, but the result could not be recorded: " + err.Error()
		}
		done(rec)
	})
}

// LastFenceLevels returns the levels whose devices cut node in its newest
// successful fence: every level with a successful off, not only the one
// that completed (a level that failed may still have switched some of its
// devices off, e.g. one PDU feed of two), and every level with an off of
// unknown outcome (one that was still running when another level
// confirmed the fence may have cut the node too). nil means all levels.
func LastFenceLevels(history []fencing.Record, node string) []int {
	for i := len(history) - 1; i >= 0; i-- {
		r := history[i]
		if r.Target != node || r.Kind != fencing.KindFence || r.Outcome != fencing.OutcomeSuccess {
			continue
		}
		var levels []int
		for _, a := range r.Attempts {
			cut := a.Result == fencing.ResultSuccess || a.Result == fencing.ResultUnknown
			if cut && a.Action != fencing.ActionOn && !slices.Contains(levels, a.Level) {
				levels = append(levels, a.Level)
			}
		}
		slices.Sort(levels)
		return levels
	}
	return nil
}
