package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
)

// The driver runs this node's tenure machine (package tenure): it feeds the
// machine the time, raft's leadership, the replicated state and the results
// of earlier actions, and carries out the actions it returns. It makes no
// decision of its own; every rule of who may act, when, lives in the machine.
//
// One goroutine (controlLoop) owns the machine. Actions that block run on
// goroutines of the daemon's group and report back through d.events. Log
// writes (acquire, holder state, mount intent, barrier, release) go through
// one FIFO, so they are committed in the order the machine asked for them.

// tenureView is the machine's state as other goroutines may read it.
type tenureView struct {
	phase       tenure.Phase
	role        string
	epoch       uint64
	actingUntil tenure.Time
	storage     string
	blocked     string
}

// viewOf is the replicated state as the machine reads it.
func viewOf(v quorum.View) tenure.View {
	return tenure.View{Epoch: v.Epoch, Holder: v.Holder, HolderState: v.HolderState, LeaseOf: v.LeaseOf, Formers: v.Formers,
		Unconfirmed: v.Unconfirmed, Standby: v.Standby, Watchdogs: v.Watchdogs}
}

// now reads the lease clock.
func (d *Daemon) now() tenure.Time { return tenure.Time(quorum.Now()) }

func (d *Daemon) machineConfig() tenure.Config {
	cfg := d.config()
	fenceable, watchdog := map[string]bool{}, map[string]bool{}
	for _, n := range cfg.Nodes {
		fenceable[n.Name] = len(topology(cfg, n.Name)) > 0
		watchdog[n.Name] = len(n.Fence) > 0 && n.Fence[len(n.Fence)-1].Watchdog
	}
	self, _ := cfg.NodeByName(d.self)
	return tenure.Config{
		Self:            d.self,
		Timing:          cfg.Timing.Tenure(),
		Storage:         d.opts.Resource != nil,
		MonitorInterval: cfg.Storage.MonitorInterval.D(),
		Witness:         self != nil && self.Witness(),
		Fenceable:       fenceable,
		TokenStorage:    cfg.Storage.ChecksTokens,
		WatchdogLevel:   watchdog,
	}
}

// post hands an event to the control loop; it gives up once the loop ended.
func (d *Daemon) post(ev tenure.Event) {
	select {
	case d.events <- ev:
	case <-d.loopDone:
	}
}

// SetIneligible records (reason != "") or clears (reason == "") why this
// node may not take primacy, for one source (e.g. "unfence", "probe"). The
// control loop reads it at its next step; an ineligible leader hands
// leadership on.
func (d *Daemon) SetIneligible(source, reason string) {
	d.ineligibleMu.Lock()
	if reason == "" {
		delete(d.ineligible, source)
	} else {
		d.ineligible[source] = reason
	}
	d.ineligibleMu.Unlock()
	select {
	case d.nudge <- struct{}{}:
	default:
	}
}

// Ineligible says why this node may not take primacy ("" = it may).
func (d *Daemon) Ineligible() string {
	d.ineligibleMu.Lock()
	defer d.ineligibleMu.Unlock()
	var why []string
	for _, k := range slices.Sorted(maps.Keys(d.ineligible)) {
		why = append(why, k+": "+d.ineligible[k])
	}
	return strings.Join(why, "; ")
}

// reconfigureTenure hands the tenure machine the configuration as it now
// stands (after a live reload; the timing never changes live).
func (d *Daemon) reconfigureTenure() { d.post(tenure.Reconfigured{Config: d.machineConfig()}) }

// handOff asks this node to hand primacy over gracefully: release the
// storage (committed), then transfer raft leadership to `to` ("" = any).
func (d *Daemon) handOff(to string) { d.post(tenure.HandoverAsked{To: to}) }

