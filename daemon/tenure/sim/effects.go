package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/daemon/watchdog"
	"github.com/fenced/fenced/stonith/fencing"
)

// simEffects is the driver's Effects: the node's fence devices (through an
// engine that tries the target's levels in order and reads each off back),
// its storage, its watchdog and its reset. Each group's driver has its
// own, over that group's storage; the devices, the watchdog and the reset
// are the node's.
type simEffects struct {
	p *proc
	d *gdrv
}

func (e simEffects) Fence(s *driver.Scope, req driver.FenceRequest, done func(fencing.Record)) {
	p, w := e.p, e.p.w
	started := w.wall()
	tn := w.node(req.Target)
	if has(w.sc.Blind, p.n.id) {
		// A wrong password here: every device refuses the login, nothing
		// is sent, nothing reads back.
		w.tracef("%s cannot fence %s: its password is wrong here", p.n.name, tn.name)
		p.timer(uniform(p.n.rng, 5*time.Millisecond, 50*time.Millisecond), func() {
			done(fencing.Record{ID: req.ID, Kind: fencing.KindFence, Target: req.Target, Action: req.Action, Reason: req.Reason,
				RequestedBy: req.RequestedBy, Executor: req.Executor, Epoch: req.Epoch, Started: started, Finished: w.wall(),
				Outcome: fencing.OutcomeFailed, Error: "authentication failed", TargetBoot: req.TargetBoot,
				Attempts: []fencing.Attempt{{Level: 1, Device: "bmc", Action: req.Action, Try: 1, Result: fencing.ResultFailed, Error: "authentication failed"}}})
		})
		return
	}
	p.engine(s, tn, w.groupIndex(req.Group), req.PowerOnly, func(outcome, msg string, level int) {
		rec := fencing.Record{ID: req.ID, Kind: fencing.KindFence, Target: req.Target, Action: req.Action, Reason: req.Reason,
			RequestedBy: req.RequestedBy, Executor: req.Executor, Epoch: req.Epoch, Started: started, Finished: w.wall(),
			Outcome: outcome, Error: msg, TargetBoot: req.TargetBoot}
		if outcome == fencing.OutcomeSuccess && tn.levelCuts(level) {
			rec.Scope = fencing.ScopeStorage
		}
		done(rec)
	})
}

// FencePath is this node's device checks' view: a blind node's fail; the
// others' are not modelled (never checked: the fence runs here).
func (e simEffects) FencePath(string) string {
	if has(e.p.w.sc.Blind, e.p.n.id) {
		return driver.PathFailing
	}
	return ""
}

func (e simEffects) Start(s *driver.Scope, epoch uint64, previous string, done func(error)) {
	e.p.storageStart(s, e.d.g, epoch, done)
}
func (e simEffects) Monitor(s *driver.Scope, done func(error)) { e.p.storageMonitor(s, e.d.g, done) }
func (e simEffects) Stop(deadline tenure.Time, done func(error)) {
	e.p.storageStop(e.d.g, deadline, done)
}

// Probe is the resource groups' probe: what a crashed daemon left running
// here, of any group, is stopped, as a stop would (and can fail, or hang,
// as one would).
func (e simEffects) Probe(_ *driver.Scope, done func(error)) {
	p, w, n, inc := e.p, e.p.w, e.p.n, e.p.inc
	w.after(uniform(n.rng, time.Millisecond, 20*time.Millisecond), func() {
		n.exec(inc, func() {
			var left []int
			for g, st := range n.st {
				if st.running && !st.stray { // (a stray writer is not the group's to see)
					left = append(left, g)
				}
			}
			if len(left) == 0 {
				done(nil)
				return
			}
			w.tracef("%s probe: the storage of groups %v runs here: stopping it (%s)", n.name, left, opNames[n.stStop])
			switch n.stStop {
			case opOK:
				for _, g := range left {
					n.st[g].running = false
				}
				done(nil)
			case opFail, opHang:
				p.timer(uniform(n.rng, 5*time.Millisecond, 100*time.Millisecond), func() {
					done(fmt.Errorf("%w: resource storage runs here and could not be stopped", errIneligible))
				})
			case opStuck:
			}
		})
	})
}

var errIneligible = errors.New("node ineligible")

