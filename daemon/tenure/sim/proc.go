package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
)

// proc is one run of the fenced daemon on a node: raft's volatile state
// and the driver of the node's tenure machine. It mirrors package daemon's
// driver.go: the same loop (one event per step, a step on every change of
// the replicated state or of leadership, a timer for the machine's next
// deadline and a poll while a tenure runs), log writes through one FIFO,
// and each action carried out as the driver carries it out.
type proc struct {
	w    *World
	n    *Node
	inc  int
	dead bool

	// raft
	role         role
	leaderID     int
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

	// detector (quorum.Detector)
	beacon     []int64 // last beacon per leader, on this node's clock
	holdTill   int64
	urgeTill   int64 // its log is newer than an asker's: it stands at once
	deferred   int64 // when it last held back for an earlier-ranked node
	lastTry    int64
	asking     bool
	prevLeader int // the leader known before the current one (-1: none)

	// driver
	m       *tenure.Machine
	events  []tenure.Event
	kicked  bool
	loopTok int
	writes  []func(done func())
	writing bool
	tctx    *simCtx
	exiting bool
}

// simCtx is a context.Context for the simulation: cancelled once, with
// callbacks instead of a channel.
type simCtx struct {
	done   bool
	onDone []func()
}

func (c *simCtx) cancel() {
	if c.done {
		return
	}
	c.done = true
	fs := c.onDone
	c.onDone = nil
	for _, f := range fs {
		f()
	}
}

func (c *simCtx) whenDone(f func()) {
	if c.done {
		f()
		return
	}
	c.onDone = append(c.onDone, f)
}

func newProc(n *Node, inc int) *proc {
	return &proc{w: n.w, n: n, inc: inc}
}

func (p *proc) start() {
	w := p.w
	fenceable := map[string]bool{}
	for _, o := range w.nodes {
		fenceable[o.name] = true
	}
	p.m = tenure.New(tenure.Config{
		Self: p.n.name, Timing: w.timing, Storage: w.sc.Storage,
		MonitorInterval: profiles[w.sc.Profile].monitor, Fenceable: fenceable,
	})
	p.startRaft()
	p.startDetector()
	p.loopKick()
}

// post hands an event to the control loop.
func (p *proc) post(ev tenure.Event) {
	if p.dead || p.m == nil {
		return
	}
	p.events = append(p.events, ev)
	p.loopKick()
}