// controlLoop runs the machine until it is done (after a graceful stop) or
// ctx ends (hard stop). stop asks for the graceful stop.
func (d *Daemon) controlLoop(ctx context.Context, stop <-chan struct{}) {
	defer close(d.loopDone)
	m := tenure.New(d.machineConfig())
	d.machine = m
	t := d.cfg.Timing.Tenure()
	timer := time.NewTimer(0)
	defer timer.Stop()
	// The machine's deadlines are on the lease clock (CLOCK_BOOTTIME); a
	// boot-time timer keeps them even across a suspend. Without one (no
	// timerfd), the loop polls while a tenure runs instead.
	var deadline <-chan struct{}
	boot, err := quorum.NewBootTimer()
	if err != nil {
		d.log.Warn("no boot-time timer: polling the lease clock", "every", t.PollInterval(), "err", err)
	} else {
		defer boot.Close()
		deadline = boot.C()
	}
	var ev tenure.Event
	for {
		changed := d.raft.FSM().Changed() // before reading the state: no missed change
		now := d.now()
		before := m.Phase()
		acts := m.Step(tenure.Input{Now: now, Leader: d.raft.IsLeader(), View: viewOf(d.raft.FSM().View()),
			Ineligible: d.Ineligible(), Event: ev})
		d.publish(m, before)
		for _, a := range acts {
			d.act(m, a)
		}
		if m.Done() {
			return
		}
		// Wake for the machine's next deadline; an idle loop still beats
		// for the service watchdog.
		wait := d.idleInterval()
		switch w := m.Wake(now); {
		case boot != nil && w == tenure.Never && boot.Stop() == nil:
			// nothing due: the idle timer beats
		case boot != nil && w != tenure.Never && boot.Reset(quorum.Mono(w)) == nil:
			// The deadline wakes the loop (and so beats) first when it
			// falls within the idle interval; the idle timer is then
			// only its backstop.
			if dl := max(w.Sub(now), 0); dl < wait {
				wait += dl
			}
		default:
			// No boot-time timer: Go's timers stand still in a
			// suspend, the lease clock does not, so poll it while a
			// tenure runs.
			if m.Phase() != tenure.Secondary {
				wait = min(wait, t.PollInterval())
			}
			if w != tenure.Never {
				wait = min(wait, max(w.Sub(d.now()), 0))
			}
		}
		timer.Reset(wait)
		ev = nil
		select {
		case <-ctx.Done():
			return
		case <-stop:
			stop = nil
			ev = tenure.ShutdownAsked{}
		case ev = <-d.events:
		case <-d.nudge:
		case <-changed:
		case <-d.raft.LeaderCh():
		case <-timer.C:
		case <-deadline:
		}
		d.beat()
	}
}

// idleInterval is how often an idle loop beats: every heartbeat, and often
// enough for the service watchdog.
func (d *Daemon) idleInterval() time.Duration {
	i := d.cfg.Timing.Heartbeat.D()
	if w := d.opts.WatchdogInterval; w > 0 && w/4 < i {
		i = w / 4
	}
	return i
}

// publish makes the machine's state visible to the API, gossip and logs.
func (d *Daemon) publish(m *tenure.Machine, before tenure.Phase) {
	v := &tenureView{phase: m.Phase(), role: m.Role(), epoch: m.Epoch(), actingUntil: m.ActingUntil(),
		storage: m.Storage(), blocked: m.BlockedReason()}
	old := d.view.Swap(v)
	if after := v.phase; after != before {
		d.watchdogAfter(before, after)
		d.alertPhase(before, after, v)
		log := d.log.With("epoch", m.Epoch())
		if before == tenure.Acquiring && after != tenure.Secondary {
			d.grantedAt = d.now()
		}
		switch {
		case after == tenure.Serving:
			log.Info("primary: acting", "since_grant", d.now().Sub(d.grantedAt).Round(time.Millisecond))
		case after == tenure.Blocked:
			log.Error("takeover BLOCKED", "reason", v.blocked)
			d.metrics.takeoverBlocked()
		case (after == tenure.Demoting || after == tenure.Releasing) && before <= tenure.Serving:
			log.Warn("demoting", "reason", m.Demotion().String())
		}
	}
	if old == nil || old.role != v.role || old.epoch != v.epoch || old.storage != v.storage {
		d.SetMetaNow()
	}
}

// tenureCtx is the context of the current tenure's in-flight work; a Cancel
// action ends it.
func (d *Daemon) tenureCtx() context.Context {
	if d.tctx == nil {
		d.tctx, d.tcancel = context.WithCancel(d.hardCtx)
	}
	return d.tctx
}

