package sim

import (
	"context"
	"slices"
	"time"

	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// inject starts fault i of the schedule.
func (w *World) inject(i int, f Fault) {
	if w.chk.healed {
		return
	}
	N := w.sc.Nodes
	if f.Primary {
		if p := w.primary(); p >= 0 {
			if f.Kind == Partition && f.Arg%numShapes == shapeOneWay && int(f.Mask)%N == p {
				f.Mask = uint64(f.Node)
			}
			f.Node = p
		}
		f.Primary = false
	}
	w.tracef("FAULT #%d: %s", i, f.Describe(N))
	n := w.nodes[f.Node]
	switch f.Kind {
	case Partition:
		w.partTok++
		tok := w.partTok
		switch f.Arg % numShapes {
		case shapeSplit:
			g := make([]int, N)
			for j := range N {
				g[j] = int(f.Mask >> j & 1)
			}
			w.net.partition(g)
		case shapeIsolate:
			g := make([]int, N)
			g[f.Node] = 1
			w.net.partition(g)
		case shapeBridge:
			side := make([]int, N)
			for j := range N {
				side[j] = int(f.Mask >> j & 1)
			}
			w.net.bridge(f.Node, side)
		case shapeOneWay:
			w.net.heal()
			w.net.oneWay(f.Node, int(f.Mask)%N)
		case shapeRandom:
			w.net.randomCuts(f.Mask)
		}
		w.after(f.Dur, func() {
			if w.partTok == tok && !w.chk.healed {
				w.tracef("partition #%d heals", i)
				w.net.heal()
			}
		})
	case Loss:
		w.lossTok++
		tok := w.lossTok
		w.net.loss = f.Arg
		w.after(f.Dur, func() {
			if w.lossTok == tok {
				w.net.loss = 0
			}
		})
	case Slow:
		w.slowTok++
		tok := w.slowTok
		w.net.slow = time.Duration(f.Arg) * time.Millisecond
		w.after(f.Dur, func() {
			if w.slowTok == tok {
				w.net.slow = 0
			}
		})
	case Pause:
		n.pause(f.Dur)
	case Crash:
		n.crash(f.Dur)
	case Power:
		n.powerOff("power loss")
		n.restart++
		if f.Dur > 0 {
			tok := n.restart
			w.after(f.Dur, func() {
				if n.restart == tok {
					n.powerOn()
				}
			})
		}
	case Shutdown:
		if p := n.proc; p != nil && !n.paused {
			n.afterExit = f.Dur
			for _, d := range p.ds {
				d.drv.Shutdown()
			}
		}
	case Device:
		for lvl := range levels {
			if a := f.Arg & 0xf; a < levels && a != lvl {
				continue
			}
			n.devTok[lvl]++
			tok := n.devTok[lvl]
			n.dev[lvl] = devMode((f.Arg >> 4) % int(numDevModes))
			w.after(f.Dur, func() {
				if n.devTok[lvl] == tok {
					n.dev[lvl] = devOK
				}
			})
		}
	case Storage:
		op := (f.Arg & 0xf) % 3
		n.stTok[op]++
		tok := n.stTok[op]
		*n.stOp(op) = opMode((f.Arg >> 4) % int(numOpModes))
		w.after(f.Dur, func() {
			if n.stTok[op] == tok {
				*n.stOp(op) = opOK
			}
		})
	case Handover:
		q := w.leaderProc()
		if q == nil {
			return
		}
		to := n.name
		if f.Arg != 0 {
			to = ""
		}
		if to == q.n.name {
			return // the API refuses: it already is the primary-elect
		}
		for _, d := range q.ds {
			d.drv.HandOff(to) // (every group: the primary-elect holds them all)
		}
	case Confirm:
		if n.on {
			return // the admin confirms only a node that is really down
		}
		w.confirm(n)
	case Standby:
		w.standby(n, true)
		w.after(f.Dur, func() { w.standby(n, false) })
	case Stall:
		w.stallTok++
		tok := w.stallTok
		w.net.stallLinks(f.Mask)
		w.after(f.Dur, func() {
			if w.stallTok == tok {
				clear(w.net.stall)
			}
		})
	case Ineligible:
		p := n.proc
		if p == nil {
			return
		}
		p.inel["config"] = "its configuration differs from the cluster's"
		p.loopKick()
		w.after(f.Dur, func() {
			if n.proc == p {
				delete(p.inel, "config")
				p.loopKick()
			}
		})
	case Move:
		// `fencectl move GROUP NODE`: the leader commits the placement;
		// its own placement moves the group again if the node may not
		// take it.
		q := w.leaderProc()
		if q == nil || f.Arg < 1 || f.Arg >= w.groups() {
			return
		}
		q.applyCmd(quorum.Command{Op: quorum.OpPlace, Group: groupName(f.Arg), Node: n.name}, func(any, error) {})
	case AdminFence:
		q := w.leaderProc()
		if q == nil || q.n == n {
			return // the API refuses: the leader hands over first, and the admin retries
		}
		q.drv.Fence(driver.NewScope(context.Background()), driver.FenceRequest{Target: n.name, Action: fencing.ActionOff,
			Reason: "fenced by the admin", RequestedBy: "admin"}, func(fencing.Record) {})
	}
}

// standby is `fencectl standby NODE on|off` on the leader; the admin
// retries until it is committed (the heal depends on the off). An off
// keeps being checked: an earlier on that a leader appended but did not
// commit before it lost leadership can still commit after it (a later
// leader commits it), and the admin, seeing the node in standby again,
// turns it off again.
func (w *World) standby(n *Node, on bool) {
	if w.chk.healed && on {
		return
	}
	n.standbyWant = on
	n.standbyTok++
	tok := n.standbyTok
	var try func()
	try = func() {
		if n.standbyTok != tok {
			return
		}
		if w.chk.tfsm.Holders().Standby[n.name] == on {
			if !on {
				w.after(100*time.Millisecond, try)
			}
			return
		}
		if q := w.leaderProc(); q != nil {
			q.applyCmd(quorum.Command{Op: quorum.OpStandby, Node: n.name, Flag: on}, func(any, error) {})
		}
		w.after(100*time.Millisecond, try)
	}
	try()
}

// primary is the node acting as primary, else one holding an epoch, else
// raft's leader; −1 if none.
func (w *World) primary() int {
	best, rank := -1, 0
	for _, n := range w.nodes {
		p := n.proc
		if p == nil || p.m == nil {
			continue
		}
		r := 0
		switch {
		case p.m.Acting(n.local()):
			r = 3
		case p.m.Epoch() != 0:
			r = 2
		case p.role == leader:
			r = 1
		}
		if r > rank {
			best, rank = n.id, r
		}
	}
	return best
}

func (n *Node) stOp(op int) *opMode {
	switch op {
	case stOpStart:
		return &n.stStart
	case stOpStop:
		return &n.stStop
	}
	return &n.stMon
}

// recoverByHand is an admin powering a node off, confirming it down (on
// the leader, retried until committed), and powering it on again.
func (w *World) recoverByHand(n *Node) {
	n.byHand = true
	n.powerOff("powered off by the admin")
	n.restart++
	var try func(i int)
	try = func(i int) {
		if !w.listed(n, false) || i > 100 {
			n.byHand = false
			n.powerOn()
			return
		}
		w.confirm(n)
		w.after(100*time.Millisecond, func() { try(i + 1) })
	}
	try(0)
}

// listed reports whether any group lists n as unconfirmed (unclean: as
// unclean).
func (w *World) listed(n *Node, unclean bool) bool {
	for g := range w.groups() {
		v := w.chk.tfsm.HoldersOf(groupName(g))
		if _, ok := v.Unconfirmed[n.name]; ok && !unclean {
			return true
		}
		if _, ok := v.Unclean[n.name]; ok && unclean {
			return true
		}
	}
	return false
}

// adminWatch is the admin after the heal: a node marked unclean later
// (its stop failed after the heal, say) that no level of its own can
// power off is powered off by hand and confirmed, as at the heal.
func (w *World) adminWatch() {
	for _, n := range w.nodes {
		if !n.byHand && has(w.sc.SCSIOnly, n.id) && w.listed(n, true) {
			w.tracef("%s marked unclean after the heal, and no level powers it off: the admin steps in", n.name)
			w.recoverByHand(n)
		}
	}
	w.after(500*time.Millisecond, w.adminWatch)
}

// confirm is `fencectl confirm NODE --yes` on the leader.
func (w *World) confirm(n *Node) {
	q := w.leaderProc()
	if q == nil {
		return
	}
	now := w.wall()
	rec := fencing.Record{Kind: fencing.KindConfirm, Target: n.name, Reason: "confirmed down by the admin", RequestedBy: "admin",
		Executor: q.n.name, Epoch: q.n.fsm.Holders().Epoch, Started: now, Finished: now, Outcome: fencing.OutcomeSuccess}
	q.applyCmd(quorum.Command{Op: quorum.OpRecord, Record: &rec}, func(any, error) {})
}

func (w *World) downOf(n *Node) (Down, bool) {
	for _, d := range w.sc.Down {
		if d.Node == n.id {
			return d, true
		}
	}
	return Down{}, false
}

// isDown reports a node that stays down after the heal.
func (w *World) isDown(n *Node) bool {
	_, down := w.downOf(n)
	return w.chk.healed && down
}

// heal ends the faults: from here a majority is connected and every node
// has a working fence path, so a primary must act within livenessBound.
func (w *World) heal() {
	w.chk.healed = true
	w.tracef("HEAL (liveness bound %s)", w.livenessBound())
	w.partTok++
	w.lossTok++
	w.slowTok++
	w.net.heal()
	clear(w.net.stall)
	w.stallTok++
	w.net.loss, w.net.slow = 0, 0
	for _, n := range w.nodes {
		for l := range levels {
			n.devTok[l]++
			n.dev[l] = devOK
		}
		if slices.Contains(w.sc.CalmDev, n.id) && !n.levelCuts(0) {
			// (A storage-level device that hangs for good would keep
			// its node from unfencing itself, ever.)
			n.dev[0] = devHang
		}
		for op := range 3 {
			n.stTok[op]++
			*n.stOp(op) = opOK
		}
		if n.standbyWant {
			w.standby(n, false)
		}
		for g := range n.st {
			if f := n.st[g].hungStart; f != nil {
				n.st[g].hungStart = nil
				f()
			}
		}
		if d, down := w.downOf(n); down {
			n.restart++
			if d.Off {
				n.powerOff("down at the heal")
			} else if n.proc != nil {
				n.crash(0)
			}
			continue
		}
		if n.paused {
			n.resume()
		}
		if p := n.proc; p != nil && p.inel["config"] != "" {
			delete(p.inel, "config")
			p.loopKick()
		}
		unclean := w.listed(n, true)
		switch {
		case unclean:
			// A node that could not stop the group nor reset itself,
			// and that no power level can fence: an admin powers it off
			// by hand and confirms it (fencectl confirm).
			w.recoverByHand(n)
		case n.on && n.cutAny():
			// An admin reboots a node fenced from the storage: it
			// unfences itself when it starts again.
			n.reset("rebooted by the admin (fenced from the storage)")
		case !n.on:
			n.powerOn()
		case n.proc == nil:
			n.scheduleRestart(10 * time.Millisecond)
		}
	}
	w.chk.afterStep(nil)
	w.after(500*time.Millisecond, w.adminWatch)
}

// livenessBound is how long after the heal a primary must act. Its terms,
// each a worst case the heal can leave behind:
//   - boot: a node powered on at the heal starts its daemon within 1s;
//   - election: a dead leader is noticed within 3 HT (the last contact
//     ages HT, the randomised timer fires within 2 HT more), and an
//     election round takes at most 2 HT (pre-vote and vote); up to 8
//     rounds are allowed for split votes;
//   - a holder still demoting at the heal stops within grace, or self-fences;
//   - a node whose storage failed, or whose leadership transfer failed,
//     keeps off primacy for a lease;
//   - the former holder's lease: lease + margin;
//   - fencing: a fence in flight at the heal (both levels hanging: 2 ×
//     FenceTimeout) and the takeover's own (its first level may hang);
//   - at most a minority less one is down: a takeover fences a former
//     holder that did not release even when it is alive and following,
//     and at a bare majority that costs the majority; the next leader then
//     fences the last, and so on until a release commits (measured: up to
//     20s; with fence action off rather than a reboot, an outage until
//     an admin powers the node on);
//   - standby flags are cleared (the admin retries until it commits);
//   - a storage start that hangs is ended by the heal (an admin kills the
//     hook): the machine itself puts no bound on a start, so a hung start
//     hook on the holder would keep every node from acting, forever;
//   - a blocked takeover retries after its backoff, which the fault phase
//     can have grown to at most the first power of two above its length
//     (seconds; 30s at most);
//   - the modes: a daemon that exited for a self-fence it could not carry
//     out restarts after systemd's RestartSec (5s) and probes; a watchdog
//     level waits for the watchdog's timeout; a node that unfences itself
//     at start retries on a backoff like the fence's.
func (w *World) livenessBound() time.Duration {
	t, ht := w.maxTiming(), w.ht
	boot := 1300 * time.Millisecond
	election := 3*ht + 8*2*ht
	demote := t.Grace
	cooldown := t.Lease
	formerLease := t.Lease + t.Margin
	fence := (levels + 1) * t.FenceTimeout
	backoff := time.Second
	for backoff < w.sc.Heal && backoff < 30*time.Second {
		backoff *= 2
	}
	var modes time.Duration
	sc := w.sc
	if len(sc.NoSysrq) > 0 || len(sc.Watchdog) < sc.Nodes {
		modes += 5 * time.Second
	}
	if len(sc.WDLevel) > 0 {
		modes += t.Lease
	}
	if len(sc.SCSI) > 0 {
		modes += backoff + boot
	}
	return boot + election + demote + cooldown + formerLease + fence + backoff + modes + w.placeBound()
}

func (w *World) fmtLocal(n *Node, t tenure.Time) string {
	if t == 0 {
		return "-"
	}
	return time.Duration(n.clk.trueOf(t)).String()
}