// loopKick wakes the control loop (an event, a change of the state, of
// leadership).
func (p *proc) loopKick() {
	if p.kicked || p.m == nil || p.dead || p.exiting {
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

func viewOf(v quorum.View) tenure.View {
	// As daemon/driver.go's viewOf.
	return tenure.View{Epoch: v.Epoch, Holder: v.Holder, HolderState: v.HolderState, LeaseOf: v.LeaseOf, Formers: v.Formers,
		Unconfirmed: v.Unconfirmed, Standby: v.Standby, Watchdogs: v.Watchdogs}
}

func (p *proc) step() {
	if p.dead || p.exiting {
		return
	}
	w, n := p.w, p.n
	p.kicked = false
	var ev tenure.Event
	if len(p.events) > 0 {
		ev = p.events[0]
		p.events = p.events[1:]
	}
	now := n.local()
	before := p.m.Phase()
	acts := p.m.Step(tenure.Input{Now: now, Leader: p.role == leader, View: viewOf(n.fsm.View()), Event: ev})
	w.steps++
	if after := p.m.Phase(); after != before {
		w.moves[[2]tenure.Phase{before, after}]++
	}
	if w.opt.Trace {
		if ev != nil {
			w.tracef("%s event %T%+v", n.name, ev, ev)
		}
		if after := p.m.Phase(); after != before {
			w.tracef("%s %s → %s (epoch %d, acting until %s)", n.name, before, after, p.m.Epoch(), w.fmtLocal(n, p.m.ActingUntil()))
		}
		for _, a := range acts {
			w.tracef("%s action %T%+v", n.name, a, a)
		}
	}
	for _, a := range acts {
		if p.dead {
			return
		}
		p.act(a)
	}
	if p.dead {
		return
	}
	w.chk.afterStep(n)
	if p.m.Done() {
		if p.m.Phase() == tenure.Stopped {
			p.exit()
		}
		return
	}
	if len(p.events) > 0 {
		p.loopKick()
	}
	// As the driver does: the machine's own deadlines (a boot-time
	// timer), and a beat every heartbeat; no polling, so a deadline Wake
	// does not name is never met.
	t := w.timing
	wait := t.Heartbeat
	if wk := p.m.Wake(now); wk != tenure.Never {
		wait = min(wait, max(wk.Sub(n.local()), 0))
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

func (p *proc) tenureCtx() *simCtx {
	if p.tctx == nil {
		p.tctx = &simCtx{}
	}
	return p.tctx
}

// write queues a log write; they run one at a time, in order.
func (p *proc) write(f func(done func())) {
	p.writes = append(p.writes, f)
	p.runWrites()
}

func (p *proc) runWrites() {
	if p.writing || len(p.writes) == 0 || p.dead {
		return
	}
	f := p.writes[0]
	p.writes = p.writes[1:]
	p.writing = true
	f(func() {
		p.writing = false
		p.runWrites()
	})
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
	p.apply(entCommand, encode(c), m, func(res any, err error) {
		if err != nil {
			cb(nil, fmt.Errorf("commit %s: %w", c.Op, err))
			return
		}
		cb(res, nil)
	})
}

func (p *proc) act(a tenure.Action) {
	w, n := p.w, p.n
	self := n.name
	switch a := a.(type) {
	case tenure.Acquire:
		t0 := w.now
		p.write(func(done func()) {
			p.applyMeta(quorum.Command{Op: quorum.OpAcquire, Node: self, Time: w.wall()}, meta{origin: n.id, t0: t0}, func(res any, err error) {
				defer done()
				if err != nil {
					p.post(tenure.AcquireDone{Err: err})
					return
				}
				g := res.(quorum.Grant)
				p.post(tenure.AcquireDone{Grant: tenure.Grant{Epoch: g.Epoch, Previous: g.Previous, LeaseOf: g.LeaseOf}})
			})
		})
	case tenure.Confirm:
		t0 := w.now
		if w.opt.Mutation == MutStaleConfirm {
			// Broken on purpose: "I lead, so a majority follows me".
			if p.role == leader {
				p.post(tenure.ConfirmDone{Epoch: a.Epoch, T0: a.T0})
			} else {
				p.post(tenure.ConfirmDone{Epoch: a.Epoch, T0: a.T0, Err: errors.New("not leader")})
			}
			return
		}
		p.write(func(done func()) {
			p.apply(entBarrier, nil, meta{origin: n.id, epoch: a.Epoch, t0: t0}, func(_ any, err error) {
				p.post(tenure.ConfirmDone{Epoch: a.Epoch, T0: a.T0, Err: err})
				done()
			})
		})
	case tenure.AskBound:
		ctx := p.tenureCtx()
		p.leaseBound(ctx, a.Former, func(b tenure.Time, ok bool) {
			p.post(tenure.BoundDone{Epoch: a.Epoch, Bound: b, OK: ok})
		})
	case tenure.Record:
		p.write(func(done func()) {
			p.applyCmd(quorum.Command{Op: quorum.OpState, Node: self, Epoch: a.Epoch, State: a.State, Reason: a.Reason},
				func(any, error) { done() })
		})
	case tenure.Fence:
		ctx := p.tenureCtx()
		failed := map[string]string{}
		var next func(i int)
		next = func(i int) {
			if i == len(a.Targets) {
				p.post(tenure.FenceDone{Epoch: a.Epoch, Failed: failed})
				return
			}
			target := a.Targets[i]
			p.fence(ctx, target, a.Reason, a.Epoch, func(err error) {
				if err != nil {
					failed[target] = err.Error()
				}
				next(i + 1)
			})
		}
		next(0)
	case tenure.MountIntent:
		p.write(func(done func()) {
			p.applyCmd(quorum.Command{Op: quorum.OpState, Node: self, Epoch: a.Epoch, State: quorum.HolderMounting},
				func(_ any, err error) {
					p.post(tenure.MountIntentDone{Epoch: a.Epoch, Err: err})
					done()
				})
		})
	case tenure.Start:
		p.storageStart(a)
	case tenure.Monitor:
		p.storageMonitor(a)
	case tenure.Stop:
		p.storageStop(a)
	case tenure.Release:
		p.write(func(done func()) {
			p.release(a.Epoch, a.Reason, func(err error) {
				p.post(tenure.ReleaseDone{Epoch: a.Epoch, Err: err})
				done()
			})
		})
	case tenure.Transfer:
		to := -1
		if a.To != "" {
			to = w.node(a.To).id
		}
		p.transfer(to, func(err error) { p.post(tenure.TransferDone{Err: err}) })
	case tenure.Cancel:
		if p.tctx != nil {
			p.tctx.cancel()
			p.tctx = nil
		}
	case tenure.SelfFence:
		w.tracef("%s SELF-FENCE: %s", self, a.Reason)
		n.selfFence()
	default:
		panic(fmt.Sprintf("sim: unknown action %T", a))
	}
}

var errNoLeader = errors.New("no primary-elect: the cluster has no majority leader right now")

// release is the driver's release: commit it here while leading, else
// forward it to the leader.
func (p *proc) release(epoch uint64, reason string, cb func(error)) {
	c := quorum.Command{Op: quorum.OpRelease, Node: p.n.name, Epoch: epoch, Reason: reason, Time: p.w.wall()}
	if p.role == leader {
		p.applyCmd(c, func(_ any, err error) {
			if err == nil || p.role == leader {
				cb(err)
				return
			}
			p.forward(c, cb)
		})
		return
	}
	p.forward(c, cb)
}

// forward is forwardCommand over the gossip layer's request/response, with
// the lease as its deadline.
func (p *proc) forward(c quorum.Command, cb func(error)) {
	if p.role == leader {
		p.applyCmd(c, func(_ any, err error) { cb(err) })
		return
	}
	l := p.leaderID
	if l < 0 {
		cb(errNoLeader)
		return
	}
	answered := false
	once := func(err error) {
		if !answered {
			answered = true
			cb(err)
		}
	}
	p.timer(p.w.timing.Lease, func() { once(context.DeadlineExceeded) })
	self := p.n.id
	p.w.net.send(self, l, 0, func(q *proc) {
		reply := func(err error) {
			q.w.net.send(q.n.id, self, 0, func(r *proc) {
				if r == p {
					once(err)
				}
			})
		}
		if q.role != leader {
			reply(errNoLeader)
			return
		}
		q.applyCmd(c, func(_ any, err error) { reply(err) })
	})
}

// leaseBound is the driver's leaseBound: ask every other node when it last
// heard from former, count this node's own record, and once a majority
// answered wait a moment for the rest (or the lease/2 deadline).
func (p *proc) leaseBound(ctx *simCtx, former string, cb func(tenure.Time, bool)) {
	w, n := p.w, p.n
	if w.opt.Mutation == MutSkipWait {
		cb(n.local().Add(-10*w.timing.Lease), true)
		return
	}
	f := w.node(former).id
	now := n.local()
	own := now
	if e, ok := p.sinceContact(f); ok {
		own = now.Add(-e)
	}
	got := []tenure.Time{own}
	pending := len(w.nodes) - 1
	finished, grace := false, false
	finish := func() {
		if finished {
			return
		}
		finished = true
		if w.opt.Mutation == MutMinBound {
			b, ok := tenure.BoundOf(got, w.majority)
			if ok {
				b = slices.Min(got).Add(time.Millisecond)
			}
			cb(b, ok)
			return
		}
		cb(tenure.BoundOf(got, w.majority))
	}
	check := func() {
		if pending == 0 {
			finish()
		} else if len(got) >= w.majority && !grace {
			grace = true
			p.timer(50*time.Millisecond, finish)
		}
	}
	p.timer(w.timing.Lease/2, finish)
	ctx.whenDone(finish)
	self := n.id
	for _, o := range w.nodes {
		if o.id == self {
			continue
		}
		w.net.send(self, o.id, 0, func(q *proc) {
			e, known := q.sinceContact(f)
			w.net.send(q.n.id, self, 0, func(r *proc) {
				if r != p || finished {
					return
				}
				rt := n.local()
				at := rt
				if known {
					at = rt.Add(-e)
				}
				got = append(got, at)
				pending--
				check()
			})
		})
	}
}

// fence is engineFencer.Fence: commit the request, run the devices with
// the read-back, commit the result (retrying while leader).
func (p *proc) fence(ctx *simCtx, target, reason string, epoch uint64, cb func(error)) {
	w := p.w
	self := p.n.name
	pending := stonith.Record{Kind: stonith.KindFence, Target: target, Action: stonith.ActionOff, Reason: reason,
		RequestedBy: self + " (takeover)", Executor: self, Epoch: epoch, Started: w.wall(), Outcome: stonith.OutcomePending}
	p.applyCmd(quorum.Command{Op: quorum.OpRecord, Record: &pending}, func(res any, err error) {
		if err != nil {
			cb(fmt.Errorf("fence %s: %s: %s", target, stonith.OutcomeFailed, "not run: could not record the request: "+err.Error()))
			return
		}
		rec := pending
		rec.ID = res.(uint64)
		p.engine(ctx, w.node(target), func(outcome, msg string) {
			rec.Outcome, rec.Error, rec.Finished = outcome, msg, w.wall()
			var commit func(i int)
			commit = func(i int) {
				r := rec
				p.applyCmd(quorum.Command{Op: quorum.OpRecord, Record: &r}, func(_ any, err error) {
					if err != nil {
						if p.role == leader && i < 5 {
							p.timer(100*time.Millisecond, func() { commit(i + 1) })
							return
						}
						if rec.Outcome == stonith.OutcomeSuccess {
							rec.Outcome = stonith.OutcomeUnknown
							rec.Error = "confirmed off, but the result could not be recorded: " + err.Error()
						}
					}
					if rec.Outcome != stonith.OutcomeSuccess {
						cb(fmt.Errorf("fence %s: %s: %s", target, rec.Outcome, rec.Error))
						return
					}
					cb(nil)
				})
			}
			commit(0)
		})
	})
}

// engine tries the target's fence levels in order; the first level whose
// device is read back off wins.
func (p *proc) engine(ctx *simCtx, tn *Node, cb func(outcome, msg string)) {
	var try func(level int, unknown bool, msgs []string)
	try = func(level int, unknown bool, msgs []string) {
		if level == levels || ctx.done {
			if ctx.done {
				msgs = append(msgs, "cancelled")
				unknown = true
			}
			outcome := stonith.OutcomeFailed
			if unknown {
				outcome = stonith.OutcomeUnknown
			}
			cb(outcome, fmt.Sprint(msgs))
			return
		}
		p.deviceTry(ctx, tn, level, func(result, msg string) {
			if result == stonith.ResultSuccess {
				cb(stonith.OutcomeSuccess, "")
				return
			}
			try(level+1, unknown || result == stonith.ResultUnknown, append(msgs, msg))
		})
	}
	try(0, false, nil)
}

// deviceTry is one try of one device: the off, then the engine's own
// status read-back, within FenceTimeout.
func (p *proc) deviceTry(ctx *simCtx, tn *Node, level int, cb func(result, msg string)) {
	w, n, inc := p.w, p.n, p.inc
	mode := tn.dev[level]
	timeout := w.timing.FenceTimeout
	finished := false
	finish := func(result, msg string) {
		if finished {
			return
		}
		finished = true
		n.exec(inc, func() { cb(result, msg) })
	}
	p.timer(timeout, func() { finish(stonith.ResultUnknown, "timeout") })
	ctx.whenDone(func() { finish(stonith.ResultUnknown, "cancelled") })
	act := uniform(n.rng, 20*time.Millisecond, 300*time.Millisecond)
	readBack := uniform(n.rng, 5*time.Millisecond, 50*time.Millisecond)
	w.tracef("%s fences %s at level %d (device %s)", n.name, tn.name, level+1, devNames[mode])
	switch mode {
	case devFail:
		w.after(act, func() { finish(stonith.ResultFailed, "device refused") })
	case devHang:
	case devOK, devSlow, devLie:
		if mode == devSlow {
			act = timeout/2 + uniform(n.rng, 0, timeout*4/10)
		}
		w.after(act, func() {
			if mode != devLie {
				tn.fencedOff(n.name)
			}
			if w.opt.Mutation == MutNoReadBack {
				finish(stonith.ResultSuccess, "") // broken on purpose: the ack is trusted
				return
			}
			w.after(readBack, func() {
				if tn.on {
					finish(stonith.ResultFailed, "device acknowledged off but reads back on")
					return
				}
				finish(stonith.ResultSuccess, "")
			})
		})
	}
}

// The storage: Start, Stop and Monitor as the daemon's Resource runs them.

func (p *proc) storageStart(a tenure.Start) {
	w, n, inc := p.w, p.n, p.inc
	ctx := p.tenureCtx()
	w.chk.storageStart(n, a.Epoch)
	n.running, n.runEpoch = true, a.Epoch
	done := func(err error) { n.exec(inc, func() { p.post(tenure.StartDone{Epoch: a.Epoch, Err: err}) }) }
	d := uniform(n.rng, 5*time.Millisecond, 150*time.Millisecond)
	switch n.stStart {
	case opOK:
		w.after(d, func() { done(nil) })
	case opFail:
		w.after(d, func() { done(errors.New("start hook: exit status 1")) })
	case opHang:
		ctx.whenDone(func() { w.after(time.Millisecond, func() { done(context.Canceled) }) })
		n.hungStart = func() { done(errors.New("start hook killed by the admin")) }
	case opStuck:
		n.hungStart = func() { done(errors.New("start hook killed by the admin")) }
	}
}

func (p *proc) storageStop(a tenure.Stop) {
	w, n, inc := p.w, p.n, p.inc
	grace := max(a.Deadline.Sub(n.local()), 0)
	d := uniform(n.rng, 5*time.Millisecond, 100*time.Millisecond)
	switch n.stStop {
	case opOK:
		if d < grace {
			w.after(d, func() {
				n.exec(inc, func() {
					n.running = false
					p.post(tenure.StopDone{Epoch: a.Epoch})
				})
			})
			return
		}
		fallthrough
	case opHang:
		p.timer(grace, func() { p.post(tenure.StopDone{Epoch: a.Epoch, Err: context.DeadlineExceeded}) })
	case opFail:
		w.after(d, func() {
			n.exec(inc, func() { p.post(tenure.StopDone{Epoch: a.Epoch, Err: errors.New("umount: target is busy")}) })
		})
	case opStuck:
	}
}

func (p *proc) storageMonitor(a tenure.Monitor) {
	w, n := p.w, p.n
	ctx := p.tenureCtx()
	post := func(err error) {
		if !ctx.done {
			p.post(tenure.MonitorDone{Epoch: a.Epoch, Err: err})
		}
	}
	switch n.stMon {
	case opOK:
		p.timer(uniform(n.rng, time.Millisecond, 20*time.Millisecond), func() { post(nil) })
	case opFail:
		p.timer(uniform(n.rng, time.Millisecond, 20*time.Millisecond), func() { post(errors.New("monitor hook: exit status 7")) })
	default:
		p.timer(profiles[w.sc.Profile].monitor, func() { post(context.DeadlineExceeded) })
	}
}