// act carries out one action.
func (d *Daemon) act(m *tenure.Machine, a tenure.Action) {
	t := d.cfg.Timing
	timeout := d.commitTimeout()
	switch a := a.(type) {
	case tenure.Acquire:
		d.logWrite(func() {
			res, err := d.raft.Apply(quorum.Command{Op: quorum.OpAcquire, Node: d.self, Time: time.Now()}, timeout)
			if err != nil {
				d.log.Warn("acquire epoch", "err", err)
				d.post(tenure.AcquireDone{Err: err})
				return
			}
			g := res.(quorum.Grant)
			d.log.Info("elected: epoch granted", "epoch", g.Epoch, "previous", g.Previous, "lease_of", g.LeaseOf)
			d.post(tenure.AcquireDone{Grant: tenure.Grant{Epoch: g.Epoch, Previous: g.Previous, LeaseOf: g.LeaseOf}})
		})
	case tenure.Confirm:
		d.logWrite(func() {
			err := d.raft.Confirm(t.Lease.D())
			// A renewal slower than a heartbeat eats into the lease: the
			// early sign of a primary about to give it up.
			if now := d.now(); err == nil && now.Sub(a.T0) > t.Heartbeat.D() {
				d.log.Warn("lease renewal slow", "epoch", a.Epoch, "took", now.Sub(a.T0).Round(time.Millisecond),
					"lease_left", max(t.Tenure().ActingUntil(a.T0).Sub(now), 0).Round(time.Millisecond))
			}
			d.post(tenure.ConfirmDone{Epoch: a.Epoch, T0: a.T0, Err: err})
		})
	case tenure.AskBound:
		ctx := d.tenureCtx()
		d.group.Go(func() {
			bound, ok := d.leaseBound(ctx, a.Former)
			if ok {
				d.log.Info("lease of the former primary bounded by a majority", "epoch", a.Epoch, "former", a.Former,
					"wait_left", max(0, t.Tenure().SuccessorWait(bound).Sub(d.now())).Round(time.Millisecond))
			}
			d.post(tenure.BoundDone{Epoch: a.Epoch, Bound: bound, OK: ok})
		})
	case tenure.Record:
		d.logWrite(func() { d.setHolderState(a.Epoch, a.State, a.Reason) })
	case tenure.Fence:
		ctx := d.tenureCtx()
		d.group.Go(func() {
			failed := map[string]string{}
			for _, n := range a.Targets {
				if err := d.fencer.Fence(ctx, n, a.Reason, a.Epoch); err != nil {
					failed[n] = err.Error()
				}
			}
			d.post(tenure.FenceDone{Epoch: a.Epoch, Failed: failed})
		})
	case tenure.MountIntent:
		d.logWrite(func() {
			// Armed first: the advertisement must be true from the
			// moment the storage may start.
			wd := d.armWatchdog()
			_, err := d.raft.Apply(quorum.Command{Op: quorum.OpState, Node: d.self, Epoch: a.Epoch, State: quorum.HolderMounting, Watchdog: wd}, timeout)
			d.post(tenure.MountIntentDone{Epoch: a.Epoch, Err: err})
		})
	case tenure.Start:
		ctx := d.tenureCtx()
		d.group.Go(func() {
			d.post(tenure.StartDone{Epoch: a.Epoch, Err: d.opts.Resource.Start(ctx, a.Epoch, a.Previous)})
		})
	case tenure.Expire:
		d.logWrite(func() { d.post(tenure.ExpireDone{Epoch: a.Epoch, Err: d.recordExpiry(a)}) })
	case tenure.Monitor:
		ctx := d.tenureCtx()
		d.group.Go(func() {
			mctx, cancel := context.WithTimeout(ctx, d.cfg.Storage.MonitorInterval.D())
			err := d.opts.Resource.Monitor(mctx)
			cancel()
			if ctx.Err() != nil {
				return // the tenure ended; the result no longer matters
			}
			d.post(tenure.MonitorDone{Epoch: a.Epoch, Err: err})
		})
	case tenure.Stop:
		grace := max(a.Deadline.Sub(d.now()), 0)
		d.group.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			err := d.opts.Resource.Stop(ctx)
			cancel()
			d.post(tenure.StopDone{Epoch: a.Epoch, Err: err})
		})
	case tenure.Release:
		d.logWrite(func() { d.post(tenure.ReleaseDone{Epoch: a.Epoch, Err: d.release(a.Epoch, a.Reason)}) })
	case tenure.Transfer:
		d.group.Go(func() { d.post(tenure.TransferDone{Err: d.transfer(a.To)}) })
	case tenure.Cancel:
		if d.tcancel != nil {
			d.tcancel()
			d.tctx, d.tcancel = nil, nil
		}
	case tenure.SelfFence:
		d.log.Error("storage did not stop within the grace period: self-fencing", "epoch", m.Epoch(), "reason", a.Reason)
		d.opts.SelfFence(a.Reason)
	default:
		d.log.Error("tenure: unknown action", "action", fmt.Sprintf("%T", a))
	}
}

// logWrite queues a write to the replicated log; writes run one at a time,
// in the order queued.
func (d *Daemon) logWrite(f func()) {
	select {
	case d.writes <- f:
	case <-d.loopDone:
	}
}

