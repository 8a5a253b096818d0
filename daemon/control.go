package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// The control loop runs this node's tenure driver (package driver, which
// runs the tenure machine). One goroutine owns the driver; the driver's
// interfaces are implemented here over raft, gossip, the fencing engine and
// the resource group: each blocking call runs on a goroutine of the
// daemon's group and hands its result back to the loop (do).

// machineSnapshot is the tenure machine's state as other goroutines may read it.
type machineSnapshot struct {
	phase       tenure.Phase
	role        string
	epoch       uint64
	actingUntil tenure.Time
	storage     string
	blocked     string   // why the takeover is blocked, while it retries too
	blockedOn   []string // the nodes it waits for
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
	tokens, unchecked := cfg.TokenChecks()
	return tenure.Config{
		Self:            d.self,
		Timing:          cfg.Timing.Tenure(),
		Storage:         d.opts.Resource != nil,
		MonitorInterval: cfg.Storage.MonitorInterval.D(),
		Witness:         self != nil && self.Witness(),
		Fenceable:       fenceable,
		TokenStorage:    tokens,
		Unchecked:       unchecked,
		WatchdogLevel:   watchdog,
	}
}

func (d *Daemon) driverConfig() driver.Config {
	var nodes []string
	for _, n := range d.cfg.Nodes {
		nodes = append(nodes, n.Name)
	}
	_, probe := d.opts.Resource.(prober)
	return driver.Config{Machine: d.machineConfig(), Nodes: nodes, Majority: d.cfg.Majority(), Logger: d.log,
		Probe: probe, Unfence: unfencePlan(d.fence.unfence), Boot: d.ctl.boot}
}

// do runs f on the control loop; it reports false (and drops f) once the
// loop ended.
func (d *Daemon) do(f func()) bool {
	select {
	case d.ctl.calls <- f:
		return true
	case <-d.ctl.loopDone:
		return false
	}
}

// async runs work on a goroutine of the daemon's group and the callback it
// returns on the control loop.
func (d *Daemon) async(work func() func()) {
	d.life.tasks.Go(func() {
		if cb := work(); cb != nil {
			d.do(cb)
		}
	})
}

// SetIneligible records (reason != "") or clears (reason == "") why this
// node may not take primacy, for one source (e.g. "unfence", "probe"). The
// control loop reads it at its next step; an ineligible leader hands
// leadership on.
func (d *Daemon) SetIneligible(source, reason string) {
	d.ctl.ineligibleMu.Lock()
	was := len(d.ctl.ineligible) > 0
	if reason == "" {
		delete(d.ctl.ineligible, source)
	} else {
		d.ctl.ineligible[source] = reason
	}
	now := len(d.ctl.ineligible) > 0
	d.ctl.ineligibleMu.Unlock()
	if was != now {
		// Advertised: a leader that may not hold primacy hands leadership
		// only to a node that may (successor).
		d.SetMetaNow()
	}
	d.nudgeControl()
}

// nudgeControl wakes the control loop: what Ineligible says may have
// changed.
func (d *Daemon) nudgeControl() {
	select {
	case d.ctl.nudge <- struct{}{}:
	default:
	}
}

// Ineligible says why this node may not take primacy ("" = it may).
func (d *Daemon) Ineligible() string {
	d.ctl.ineligibleMu.Lock()
	defer d.ctl.ineligibleMu.Unlock()
	var why []string
	for _, k := range slices.Sorted(maps.Keys(d.ctl.ineligible)) {
		why = append(why, k+": "+d.ctl.ineligible[k])
	}
	return strings.Join(why, "; ")
}

// reconfigureTenure hands the tenure machine the configuration as it now
// stands (after a live reload; the timing never changes live).
func (d *Daemon) reconfigureTenure() {
	cfg := d.machineConfig()
	d.do(func() { d.ctl.drv.Reconfigure(cfg) })
}

// handOff asks this node to hand primacy over gracefully: release the
// storage (committed), then transfer raft leadership to `to` ("" = any).
func (d *Daemon) handOff(to string) { d.do(func() { d.ctl.drv.HandOff(to) }) }