// Unfence is this node's "on" through its own storage-level devices: its
// registration back on the storage, read back.
func (e simEffects) Unfence(_ *driver.Scope, done func(fencing.Record, bool)) {
	p, w, n, inc := e.p, e.p.w, e.p.n, e.p.inc
	rec := fencing.Record{Kind: fencing.KindUnfence, Target: n.name, Action: fencing.ActionOn, Reason: "unfence at start",
		RequestedBy: n.name + " (start)", Executor: n.name, Started: w.wall()}
	var bad []string
	for lvl := range levels {
		if n.levelCuts(lvl) {
			if m := n.dev[lvl]; m == devFail || m == devHang {
				bad = append(bad, fmt.Sprintf("level %d: %s", lvl+1, devNames[m]))
			}
		}
	}
	p.timer(uniform(n.rng, 5*time.Millisecond, 60*time.Millisecond), func() {
		rec.Finished = w.wall()
		if len(bad) > 0 {
			rec.Outcome, rec.Error = fencing.OutcomeFailed, fmt.Sprint(bad)
			done(rec, false)
			return
		}
		if n.cutAny() {
			w.tracef("%s unfenced itself: storage access back", n.name)
		}
		for g := range n.st {
			n.st[g].cut = false
		}
		w.chk.storageBack(n)
		n.exec(inc, func() {
			rec.Outcome = fencing.OutcomeSuccess
			done(rec, true)
		})
	})
}

// ArmWatchdog arms the node's watchdog, if it has one, and feeds it while
// the lease is valid, as the daemon does (daemon/watchdog.go).
func (e simEffects) ArmWatchdog() time.Duration {
	p, n := e.p, e.p.n
	wd := n.wd
	if wd == nil {
		return 0
	}
	e.d.wd = true
	first := !wd.armed
	wd.arm()
	if first {
		t := n.timing()
		every := min(t.Heartbeat, time.Second, wd.timeout/4)
		var feed func()
		feed = func() {
			if !wd.armed {
				return
			}
			if p.acting() {
				wd.feed()
			}
			p.timer(every, feed)
		}
		p.timer(every, feed)
	}
	// As the daemon: advertised only if the timer survives the daemon.
	if keeps, _ := watchdog.Keeps(watchdog.Options{Known: true, MagicClose: wd.magic}); !keeps && p.w.opt.Mutation != MutTrustWatchdog {
		return 0
	}
	return wd.timeout
}

// DisarmWatchdog disarms it once no group's storage needs it.
func (e simEffects) DisarmWatchdog() {
	e.d.wd = false
	for _, d := range e.p.ds {
		if d.wd {
			return
		}
	}
	if wd := e.p.n.wd; wd != nil {
		wd.disarm()
	}
}

// SelfFence is the daemon's self-fence (daemon/selffence.go): hold the
// watchdog (armed if it was not, fed no more, left open), then reset
// through sysrq; a held watchdog resets the machine at its timeout. It
// reports whether a reset is under way.
func (e simEffects) SelfFence(reason string) bool {
	n := e.p.n
	n.w.tracef("%s SELF-FENCE: %s", n.name, reason)
	if wd := n.wd; wd != nil {
		if !wd.armed {
			wd.arm()
		}
		wd.halted = true
	}
	if n.sysrq() {
		n.reset("self-fence (sysrq)")
		return true
	}
	return n.wd != nil
}

// Exit is the daemon's exit after a self-fence that could not reset the
// machine; systemd starts it again (RestartSec=5s).
func (e simEffects) Exit(reason string) {
	n := e.p.n
	n.w.tracef("%s self-fence impossible: the daemon exits (the machine keeps running)", n.name)
	n.crash(5 * time.Second)
}

// engine tries the target's fence levels in order; the first level whose
// device is read back off wins (powerOnly: levels that cut only the
// storage are not tried, as the stonith engine).
func (p *proc) engine(s *driver.Scope, tn *Node, g int, powerOnly bool, cb func(outcome, msg string, level int)) {
	var try func(level int, unknown bool, msgs []string)
	try = func(level int, unknown bool, msgs []string) {
		if level == levels || s.Cancelled() {
			if s.Cancelled() {
				msgs = append(msgs, "cancelled")
				unknown = true
			}
			outcome := fencing.OutcomeFailed
			if unknown {
				outcome = fencing.OutcomeUnknown
			}
			cb(outcome, fmt.Sprint(msgs), -1)
			return
		}
		if powerOnly && tn.levelCuts(level) {
			try(level+1, unknown, append(msgs, "not tried: it cuts only the storage"))
			return
		}
		p.deviceTry(s, tn, g, level, func(result, msg string) {
			if result == fencing.ResultSuccess {
				cb(fencing.OutcomeSuccess, "", level)
				return
			}
			try(level+1, unknown || result == fencing.ResultUnknown, append(msgs, msg))
		})
	}
	try(0, false, nil)
}