// writeLoop runs the queued log writes until stop is closed.
func (d *Daemon) writeLoop(stop <-chan struct{}) {
	for {
		select {
		case f := <-d.writes:
			f()
		case <-stop:
			return
		}
	}
}

// recordExpiry commits, for each target, that it is confirmed stopped
// without a fence: its lease certainly ended and the storage checks tokens,
// or its advertised watchdog has reset it.
func (d *Daemon) recordExpiry(a tenure.Expire) error {
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(a.Targets)) {
		kind, reason := stonith.KindExpiry, "taken over by lease expiry (storage checks tokens)"
		if a.Targets[n] == tenure.ExpiryWatchdog {
			kind, reason = stonith.KindWatchdog, "confirmed by watchdog timeout"
		}
		now := time.Now()
		rec := stonith.Record{Kind: kind, Target: n, Reason: reason, RequestedBy: d.self + " (takeover)", Executor: d.self,
			Epoch: a.Epoch, Started: now, Finished: now, Outcome: stonith.OutcomeSuccess}
		if _, err := d.raft.Apply(quorum.Command{Op: quorum.OpRecord, Record: &rec}, d.commitTimeout()); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
			continue
		}
		d.log.Warn("former holder confirmed stopped without a fence", "epoch", a.Epoch, "target", n, "how", reason)
	}
	return errors.Join(errs...)
}

// successor is the node a leader that may not hold primacy (a witness, a
// standby or ineligible node) hands leadership to: the first in the
// detector's rank order that may hold primacy, is alive in gossip, and is
// not the previous leader gone silent (it is most likely dead: this node
// was elected because it was silent, and gossip takes seconds to see it).
// raft's own choice is the most up-to-date voter, which can be exactly
// that node, and then the transfer only times out. "" if there is none.
func (d *Daemon) successor() string {
	cfg := d.config()
	standby := d.raft.FSM().View().Standby
	mayNot := mayNotHold(cfg, standby)
	alive := map[string]bool{}
	for _, m := range d.members.Members() {
		alive[m.Name] = m.State == "alive"
	}
	prev, since, heard := d.raft.PreviousLeader()
	silent := heard && since >= cfg.Timing.Tenure().Raft().Detect
	for _, n := range rankOrder(cfg, standby, d.self) {
		switch {
		case mayNot(n):
			return "" // the rest may not hold primacy either
		case !alive[n], n == prev && silent:
			continue
		}
		return n
	}
	return ""
}

func (d *Daemon) commitTimeout() time.Duration { return d.cfg.Timing.Lease.D() }

func (d *Daemon) setHolderState(epoch uint64, state, reason string) {
	if _, err := d.raft.Apply(quorum.Command{Op: quorum.OpState, Node: d.self, Epoch: epoch, State: state, Reason: reason}, d.commitTimeout()); err != nil {
		d.log.Warn("commit holder state", "state", state, "err", err)
	}
}

// release commits that this node stopped the storage it held at epoch; a
// successor then takes over without fencing. If it cannot be committed,
// the successor fences this node, which is also safe.
func (d *Daemon) release(epoch uint64, reason string) error {
	c := quorum.Command{Op: quorum.OpRelease, Node: d.self, Epoch: epoch, Reason: reason, Time: time.Now()}
	var err error
	if d.raft.IsLeader() {
		if _, err = d.raft.Apply(c, d.commitTimeout()); err == nil {
			return nil
		}
		if d.raft.IsLeader() {
			d.log.Warn("release not committed yet", "epoch", epoch, "err", err)
			return err
		}
	}
	ctx, cancel := context.WithTimeout(d.hardCtx, d.cfg.Timing.Lease.D())
	defer cancel()
	if err = d.forwardCommand(ctx, c); err != nil {
		d.log.Warn("release not recorded; the next primary will fence this node", "epoch", epoch, "err", err)
	}
	return err
}

// transfer hands raft leadership to `to` ("" = the successor, see
// successor; raft's choice when there is none).
func (d *Daemon) transfer(to string) error {
	var err error
	if to == "" {
		to = d.successor()
	}
	if to != "" {
		n, _ := d.cfg.NodeByName(to)
		err = d.raft.TransferLeadershipTo(to, n.Raft)
	} else {
		err = d.raft.TransferLeadership()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		target := to
		if target == "" {
			target = "any"
		}
		d.log.Warn("leadership transfer", "to", target, "err", err)
	}
	return err
}
