package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fenced/fenced/quorum"
)

// controlLoop makes this node primary whenever it leads a majority, and
// demotes it as soon as it cannot confirm that any more.
func (d *Daemon) controlLoop(ctx context.Context) {
	// raft's leader channel always holds the latest change, so a follower
	// needs no polling; the tick only keeps the main-loop beat going.
	tick := time.NewTicker(d.idleInterval())
	defer tick.Stop()
	for ctx.Err() == nil {
		d.beat()
		if d.raft.IsLeader() && !d.stopping.Load() {
			d.lead(ctx)
			continue
		}
		select {
		case <-ctx.Done():
		case <-d.raft.LeaderCh():
		case <-tick.C:
		}
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

// pollInterval bounds how late a primary notices its lease ran out when a
// timer could not tell it: Go's timers run on CLOCK_MONOTONIC, which stands
// still while the machine is suspended, whereas the lease is measured on
// CLOCK_BOOTTIME. A quarter of the margin (and of the heartbeat), so the
// lateness stays well inside the margin that covers it.
func (d *Daemon) pollInterval() time.Duration {
	t := d.cfg.Timing
	return min(max(min(t.Heartbeat.D(), t.Margin.D())/4, 5*time.Millisecond), 250*time.Millisecond)
}

func (d *Daemon) commitTimeout() time.Duration { return d.cfg.Timing.Lease.D() }

// lead runs one tenure as primary: acquire an epoch, pass the takeover
// gate, start the storage, serve while the lease holds, then demote.
func (d *Daemon) lead(ctx context.Context) {
	t := d.cfg.Timing
	st := d.raft.FSM().State()
	if st.Standby[d.self] {
		// A standby node never takes primacy: hand leadership on.
		if err := d.raft.TransferLeadership(); err != nil {
			d.log.Warn("standby: leadership transfer", "err", err)
			sleepCtx(ctx, t.Heartbeat.D())
		}
		return
	}

	// The acquire entry is itself a majority confirmation created after t0,
	// so it starts the lease (see quorum.Raft.Confirm).
	t0 := quorum.Now()
	res, err := d.raft.Apply(quorum.Command{Op: quorum.OpAcquire, Node: d.self, Time: time.Now()}, d.commitTimeout())
	if err != nil {
		d.log.Warn("acquire epoch", "err", err)
		sleepCtx(ctx, t.Heartbeat.D())
		return
	}
	grant := res.(quorum.Grant)
	granted := quorum.Now()
	d.leaseUntil.Store(int64(t0.Add(t.Lease.D() - t.Margin.D())))
	d.epoch.Store(grant.Epoch)
	d.role.Store(RolePrimaryElect)
	log := d.log.With("epoch", grant.Epoch)
	log.Info("elected: epoch granted", "previous", grant.Previous, "lease_of", grant.LeaseOf)
	d.SetMetaNow()

	tctx, cancelTenure := context.WithCancelCause(ctx)
	defer cancelTenure(nil)
	d.handoffMu.Lock()
	d.tenureCancel = cancelTenure
	pendingHandoff := d.handoffTo != nil
	d.handoffMu.Unlock()
	if pendingHandoff {
		cancelTenure(errHandoff)
	}
	lost := make(chan string, 1)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.renewLease(tctx, lost)
	}()

	reason := ""
	storageFailed := false
	if err := d.takeover(tctx, log, grant, granted); err != nil {
		reason = "takeover: " + err.Error()
	} else if reason = d.startResource(tctx, grant); reason != "" {
		storageFailed = true
	} else {
		d.role.Store(RolePrimary)
		log.Info("primary: acting", "since_grant", quorum.Since(granted).Round(time.Millisecond))
		d.SetMetaNow()
		reason = d.serve(tctx, lost)
		storageFailed = strings.HasPrefix(reason, reasonMonitor)
	}
	if cause := context.Cause(tctx); errors.Is(cause, errHandoff) {
		reason = "graceful handover"
	}
	cancelTenure(nil)
	d.handoffMu.Lock()
	d.tenureCancel = nil
	to := d.handoffTo
	d.handoffTo = nil
	d.handoffMu.Unlock()
	d.demote(log, grant.Epoch, reason)
	standby := d.raft.FSM().State().Standby[d.self]
	if (to != nil || standby || storageFailed) && d.raft.IsLeader() && !d.stopping.Load() {
		// The storage failed here, or the admin asked: after the clean
		// release, let another node take over (no fence needed).
		d.transfer(to)
		if storageFailed {
			sleepCtx(ctx, t.Lease.D())
		}
	}
}

// reasonMonitor starts the demotion reason of a failed storage monitor.
const reasonMonitor = "storage monitor failed"

var errHandoff = errors.New("graceful handover requested")

// handOff asks this node to hand primacy over gracefully: release the
// storage (committed), then transfer raft leadership to `to` ("" = any).
func (d *Daemon) handOff(to string) {
	d.handoffMu.Lock()
	d.handoffTo = &to
	cancel := d.tenureCancel
	d.handoffMu.Unlock()
	if cancel != nil {
		cancel(errHandoff)
		return
	}
	// Not in a tenure: just move leadership.
	d.handoffMu.Lock()
	d.handoffTo = nil
	d.handoffMu.Unlock()
	d.transfer(&to)
}

func (d *Daemon) transfer(to *string) {
	var err error
	if to != nil && *to != "" {
		n, _ := d.cfg.NodeByName(*to)
		err = d.raft.TransferLeadershipTo(*to, n.Raft)
	} else {
		err = d.raft.TransferLeadership()
	}
	if err != nil {
		d.log.Warn("leadership transfer", "to", to, "err", err)
	}
}

// renewLease re-confirms the majority every heartbeat. A renewal started at
// t0 extends the lease to t0 + lease − margin; nothing else extends it.
func (d *Daemon) renewLease(ctx context.Context, lost chan<- string) {
	t := d.cfg.Timing
	tick := time.NewTicker(t.Heartbeat.D())
	defer tick.Stop()
	// The expiry timer fires at the lease's end; the poll covers a suspend
	// (see pollInterval); raft's leader channel reports a lost leadership.
	expiry := time.NewTimer(quorum.Mono(d.leaseUntil.Load()).Sub(quorum.Now()))
	defer expiry.Stop()
	poll := time.NewTicker(d.pollInterval())
	defer poll.Stop()
	renewed := make(chan quorum.Mono, 1)
	inflight := false
	report := func(why string) {
		select {
		case lost <- why:
		default:
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case until := <-renewed:
			inflight = false
			if until > 0 && until > quorum.Mono(d.leaseUntil.Load()) {
				d.leaseUntil.Store(int64(until))
				expiry.Reset(until.Sub(quorum.Now()))
			}
		case <-tick.C:
			if inflight {
				break
			}
			inflight = true
			go func() {
				t0 := quorum.Now()
				var until quorum.Mono
				if err := d.raft.Confirm(t.Lease.D()); err == nil {
					until = t0.Add(t.Lease.D() - t.Margin.D())
				}
				renewed <- until
			}()
		case <-expiry.C:
		case <-poll.C:
		case <-d.raft.LeaderCh():
		}
		d.beat()
		// Fail-safe: stop as soon as the lease cannot be confirmed, without
		// waiting to learn that another node took over.
		if quorum.Now() >= quorum.Mono(d.leaseUntil.Load()) {
			report("lease expired: no confirmed majority contact for lease − margin")
			return
		}
		if !d.raft.IsLeader() {
			report("lost raft leadership")
			return
		}
	}
}

// takeover is the gate between being granted an epoch and acting on it.
// The new primary may act only once every node that might still run the
// storage is confirmed stopped (its committed release, a fence confirmed by
// read-back, or an admin's confirmation), and once the previous primary's
// lease has certainly run out (lease + margin after this grant) or that
// primary is confirmed stopped.
func (d *Daemon) takeover(ctx context.Context, log *slog.Logger, grant quorum.Grant, granted quorum.Mono) error {
	t := d.cfg.Timing
	leaseEnd := granted.Add(t.Lease.D() + t.Margin.D())
	if old := grant.LeaseOf; old != "" && old != d.self {
		// Learn from a majority when the old primary last renewed, so the
		// wait ends a lease after that rather than after this grant.
		if bound, ok := d.leaseBound(ctx, old); ok {
			if end := bound.Add(t.Lease.D() + t.Margin.D()); end < leaseEnd {
				leaseEnd = end
			}
			log.Info("lease of the former primary bounded by a majority", "former", old,
				"wait_left", max(0, leaseEnd.Sub(quorum.Now())).Round(time.Millisecond))
		}
	}
	backoff := time.Second
	var nextTry quorum.Mono
	triedVanished := false
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		changed := d.raft.FSM().Changed() // before reading the state: no missed change
		st := d.raft.FSM().State()
		if st.Epoch != grant.Epoch || st.Holder != d.self {
			return fmt.Errorf("epoch %d superseded by %s at %d", grant.Epoch, st.Holder, st.Epoch)
		}
		var pending []string
		for n := range st.Unconfirmed {
			if n != d.self {
				pending = append(pending, n)
			}
		}
		sort.Strings(pending)
		leaseWait := st.LeaseOf != "" && st.LeaseOf != d.self && quorum.Now() < leaseEnd
		// A former primary that vanished without releasing is fenced too
		// when it has fence devices, once per tenure, even if it never ran
		// the storage: a node that disappears uncleanly is fenced, and a
		// confirmed fence also ends the wait for its lease early. If that
		// fence fails, its lease still runs out and the takeover goes on.
		vanished := st.LeaseOf != "" && st.LeaseOf != d.self && !slices.Contains(pending, st.LeaseOf) &&
			!triedVanished && d.opts.Fencer != nil && len(topology(d.cfg, st.LeaseOf)) > 0
		if len(pending) == 0 && !leaseWait && !vanished {
			return nil
		}
		targets := pending
		if vanished {
			targets = append(targets, st.LeaseOf)
		}
		if len(targets) > 0 && quorum.Now() >= nextTry {
			if len(pending) > 0 && d.opts.Fencer == nil {
				d.setHolderState(grant.Epoch, quorum.HolderBlocked, fmt.Sprintf("%v may still run the storage and no fencer is configured: waiting for `fencectl confirm`", pending))
				nextTry = quorum.Now().Add(time.Hour)
			} else if d.opts.Fencer != nil {
				d.setHolderState(grant.Epoch, quorum.HolderFencing, fmt.Sprintf("fencing %v", targets))
				triedVanished = triedVanished || vanished
				var errs []error
				for _, n := range targets {
					if err := d.opts.Fencer.Fence(ctx, n, fmt.Sprintf("takeover by %s at epoch %d", d.self, grant.Epoch), grant.Epoch); err != nil && slices.Contains(pending, n) {
						errs = append(errs, fmt.Errorf("%s: %w", n, err))
					}
				}
				if err := errors.Join(errs...); err != nil && ctx.Err() == nil {
					why := fmt.Sprintf("every fence path failed (%v); retrying in %s; `fencectl confirm NODE --yes` overrides", err, backoff)
					log.Error("takeover BLOCKED", "reason", why)
					d.metrics.takeoverBlocked()
					d.setHolderState(grant.Epoch, quorum.HolderBlocked, why)
					nextTry = quorum.Now().Add(backoff)
					backoff = min(backoff*2, 30*time.Second)
				}
				continue
			}
		}
		// Wake for a state change, the end of the old lease, the next
		// fence attempt, or a poll (see pollInterval).
		wait := d.pollInterval()
		now := quorum.Now()
		if leaseWait {
			wait = min(wait, leaseEnd.Sub(now))
		}
		if len(targets) > 0 && nextTry > now {
			wait = min(wait, nextTry.Sub(now))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (d *Daemon) setHolderState(epoch uint64, state, reason string) {
	if _, err := d.raft.Apply(quorum.Command{Op: quorum.OpState, Node: d.self, Epoch: epoch, State: state, Reason: reason}, d.commitTimeout()); err != nil {
		d.log.Warn("commit holder state", "state", state, "err", err)
	}
}

// startResource commits the intent, then starts the storage with the epoch
// as token, then commits it as mounted. It returns a reason to demote, or "".
func (d *Daemon) startResource(ctx context.Context, grant quorum.Grant) string {
	res := d.opts.Resource
	if res == nil {
		d.setHolderState(grant.Epoch, quorum.HolderMounted, "")
		return ""
	}
	if _, err := d.raft.Apply(quorum.Command{Op: quorum.OpState, Node: d.self, Epoch: grant.Epoch, State: quorum.HolderMounting}, d.commitTimeout()); err != nil {
		return "commit mount intent: " + err.Error()
	}
	if !d.leaseValid() {
		return "lease expired before mounting"
	}
	d.storage.Store("starting")
	if err := res.Start(ctx, grant.Epoch, grant.Previous); err != nil {
		d.storage.Store("failed")
		return "start storage: " + err.Error()
	}
	d.storage.Store("running")
	d.setHolderState(grant.Epoch, quorum.HolderMounted, "")
	return ""
}

func (d *Daemon) leaseValid() bool { return quorum.Now() < quorum.Mono(d.leaseUntil.Load()) }

// serve runs while this node is primary; it returns the reason to demote.
func (d *Daemon) serve(ctx context.Context, lost <-chan string) string {
	interval := d.cfg.Storage.MonitorInterval.D()
	mon := time.NewTicker(interval)
	defer mon.Stop()
	for {
		// Take the change signal before reading the state, so a change
		// made in between is not missed.
		changed := d.raft.FSM().Changed()
		if d.raft.FSM().State().Standby[d.self] {
			return "standby requested"
		}
		select {
		case <-ctx.Done():
			return "shutting down"
		case why := <-lost:
			return why
		case <-changed:
		case <-mon.C:
			if d.opts.Resource == nil {
				continue
			}
			mctx, cancel := context.WithTimeout(ctx, interval)
			err := d.opts.Resource.Monitor(mctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return reasonMonitor + ": " + err.Error()
			}
		}
	}
}

// demote is the graceful expiry: stop acting at once, stop the storage
// within the grace period (or self-fence), then record the release.
func (d *Daemon) demote(log *slog.Logger, epoch uint64, reason string) {
	d.role.Store(RoleDemoting)
	d.leaseUntil.Store(0)
	log.Warn("demoting", "reason", reason)
	d.SetMetaNow()
	held := d.storage.Load().(string) != "stopped"
	if d.opts.Resource != nil && held {
		d.storage.Store("stopping")
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timing.Grace.D())
		err := d.opts.Resource.Stop(ctx)
		cancel()
		if err != nil {
			d.storage.Store("failed")
			log.Error("storage did not stop within the grace period: self-fencing", "err", err)
			d.opts.SelfFence(fmt.Sprintf("storage did not stop within %s: %v", d.cfg.Timing.Grace, err))
			return
		}
		d.storage.Store("stopped")
	}
	// Nothing runs any more (or never ran): record it, so the successor
	// needs neither a fence nor the lease wait.
	d.release(epoch, reason)
	d.epoch.Store(0)
	if d.stopping.Load() {
		d.role.Store(RoleStopping)
	} else {
		d.role.Store(RoleSecondary)
	}
	d.SetMetaNow()
}

// release commits that this node stopped the storage it held at epoch; a
// successor then takes over without fencing. Best effort: if it cannot be
// committed, the successor fences this node, which is also safe.
func (d *Daemon) release(epoch uint64, reason string) {
	c := quorum.Command{Op: quorum.OpRelease, Node: d.self, Epoch: epoch, Reason: reason, Time: time.Now()}
	if d.raft.IsLeader() {
		if _, err := d.raft.Apply(c, d.commitTimeout()); err == nil {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timing.Lease.D())
	defer cancel()
	if err := d.forwardCommand(ctx, c); err != nil {
		d.log.Warn("release not recorded; the next primary will fence this node", "err", err)
	}
}

func sleepCtx(ctx context.Context, dur time.Duration) {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