// controlLoop runs the driver until the machine is done (after a graceful
// stop) or ctx ends (hard stop). stop asks for the graceful stop.
func (d *Daemon) controlLoop(ctx context.Context, stop <-chan struct{}) {
	defer close(d.ctl.loopDone)
	d.ctl.drv = driver.New(d.driverConfig(), driver.Env{Log: raftLog{d}, Peers: gossipPeers{d}, Clock: bootClock{d}, Effects: effects{d},
		Observer: &observer{d: d}, Ineligible: d.Ineligible, NotYet: d.sessionsReason, Context: d.life.hardCtx})
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
	m := d.ctl.drv.Machine()
	d.ctl.drv.Start()
	for {
		changed := d.raft.FSM().Changed() // before reading the state: no missed change
		now := d.now()
		d.ctl.drv.Step()
		if d.ctl.drv.Done() {
			return
		}
		// Wake for the machine's next deadline; an idle loop still beats
		// for the service watchdog.
		wait := d.idleInterval()
		switch w := d.ctl.drv.Wake(now); {
		case d.ctl.drv.Pending():
			wait = 0 // the next event
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
		select {
		case <-ctx.Done():
			return
		case <-stop:
			stop = nil
			d.ctl.drv.Shutdown()
		case f := <-d.ctl.calls:
			f()
		case <-d.ctl.nudge:
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

// observer makes the machine's state visible to the API, gossip, logs,
// alerts and metrics.
type observer struct {
	d         *Daemon
	grantedAt tenure.Time
}

func (o *observer) Stepped(before tenure.Phase, _ tenure.Event, acts []tenure.Action, m *tenure.Machine) {
	d := o.d
	d.ctl.changes.stepped(before, acts, m)
	v := &machineSnapshot{phase: m.Phase(), role: m.Role(), epoch: m.Epoch(), actingUntil: m.ActingUntil(),
		storage: m.Storage(), blocked: m.BlockedReason(), blockedOn: m.BlockedOn()}
	old := d.ctl.view.Swap(v)
	switch wasBlocked := old != nil && old.blocked != ""; {
	case v.blocked != "" && !wasBlocked:
		d.log.Error("takeover BLOCKED", "epoch", m.Epoch(), "reason", v.blocked)
		d.metrics.takeoverBlocked()
		d.alertBlocked(v)
	case v.blocked == "" && wasBlocked:
		how := d.unblockedHow(old.blockedOn, v, m.Unblocked())
		d.log.Warn("takeover unblocked", "epoch", old.epoch, "how", how)
		d.alertUnblocked(old.epoch, how)
	}
	if after := v.phase; after != before {
		d.alertPhase(before, after, v)
		log := d.log.With("epoch", m.Epoch())
		if before == tenure.Acquiring && after != tenure.Secondary {
			o.grantedAt = d.now()
		}
		switch {
		case after == tenure.Serving:
			log.Info("primary: acting", "since_grant", d.now().Sub(o.grantedAt).Round(time.Millisecond))
		case (after == tenure.Demoting || after == tenure.Releasing) && before <= tenure.Serving:
			log.Warn("demoting", "reason", m.Demotion().String())
		}
	}
	if old == nil || old.role != v.role || old.epoch != v.epoch || old.storage != v.storage {
		d.SetMetaNow()
	}
}

func (o *observer) FenceStarted(req driver.FenceRequest) {
	o.d.metrics.fenceStarted()
	o.d.alertFenceStarted(req)
}

func (o *observer) FenceDone(rec fencing.Record) {
	o.d.metrics.fenceDone(rec)
	o.d.alertFenceDone(rec)
}

func (o *observer) Ineligible(source, reason string) { o.d.SetIneligible(source, reason) }

// raftLog is the driver's Log: raft and the replicated state.
type raftLog struct{ d *Daemon }

func (l raftLog) IsLeader() bool { return l.d.raft.IsLeader() }
func (l raftLog) Leader() string { return l.d.raft.Leader() }
func (l raftLog) Joined() bool   { return l.d.life.joined.Load() != 0 }
func (l raftLog) Holders(group string) quorum.Holders {
	return l.d.raft.FSM().HoldersOf(group)
}
func (l raftLog) History() []fencing.Record { return l.d.raft.FSM().State().History }
func (l raftLog) SinceContact(leader string) (time.Duration, bool) {
	return l.d.raft.SinceContact(leader)
}

func (l raftLog) Apply(c quorum.Command, done func(any, error)) {
	l.d.async(func() func() {
		res, err := l.d.raft.Apply(c, l.d.commitTimeout())
		return func() { done(res, err) }
	})
}

func (l raftLog) Acquire(c quorum.Command, _ tenure.Time, done func(any, error)) { l.Apply(c, done) }

// Propose commits c here when this node leads, else on the leader, and
// hands back the state machine's answer. Only a group other than the
// default one needs it, and this daemon runs the default group alone
// (docs/groups.md, step 4).
func (l raftLog) Propose(c quorum.Command, _ tenure.Time, done func(any, error)) {
	d := l.d
	d.async(func() func() {
		ctx, cancel := context.WithTimeout(d.life.hardCtx, d.cfg.Timing.Lease.D())
		defer cancel()
		res, err := d.proposeCommand(ctx, c)
		return func() { done(res, err) }
	})
}

// Move: this daemon runs the default group alone, which moves with raft
// leadership (Transfer).
func (l raftLog) Move(group, _ string, done func(error)) {
	l.d.async(func() func() {
		return func() {
			done(fmt.Errorf("group %s: this fenced places no group other than the default one yet", group))
		}
	})
}

func (l raftLog) Confirm(_ string, _ uint64, _ tenure.Time, done func(error)) {
	l.d.async(func() func() {
		start := time.Now()
		err := l.d.confirm(l.d.cfg.Timing.Lease.D())
		l.d.metrics.leaseRenewed(time.Since(start), l.d.cfg.Timing.Heartbeat.D(), err)
		return func() { done(err) }
	})
}

// confirm renews the lease by whichever path completes first: raft's
// barrier, or a renewal round over the beacon channel (quorum.Detector.Renew;
// README, "Lease"). Both show that a majority heard from this leader after
// the call; under heavy packet loss raft's one stream per follower may
// stall for seconds while a round's datagrams, sent again every Detect/8,
// still get through. It fails only when both failed.
func (d *Daemon) confirm(timeout time.Duration) error {
	type result struct {
		round bool
		err   error
	}
	ch := make(chan result, 2)
	// The round ends with the call (once the barrier won, it would only
	// send probes no one needs); raft's barrier cannot be called back.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() { ch <- result{false, d.raft.Confirm(timeout)} }()
	go func() { ch <- result{true, d.detector.Renew(ctx)} }()
	var errs []error
	for range 2 {
		r := <-ch
		if r.err == nil {
			path := "barrier"
			if r.round {
				path = "round"
			}
			d.metrics.renewed(path)
			return nil
		}
		if !errors.Is(r.err, quorum.ErrNoRenewRound) {
			errs = append(errs, r.err)
		}
	}
	return errors.Join(errs...)
}

func (l raftLog) Transfer(to string, done func(error)) {
	l.d.async(func() func() {
		err := l.d.transfer(to)
		return func() { done(err) }
	})
}

// gossipPeers is the driver's Peers: requests over gossip.
type gossipPeers struct{ d *Daemon }

func (p gossipPeers) Forward(c quorum.Command, done func(error)) {
	d := p.d
	d.async(func() func() {
		ctx, cancel := context.WithTimeout(d.life.hardCtx, d.cfg.Timing.Lease.D())
		defer cancel()
		err := d.forwardCommand(ctx, c)
		return func() { done(err) }
	})
}

func (p gossipPeers) Boot(node string) string {
	m, _ := p.d.members.LastMeta(node)
	return m.Boot
}

func (p gossipPeers) Contact(ctx context.Context, node, leader string, done func(time.Duration, bool, bool)) {
	d := p.d
	body, _ := json.Marshal(contactReq{Leader: leader})
	d.async(func() func() {
		out, err := d.members.Call(ctx, node, fwdContact, body)
		var resp contactResp
		if err != nil || json.Unmarshal(out, &resp) != nil {
			return func() { done(0, false, false) }
		}
		return func() { done(time.Duration(resp.ElapsedNs), resp.Known, true) }
	})
}

// bootClock is the driver's Clock: the lease clock, and Go's timers for
// the short waits the driver makes (retries, a query's deadline).
type bootClock struct{ d *Daemon }

func (c bootClock) Now() tenure.Time { return c.d.now() }
func (c bootClock) Wall() time.Time  { return time.Now() }
func (c bootClock) After(dur time.Duration, f func()) func() {
	t := time.AfterFunc(dur, func() { c.d.do(f) })
	return func() { t.Stop() }
}

// effects is the driver's Effects: the fencing engine, the resource group,
// the watchdog, the self-fence.
type effects struct{ d *Daemon }

func (e effects) Fence(s *driver.Scope, fr driver.FenceRequest, done func(fencing.Record)) {
	d := e.d
	req := d.engineRequest(fr)
	// A fence's progress (each attempt) is queued for the log, not waited
	// for: the fence's own result must not wait on a commit (under packet
	// loss one took seconds, after the read-back had confirmed the target
	// off). Queued in order on this leader, each lands before the final
	// record the driver commits after the fence returns (ApplyQueued).
	req.OnProgress = func(r fencing.Record) {
		wait := d.raft.ApplyQueued(quorum.Command{Op: quorum.OpRecord, Record: &r}, d.commitTimeout())
		go func() {
			if _, err := wait(); err != nil {
				d.log.Warn("commit fence progress", "fence_id", r.ID, "err", err)
			}
		}()
	}
	ctx := s.Context()
	d.async(func() func() {
		rec := d.fence.engine.Fence(ctx, req)
		return func() { done(rec) }
	})
}

func (e effects) FencePath(target string) string { return e.d.fencePathTo(target) }

func (e effects) Start(s *driver.Scope, epoch uint64, previous string, done func(error)) {
	d := e.d
	if d.opts.Resource == nil {
		done(nil)
		return
	}
	ctx := s.Context()
	d.async(func() func() {
		err := d.opts.Resource.Start(ctx, epoch, previous)
		return func() { done(err) }
	})
}

func (e effects) Monitor(s *driver.Scope, done func(error)) {
	d := e.d
	if d.opts.Resource == nil {
		done(nil)
		return
	}
	ctx := s.Context()
	d.async(func() func() {
		mctx, cancel := context.WithTimeout(ctx, d.cfg.Storage.MonitorInterval.D())
		err := d.opts.Resource.Monitor(mctx)
		cancel()
		if ctx.Err() != nil {
			return nil // the tenure ended; the result no longer matters
		}
		return func() { done(err) }
	})
}

func (e effects) Stop(deadline tenure.Time, done func(error)) {
	d := e.d
	if d.opts.Resource == nil {
		done(nil)
		return
	}
	grace := max(deadline.Sub(d.now()), 0)
	d.async(func() func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		err := d.opts.Resource.Stop(ctx)
		cancel()
		return func() { done(err) }
	})
}

func (e effects) Probe(s *driver.Scope, done func(error)) {
	d := e.d
	p, ok := d.opts.Resource.(prober)
	if !ok {
		done(nil)
		return
	}
	ctx := s.Context()
	d.async(func() func() {
		err := p.Probe(ctx)
		return func() { done(err) }
	})
}

func (e effects) Unfence(s *driver.Scope, done func(fencing.Record, bool)) {
	d := e.d
	ctx := s.Context()
	d.async(func() func() {
		rec, ok := d.fence.unfence.Attempt(ctx)
		return func() { done(rec, ok) }
	})
}

func (e effects) Exit(reason string) {
	e.d.log.Error("SELF-FENCE FAILED: this node could not reset itself; the daemon exits, and its probe at the next start tries the stop again",
		"reason", reason)
	e.d.opts.Exit(reason)
}

func (e effects) ArmWatchdog() time.Duration   { return e.d.armWatchdog() }
func (e effects) DisarmWatchdog()              { e.d.disarmWatchdog() }
func (e effects) SelfFence(reason string) bool { return e.d.opts.SelfFence(reason) }

// runFence runs req through the driver (commit, engine, commit) and waits
// for its record: admin fences from the API.
func (d *Daemon) runFence(ctx context.Context, req driver.FenceRequest) fencing.Record {
	ch := make(chan fencing.Record, 1)
	stopped := fencing.Record{Kind: fencing.KindFence, Target: req.Target, Action: req.Action, Outcome: fencing.OutcomeUnknown,
		Error: "the daemon is stopping", Started: time.Now(), Finished: time.Now()}
	if !d.do(func() { d.ctl.drv.Fence(driver.NewScope(ctx), req, func(r fencing.Record) { ch <- r }) }) {
		return stopped
	}
	select {
	case r := <-ch:
		return r
	case <-d.ctl.loopDone:
		return stopped
	}
}

// successor is the node a leader that may not hold primacy hands
// leadership to (quorum.Successor), "" if none; any is false when no other
// node may hold primacy now: a witness or standby, or one that advertises
// that it is not eligible (its unfencing at start, its probe or its
// configuration).
func (d *Daemon) successor() (to string, any bool) {
	cfg := d.config()
	standby := d.raft.FSM().Holders().Standby
	alive := map[string]bool{}
	ineligible := map[string]bool{}
	for _, m := range d.members.Members() {
		alive[m.Name] = m.State == "alive"
		ineligible[m.Name] = m.Meta.Ineligible
	}
	silent := ""
	if prev, since, heard := d.raft.PreviousLeader(); heard && since >= cfg.Timing.Tenure().Raft().Detect {
		silent = prev
	}
	held := mayNotHold(cfg, standby)
	mayNot := func(n string) bool { return held(n) || ineligible[n] }
	voters := make([]string, len(cfg.Nodes))
	for i, n := range cfg.Nodes {
		voters[i] = n.Name
	}
	return quorum.Successor(quorum.RankOrder(voters, d.self, mayNot), mayNot, func(n string) bool { return alive[n] }, silent)
}

// transferRefusal is why an admin's transfer to `to` ("" = any node)
// cannot move the group now, nil if it can. It is refused up front: a
// transfer goes by a release here, and with no node able to take over
// the group would only be stopped and started again on this node.
func (d *Daemon) transferRefusal(to string) error {
	cfg := d.config()
	standby := d.raft.FSM().Holders().Standby
	members := d.members.Members()
	why := func(n string) string {
		nd, _ := cfg.NodeByName(n)
		switch {
		case nd.Witness():
			return "a witness"
		case standby[n]:
			return "in standby"
		}
		for _, m := range members {
			if m.Name != n {
				continue
			}
			if m.State == "dead" || m.State == "left" {
				return "not reachable (gossip: " + m.State + ")"
			}
			// Not eligible is no refusal: eligibility comes back (device
			// sessions opening, a configuration being accepted), and
			// leadership handed to such a node is handed on.
			return ""
		}
		return "not reachable (not in gossip)"
	}
	if to != "" {
		if w := why(to); w != "" {
			return &userError{fmt.Errorf("%s cannot take the group: it is %s", to, w)}
		}
		return nil
	}
	var reasons []string
	for _, n := range cfg.Nodes {
		if n.Name == d.self {
			continue
		}
		w := why(n.Name)
		if w == "" {
			return nil
		}
		reasons = append(reasons, n.Name+" is "+w)
	}
	return &userError{fmt.Errorf("no other node may take the group now (%s): it stays on %s", strings.Join(reasons, ", "), d.self)}
}

func (d *Daemon) commitTimeout() time.Duration { return d.cfg.Timing.Lease.D() }

// transfer hands raft leadership to `to` ("" = the successor, see
// successor; raft's choice when there is none). With no node that may hold
// primacy it keeps leadership and returns tenure.ErrNoSuccessor: a
// transfer would only move the same refusal on, and cost a raft term
// each time.
func (d *Daemon) transfer(to string) error {
	var err error
	if to == "" {
		var any bool
		if to, any = d.successor(); !any {
			if !d.ctl.keptLeadership.Swap(true) {
				d.log.Warn("no other node may hold primacy now (each is a witness, a standby or not eligible): keeping raft leadership until one may; this node does not take primacy either")
			}
			return tenure.ErrNoSuccessor
		}
	}
	if d.ctl.keptLeadership.Swap(false) {
		d.log.Info("a node that may hold primacy is back: handing leadership on", "to", cmp.Or(to, "any"))
	}
	if to != "" {
		n, _ := d.cfg.NodeByName(to)
		err = d.raft.TransferLeadershipTo(to, n.Raft)
	} else {
		err = d.raft.TransferLeadership()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		d.log.Warn("leadership transfer", "to", cmp.Or(to, "any"), "err", err)
	}
	return err
}