// deviceTry is one try of one device: the off, then the engine's own
// status read-back, within FenceTimeout.
func (p *proc) deviceTry(s *driver.Scope, tn *Node, g int, level int, cb func(result, msg string)) {
	w, n, inc := p.w, p.n, p.inc
	mode := tn.dev[level]
	timeout := n.timing().FenceTimeout
	finished := false
	finish := func(result, msg string) {
		if finished {
			return
		}
		finished = true
		n.exec(inc, func() { cb(result, msg) })
	}
	p.timer(timeout, func() { finish(fencing.ResultUnknown, "timeout") })
	s.OnCancel(func() { finish(fencing.ResultUnknown, "cancelled") })
	act := uniform(n.rng, 20*time.Millisecond, 300*time.Millisecond)
	readBack := uniform(n.rng, 5*time.Millisecond, 50*time.Millisecond)
	w.tracef("%s fences %s at level %d (device %s)", n.name, tn.name, level+1, devNames[mode])
	switch mode {
	case devFail:
		w.after(act, func() { finish(fencing.ResultFailed, "device refused") })
	case devHang:
	case devOK, devSlow, devLie:
		if mode == devSlow {
			act = timeout/2 + uniform(n.rng, 0, timeout*4/10)
		}
		cuts := tn.levelCuts(level)
		w.after(act, func() {
			switch {
			case mode == devLie:
			case cuts:
				w.tracef("%s's storage access cut by %s%s", tn.name, n.name, w.chk.gname(g))
				tn.st[g].cut = true
			default:
				tn.fencedOff(n.name)
			}
			if w.opt.Mutation == MutNoReadBack {
				finish(fencing.ResultSuccess, "") // broken on purpose: the ack is trusted
				return
			}
			w.after(readBack, func() {
				if cuts && !tn.st[g].cut || !cuts && tn.on {
					finish(fencing.ResultFailed, "device acknowledged off but reads back on")
					return
				}
				finish(fencing.ResultSuccess, "")
			})
		})
	}
}

// The storage: Start, Stop and Monitor as the daemon's Resource runs them.

func (p *proc) storageStart(s *driver.Scope, g int, epoch uint64, cb func(error)) {
	w, n, inc := p.w, p.n, p.inc
	w.chk.storageStart(n, g, epoch)
	st := &n.st[g]
	st.running, st.runEpoch = true, epoch
	done := func(err error) { n.exec(inc, func() { cb(err) }) }
	d := uniform(n.rng, 5*time.Millisecond, 150*time.Millisecond)
	switch {
	case st.cut:
		w.after(d, func() { done(errors.New("mount: reservation conflict (this node is fenced from the storage)")) })
	case n.stStart == opOK:
		w.after(d, func() { done(nil) })
	case n.stStart == opFail:
		w.after(d, func() { done(errors.New("start hook: exit status 1")) })
	case n.stStart == opHang:
		s.OnCancel(func() { w.after(time.Millisecond, func() { done(context.Canceled) }) })
		st.hungStart = func() { done(errors.New("start hook killed by the admin")) }
	case n.stStart == opStuck:
		st.hungStart = func() { done(errors.New("start hook killed by the admin")) }
	}
}

func (p *proc) storageStop(g int, deadline tenure.Time, cb func(error)) {
	w, n, inc := p.w, p.n, p.inc
	grace := max(deadline.Sub(n.local()), 0)
	d := uniform(n.rng, 5*time.Millisecond, 100*time.Millisecond)
	if has(w.sc.SlowStop, n.id) {
		d = uniform(n.rng, grace*6/10, grace*95/100)
	}
	switch n.stStop {
	case opOK:
		if d < grace {
			w.after(d, func() {
				n.exec(inc, func() {
					n.st[g].running, n.st[g].stray = false, false
					cb(nil)
				})
			})
			return
		}
		fallthrough
	case opHang:
		p.timer(grace, func() { cb(context.DeadlineExceeded) })
	case opFail:
		w.after(d, func() {
			n.exec(inc, func() { cb(errors.New("umount: target is busy")) })
		})
	case opStuck:
	}
}

func (p *proc) storageMonitor(s *driver.Scope, g int, cb func(error)) {
	n := p.n
	post := func(err error) {
		if !s.Cancelled() {
			cb(err)
		}
	}
	switch {
	case n.st[g].cut:
		p.timer(uniform(n.rng, time.Millisecond, 20*time.Millisecond), func() { post(errors.New("monitor: I/O error (fenced from the storage)")) })
	case n.stMon == opOK:
		p.timer(uniform(n.rng, time.Millisecond, 20*time.Millisecond), func() { post(nil) })
	case n.stMon == opFail:
		p.timer(uniform(n.rng, time.Millisecond, 20*time.Millisecond), func() { post(errors.New("monitor hook: exit status 7")) })
	default:
		p.timer(n.profile().monitor, func() { post(context.DeadlineExceeded) })
	}
}
