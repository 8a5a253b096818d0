package sim

import (
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

// proc is one run of the fenced daemon on a node: raft's volatile state,
// the leader detector, and the daemon's own tenure driver (package driver)
// over virtual implementations of its interfaces: the simulated raft as
// its Log, the simulated network as its Peers, the node's clock, and the
// node's fence devices and storage as its Effects. The loop is the
// daemon's control loop: one step per event, a step on every change of the
// replicated state or of leadership, and a timer for the machine's next
// deadline (no polling, so a deadline Wake does not name is never met).
type proc struct {
	w    *World
	n    *Node
	inc  int
	dead bool

	// raft
	role         role
	leaderID     int
	joined       bool    // simLog.Joined
	joinAt       uint64  // the leader's commit index when first asked (0: not asked)
	lastContact  int64   // raft's LastContact, on this node's clock
	contact      []int64 // quorum's contact tracker: last AppendEntries accepted per leader
	commit       uint64
	hbTok, elTok int
	round        int
	elTerm       uint64
	votes        int
	pvotes       int
	prefused     int
	prevoting    bool
	transferCand bool
	next, match  []uint64
	peerContact  []int64
	futures      map[uint64]future
	xfer         *xfer

	// renewal rounds (renew.go)
	roundSeq  uint64
	rounds    map[uint64]*roundState
	taken     []seqOf  // per leader, the newest round taken
	sealed    []uint64 // per leader, the newest term sealed
	startTerm uint64   // the term this process started in

	// detector (quorum.Detector)
	beacon     []int64 // last beacon per leader, on this node's clock
	holdTill   int64
	urgeTill   int64 // its log is newer than an asker's: it stands at once
	deferred   int64 // when it last held back for another node
	deferRun   int64 // the first hold of the run deferred continues
	lastTry    int64
	asking     bool
	prevLeader int // the leader known before the current one (-1: none)

	// the daemon's control loop: a driver per resource group (ds[g]),
	// sharing the node's fences; drv and m are the default group's.
	ds      []*gdrv
	fences  driver.Fences
	drv     *driver.Driver
	m       *tenure.Machine // drv's, for reading
	kicked  bool
	loopTok int
	exiting bool
	inel    map[string]string // why this node may not take primacy, by source
	placer  *driver.Placer    // the leader's placement of the groups but the default
}

// gdrv is the daemon's machine for one resource group.
type gdrv struct {
	g   int
	drv *driver.Driver
	m   *tenure.Machine // drv's, for reading
	// wd: this group asked for the watchdog (its mount intent) and has
	// not disarmed it since; the device is disarmed once no group asks.
	wd bool
}

func newProc(n *Node, inc int) *proc {
	return &proc{w: n.w, n: n, inc: inc}
}

// acting reports whether the machine of any group acts as its primary.
func (p *proc) acting() bool {
	for _, d := range p.ds {
		if until := d.m.ActingUntil(); until != 0 && p.n.local() < until {
			return true
		}
	}
	return false
}

func (p *proc) start() {
	w, n, sc := p.w, p.n, p.w.sc
	fenceable, wdLevel := map[string]bool{}, map[string]bool{}
	var nodes []string
	for _, o := range w.nodes {
		fenceable[o.name] = !sc.witness(o.id)
		wdLevel[o.name] = has(sc.WDLevel, o.id)
		nodes = append(nodes, o.name)
	}
	witness := sc.witness(n.id)
	storage := sc.Storage && !witness
	p.inel = map[string]string{}
	for g := range w.groups() {
		// The start-up work (the probe of every group's storage, the
		// unfence of the node) is the node's: the first group's driver
		// runs it, and every group's machine reads its eligibility.
		cfg := driver.Config{Group: groupName(g), Nodes: nodes, Majority: w.majority, Probe: storage && g == 0, Boot: n.bootID(), Machine: tenure.Config{
			Self: n.name, Timing: n.timing(), Storage: storage, MonitorInterval: n.profile().monitor,
			Witness: witness, Fenceable: fenceable, TokenStorage: sc.Tokens, Unchecked: sc.VIP && w.opt.Mutation != MutTokensOnly, WatchdogLevel: wdLevel,
			OffLeader: g > 0,
		}}
		if has(sc.SCSI, n.id) && g == 0 {
			cfg.Unfence = &driver.UnfencePlan{Devices: []string{"scsi"}}
		}
		for o := range w.groups() {
			if o != g {
				cfg.OtherGroups = append(cfg.OtherGroups, groupName(o))
				if g == 0 {
					cfg.ProbeGroups = append(cfg.ProbeGroups, groupName(o))
				}
			}
		}
		d := &gdrv{g: g}
		d.drv = driver.New(cfg, driver.Env{Log: simLog{p}, Peers: simPeers{p}, Clock: simClock{p}, Effects: simEffects{p, d},
			Observer: simObserver{p, g}, Kick: p.loopKick, Ineligible: p.ineligible, Fences: &p.fences})
		d.m = d.drv.Machine()
		p.ds = append(p.ds, d)
	}
	p.drv, p.m = p.ds[0].drv, p.ds[0].m
	p.placer = driver.NewPlacer(driver.PlacerConfig{Groups: w.groupSpecs(), Log: simLog{p}, Clock: simClock{p}, Timing: n.timing(), Kick: p.loopKick,
		Placed: func(group, to, was string) { w.tracef("%s places %s on %s (was %q)", n.name, group, to, was) }})
	p.startRaft()
	p.startDetector()
	for _, d := range p.ds {
		d.drv.Start()
	}
	p.loopKick()
}

// loopKick wakes the control loop (an event, a change of the state, of
// leadership).
func (p *proc) loopKick() {
	if p.kicked || p.ds == nil || p.dead || p.exiting {
		return
	}
	p.kicked = true
	n, inc := p.n, p.inc
	p.w.after(p.jitter(), func() { n.exec(inc, p.step) })
}

// jitter is the delay before a goroutine runs: usually microseconds, now
// and then milliseconds (GC, a loaded machine). The margin covers it.
func (p *proc) jitter() time.Duration {
	r := p.n.rng
	if p.w.sc.Quiet {
		return 50 * time.Microsecond
	}
	if r.IntN(100) < 3 {
		return uniform(r, time.Millisecond, 10*time.Millisecond)
	}
	return uniform(r, 0, 200*time.Microsecond)
}

func (p *proc) step() {
	if p.dead || p.exiting {
		return
	}
	w, n := p.w, p.n
	p.kicked = false
	now := n.local()
	done, stopped := true, true
	for _, d := range p.ds {
		d.drv.Step()
		w.steps++
		if p.dead {
			return
		}
		done = done && d.m.Done()
		stopped = stopped && d.m.Phase() == tenure.Stopped
	}
	w.chk.afterStep(n)
	p.placeStep()
	if done {
		if stopped {
			p.exit()
		}
		return
	}
	// As the daemon's loop: the machines' own deadlines (a boot-time
	// timer), and a beat every heartbeat.
	wait := n.timing().Heartbeat
	for _, d := range p.ds {
		if wk := d.drv.Wake(now); wk != tenure.Never {
			wait = min(wait, max(wk.Sub(n.local()), 0))
		}
	}
	p.loopTok++
	tok := p.loopTok
	p.timer(wait+p.timerSlack(), func() {
		if tok == p.loopTok && !p.kicked {
			p.step()
		}
	})
}

// timerSlack is how late a Go timer fires.
func (p *proc) timerSlack() time.Duration {
	if p.w.sc.Quiet {
		return 0
	}
	return uniform(p.n.rng, 0, 300*time.Microsecond)
}

// exit ends the process after a graceful stop; it restarts as scheduled.
func (p *proc) exit() {
	p.exiting = true
	p.w.tracef("%s daemon stopped gracefully", p.n.name)
	n := p.n
	n.kill()
	after := n.afterExit
	if p.w.chk.healed && !p.w.isDown(n) {
		after = 10 * time.Millisecond
	}
	n.scheduleRestart(after)
}

// wall is the wall clock the daemon writes into commands (informational).
func (w *World) wall() time.Time { return time.Unix(1_700_000_000, 0).Add(time.Duration(w.now)) }

// encode is quorum.Raft.Apply's encoding of a command.
func encode(c quorum.Command) []byte {
	data, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return data
}

// applyCmd is quorum.Raft.Apply: the FSM's error answer is the error.
func (p *proc) applyCmd(c quorum.Command, cb func(any, error)) {
	p.applyMeta(c, meta{origin: p.n.id}, cb)
}

func (p *proc) applyMeta(c quorum.Command, m meta, cb func(any, error)) {
	if err := p.n.fsm.Allows(&c); err != nil {
		// quorum.Raft.Apply's gate: the committed cluster version.
		p.timer(0, func() { cb(nil, fmt.Errorf("commit %s: %w", c.Op, err)) })
		return
	}
	p.apply(entCommand, encode(c), m, func(res any, err error) {
		if err != nil {
			cb(nil, fmt.Errorf("commit %s: %w", c.Op, err))
			return
		}
		cb(res, nil)
	})
}

var errNoLeader = errors.New("no primary-elect: the cluster has no majority leader right now")

// forward is forwardCommand over the gossip layer's request/response, with
// the lease as its deadline.
func (p *proc) forward(c quorum.Command, cb func(error)) {
	if p.role != leader && p.leaderID < 0 {
		// At once, not on a timer as forwardMeta answers: the
		// trajectories of single-group schedules keep their order.
		cb(errNoLeader)
		return
	}
	p.forwardMeta(c, meta{origin: p.n.id}, func(_ any, err error) { cb(err) })
}

// simLog is the driver's Log: the simulated raft and this node's FSM.
type simLog struct{ p *proc }

func (l simLog) IsLeader() bool { return l.p.role == leader }
func (l simLog) Leader() string {
	if l.p.leaderID < 0 {
		return ""
	}
	return nodeName(l.p.leaderID)
}

// Joined: this node has applied its leader's commit index (the daemon
// asks the leader for it; the simulation looks).
func (l simLog) Joined() bool {
	p := l.p
	if p.role == leader {
		return true
	}
	if p.leaderID < 0 {
		return false
	}
	if !p.joined && p.joinAt == 0 {
		// The daemon asks the leader for its commit index once, then
		// waits until it has applied that much.
		lp := p.w.nodes[p.leaderID].proc
		if lp == nil {
			return false
		}
		p.joinAt = lp.commit
	}
	if !p.joined && p.n.applied >= p.joinAt {
		p.joined = true // once joined, for the life of the process, as the daemon's
	}
	return p.joined
}

func (l simLog) Holders(group string) quorum.Holders {
	v := l.p.n.fsm.HoldersOf(group)
	if l.p.w.opt.Mutation == MutGroupMixup && group != "" {
		// Broken on purpose: who may still run the group is read from
		// the default group's state.
		d := l.p.n.fsm.HoldersOf("")
		v.Unconfirmed, v.Formers, v.Previous, v.LeaseOf = d.Unconfirmed, d.Formers, d.Previous, d.LeaseOf
	}
	if l.p.w.opt.Mutation == MutNoTimings {
		v.Timings = nil // broken on purpose
	}
	return v
}

func (l simLog) History() []fencing.Record {
	if l.p.w.opt.Mutation == MutBlindUnfence {
		return nil // broken on purpose
	}
	return l.p.n.fsm.State().History
}

func (l simLog) SinceContact(leader string) (time.Duration, bool) {
	return l.p.contactOf(l.p, l.p.w.node(leader).id)
}

func (l simLog) Apply(c quorum.Command, done func(any, error)) { l.p.applyCmd(c, done) }

func (l simLog) Acquire(c quorum.Command, t0 tenure.Time, done func(any, error)) {
	p := l.p
	p.applyMeta(c, meta{origin: p.n.id, t0: p.n.clk.trueOf(t0)}, done)
}

func (l simLog) Confirm(group string, epoch uint64, t0 tenure.Time, done func(error)) {
	p := l.p
	if p.w.opt.Mutation == MutStaleConfirm {
		// Broken on purpose: "I lead, so a majority follows me".
		var err error
		if p.role != leader {
			err = errors.New("not leader")
		}
		p.timer(0, func() { done(err) })
		return
	}
	// The daemon's confirm: raft's barrier and a renewal round, the
	// first to succeed renews; it fails when both failed.
	pending, finished := 2, false
	either := func(err error) {
		if finished {
			return
		}
		if pending--; err == nil || pending == 0 {
			finished = true
			done(err)
		}
	}
	g := p.w.groupIndex(group)
	p.apply(entBarrier, nil, meta{origin: p.n.id, group: g, epoch: epoch, t0: p.n.clk.trueOf(t0)}, func(_ any, err error) { either(err) })
	p.renewRound(g, epoch, t0, either)
}

func (l simLog) Transfer(to string, done func(error)) {
	p := l.p
	if to == "" {
		// As the daemon's successor: the first of the rank order that
		// may hold primacy, alive (its daemon runs and this node reaches
		// it) and not the previous leader gone silent.
		silent := ""
		if prev := p.prevLeader; prev >= 0 {
			if e, ok := p.sinceContact(prev); ok && e >= p.w.timing.Raft().Detect {
				silent = nodeName(prev)
			}
		}
		alive := func(name string) bool {
			o := p.w.node(name)
			return o.live() != nil && p.w.net.connected(p.n.id, o.id) && p.w.net.connected(o.id, p.n.id)
		}
		// The daemon's nodes advertise whether they are eligible; here
		// each reads the others' own word (gossip's delay left out).
		held := p.mayNotHold()
		mayNot := func(name string) bool {
			o := p.w.node(name)
			return held(name) || o.proc != nil && o.proc.ineligible() != ""
		}
		var voters []string
		for _, n := range p.w.nodes {
			voters = append(voters, n.name)
		}
		var any bool
		if to, any = quorum.Successor(quorum.RankOrder(voters, p.n.name, mayNot), mayNot, alive, silent); !any {
			p.timer(0, func() { done(tenure.ErrNoSuccessor) })
			return
		}
	}
	id := -1
	if to != "" {
		id = p.w.node(to).id
	}
	p.transfer(id, done)
}

// simPeers is the driver's Peers: requests over the simulated network.
type simPeers struct{ p *proc }

func (s simPeers) Forward(c quorum.Command, done func(error)) { s.p.forward(c, done) }
func (s simPeers) Boot(node string) string                    { return s.p.w.node(node).advBoot }

func (s simPeers) Contact(_ context.Context, node, leader string, done func(time.Duration, bool, bool)) {
	p, w := s.p, s.p.w
	f := w.node(leader).id
	if w.opt.Mutation == MutSkipWait {
		// Broken on purpose: every node "last heard from it long ago".
		p.timer(0, func() { done(10*w.timing.Lease, true, true) })
		return
	}
	self := p.n.id
	w.net.send(self, w.node(node).id, 0, func(q *proc) {
		q.seal(f)
		e, known := q.contactOf(p, f)
		w.net.send(q.n.id, self, 0, func(r *proc) {
			if r == p {
				done(e, known, true)
			}
		})
	})
}

func (s simPeers) Rank() []string { return s.p.rankOrder(s.p.n.id) }

// FencePath is asked over the network; q answers from its own checks.
func (s simPeers) FencePath(ctx context.Context, node, target string, done func(string, bool)) {
	p, w := s.p, s.p.w
	self := p.n.id
	w.net.send(self, w.node(node).id, 0, func(q *proc) {
		path := driver.PathWorking
		switch {
		case q.n.name == target || q.w.sc.witness(q.n.id):
			path = "none"
		case has(q.w.sc.Blind, q.n.id):
			path = driver.PathFailing
		}
		w.net.send(q.n.id, self, 0, func(r *proc) {
			if r == p && ctx.Err() == nil {
				done(path, true)
			}
		})
	})
}

// Fence hands req to its executor over the network, which refuses it as
// the daemon's peer does (answerFenceRun) or runs it through its own
// engine; the wait ends at the fence's bound and a lease.
func (s simPeers) Fence(sc *driver.Scope, req driver.FenceRequest, done func(fencing.Record, error)) {
	p, w := s.p, s.p.w
	self := p.n.id
	answered := false
	once := func(rec fencing.Record, err error) {
		if !answered {
			answered = true
			done(rec, err)
		}
	}
	t := p.n.timing()
	p.timer((levels+1)*t.FenceTimeout+t.Lease, func() { once(fencing.Record{}, context.DeadlineExceeded) })
	sc.OnCancel(func() { once(fencing.Record{}, context.Canceled) })
	w.net.send(self, w.node(req.Executor).id, 0, func(q *proc) {
		reply := func(rec fencing.Record, err error) {
			q.w.net.send(q.n.id, self, 0, func(r *proc) {
				if r == p {
					once(rec, err)
				}
			})
		}
		// A peer runs fences for its leader, and for the holder of a
		// group other than the default one at the group's epoch.
		v := (simLog{q}).Holders(req.Group)
		asker := q.leaderID == self || req.Group != "" && v.Holder == p.n.name && v.Epoch == req.Epoch
		switch known := v.Epoch; {
		case req.Action != fencing.ActionOff, req.Target == q.n.name, req.Executor != q.n.name, !asker:
			reply(fencing.Record{}, errors.New("fence refused"))
		case req.Epoch < known:
			w.tracef("%s refuses %s's fence of %s at epoch %d: it knows epoch %d", q.n.name, p.n.name, req.Target, req.Epoch, known)
			reply(fencing.Record{}, errors.New("fence refused: an old epoch"))
		default:
			w.tracef("%s fences %s for the leader %s", q.n.name, req.Target, p.n.name)
			simEffects{q, q.ds[0]}.Fence(driver.NewScope(context.Background()), req, func(rec fencing.Record) { reply(rec, nil) })
		}
	})
}

// contactOf is q's answer to asker p about leader f: its own record, or
// under a negative control the lie that control tells.
func (q *proc) contactOf(p *proc, f int) (time.Duration, bool) {
	w := q.w
	switch w.opt.Mutation {
	case MutSkipWait:
		return 10 * w.timing.Lease, true
	case MutMinBound:
		// Broken on purpose: answer with the earliest contact any node
		// had, as if the bound took the first answer, not the
		// majority-th.
		e, known := q.sinceContact(f)
		for _, o := range w.nodes {
			if r := o.live(); r != nil {
				if oe, ok := r.sinceContact(f); ok && (!known || oe > e) {
					e, known = oe, true
				}
			}
		}
		return e, known
	}
	return q.sinceContact(f)
}

// simClock is the driver's Clock: the node's clock, timers in the process.
type simClock struct{ p *proc }

func (c simClock) Now() tenure.Time { return c.p.n.local() }
func (c simClock) Wall() time.Time  { return c.p.w.wall() }
func (c simClock) After(d time.Duration, f func()) func() {
	stopped := false
	c.p.timer(d, func() {
		if !stopped {
			f()
		}
	})
	return func() { stopped = true }
}

// simObserver traces the machine's steps and counts its phase changes.
type simObserver struct {
	p *proc
	g int
}

func (o simObserver) Stepped(before tenure.Phase, ev tenure.Event, acts []tenure.Action, m *tenure.Machine) {
	w, n := o.p.w, o.p.n
	if after := m.Phase(); after != before {
		w.moves[[2]tenure.Phase{before, after}]++
	}
	if !w.opt.Trace {
		return
	}
	who := n.name
	if o.g > 0 {
		who += "/" + groupName(o.g)
	}
	if ev != nil {
		w.tracef("%s event %T%+v", who, ev, ev)
	}
	if after := m.Phase(); after != before {
		w.tracef("%s %s → %s (epoch %d, acting until %s)", who, before, after, m.Epoch(), w.fmtLocal(n, m.ActingUntil()))
	}
	for _, a := range acts {
		w.tracef("%s action %T%+v", who, a, a)
	}
}

func (o simObserver) Ineligible(source, reason string) {
	p := o.p
	if reason == "" {
		delete(p.inel, source)
	} else {
		p.inel[source] = reason
	}
	p.w.tracef("%s ineligible %s: %q", p.n.name, source, reason)
	p.loopKick()
}

// ineligible is the daemon's Ineligible: every source's reason.
func (p *proc) ineligible() string {
	var why []string
	for _, k := range slices.Sorted(maps.Keys(p.inel)) {
		why = append(why, k+": "+p.inel[k])
	}
	return strings.Join(why, "; ")
}

func (o simObserver) FenceStarted(driver.FenceRequest) {}
func (o simObserver) FenceDone(fencing.Record)         {}
