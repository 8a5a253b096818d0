package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
)

// devMode is how a fence device behaves.
type devMode uint8

const (
	devOK   devMode = iota // powers the node off; reads back off
	devFail                // refuses: an error, nothing happens
	devHang                // never answers: the engine's timeout ends the try
	devLie                 // acknowledges off, the node stays on
	devSlow                // powers off, just inside the timeout
	numDevModes
)

var devNames = [...]string{"ok", "fail", "hang", "lie", "slow"}

// opMode is how a storage operation behaves.
type opMode uint8

const (
	opOK    opMode = iota
	opFail         // returns an error (a failed start may leave it running)
	opHang         // returns only when its context ends
	opStuck        // never returns, even when cancelled (a mount in D state)
	numOpModes
)

var opNames = [...]string{"ok", "fail", "hang", "stuck"}

// Levels of fence devices each node has.
const levels = 2

// Node is one machine: its power, boot clock, disk (raft's durable state
// and the FSM), the shared storage as it really is on this machine, its
// fence devices, and the fenced process if one runs.
type Node struct {
	w    *World
	id   int
	name string
	ppm  int64
	rng  *rand.Rand
	clk  clock

	on    bool
	boots int

	// Durable raft state: survives a crash and a power cycle.
	term      uint64
	votedFor  int
	votedTerm uint64
	log       []entry // log[0] is a sentinel
	fsm       *quorum.FSM
	applied   uint64
	lastEpoch []uint64 // per group, the highest epoch this node's FSM showed (checker)

	// The process.
	proc    *proc
	incs    int
	paused  bool
	pending []func()
	restart int // token: a later restart or power-on replaces an earlier one

	// st is each group's storage as it physically is here.
	st []gstore
	// wd is the watchdog device, if the node has one.
	wd *simWatchdog
	// advBoot is the boot ID the node's daemon last advertised (gossip
	// keeps the last one it heard).
	advBoot string

	dev                    [levels]devMode
	devTok                 [levels]int
	stStart, stStop, stMon opMode
	stTok                  [3]int
	afterExit              time.Duration // restart delay after a graceful stop (0: at the heal)
	// byHand: the admin is recovering it by hand (recoverByHand).
	byHand bool
	// standbyWant is what the admin last asked for this node's standby.
	standbyWant bool
	standbyTok  int
}

func newNode(w *World, i int) *Node {
	n := &Node{w: w, id: i, name: nodeName(i), ppm: w.sc.PPM[i], votedFor: -1,
		rng: rand.New(rand.NewPCG(w.sc.Seed, uint64(i)+1)), fsm: quorum.NewFSM(64)}
	n.log = []entry{{}}
	n.st = make([]gstore, w.groups())
	n.lastEpoch = make([]uint64, w.groups())
	return n
}

// cutAny reports whether a storage-level fence cut this machine from any
// group's storage.
func (n *Node) cutAny() bool {
	for _, g := range n.st {
		if g.cut {
			return true
		}
	}
	return false
}

// gstore is one group's storage as it physically is on a machine: started
// (mounted, its service running) and not yet stopped. A crash of the
// daemon leaves it so; only a successful stop or a power-off ends it.
type gstore struct {
	running  bool
	runEpoch uint64
	// stray: it runs here, left by a daemon that died, and the probe
	// cannot see it (Modes.Stray).
	stray bool
	// cut: a storage-level fence of the group removed this machine's
	// access to its storage (its SCSI registration); what runs here can
	// no longer write it. Only the node's own unfence, or a reboot,
	// restores it — the registration is the initiator's, so a power
	// cycle alone does not: the node unfences itself at start.
	cut bool
	// hungStart ends a start that hangs (the heal does: nothing in the
	// machine bounds a start, see livenessBound).
	hungStart func()
}

func (n *Node) local() tenure.Time { return n.clk.local(n.w.now) }

// trueDur converts a duration on this node's clock to true time, rounded
// up.
func (n *Node) trueDur(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration((int64(d)*1e6 + (1e6 + n.ppm) - 1) / (1e6 + n.ppm))
}

// live returns the running process, or nil.
func (n *Node) live() *proc { return n.proc }

// exec runs fn on process incarnation inc: dropped if that process is gone,
// held while it is paused.
func (n *Node) exec(inc int, fn func()) {
	p := n.proc
	if p == nil || p.inc != inc {
		return
	}
	if n.paused {
		n.pending = append(n.pending, fn)
		return
	}
	fn()
}

// powerOn boots the machine; the daemon starts a little later.
func (n *Node) powerOn() {
	if n.on {
		return
	}
	w := n.w
	n.on = true
	n.boots++
	base := int64(uniform(n.rng, 500*time.Millisecond, 30*time.Second))
	if n.rng.IntN(4) == 0 {
		base = int64(uniform(n.rng, 24*time.Hour, 400*24*time.Hour)) // a long uptime
	}
	n.clk = clock{bootAt: w.now, base: base, ppm: n.ppm}
	w.tracef("%s power on", n.name)
	boot := uniform(n.rng, 10*time.Millisecond, 300*time.Millisecond)
	if w.now > 0 {
		boot = uniform(n.rng, 300*time.Millisecond, time.Second)
	}
	n.restart++
	tok := n.restart
	w.after(boot, func() {
		if n.on && n.proc == nil && n.restart == tok {
			n.startProc()
		}
	})
}

// powerOff cuts the power: the process, the storage, everything stops at
// this instant. The disk keeps raft's state.
func (n *Node) powerOff(why string) {
	n.restart++
	if !n.on {
		return
	}
	n.w.tracef("%s POWER OFF (%s)", n.name, why)
	n.kill()
	n.on = false
	for g := range n.st {
		n.st[g].running, n.st[g].stray = false, false
	}
	if n.wd != nil {
		n.wd.armed = false
	}
	n.restart++
}

// kill ends the process (SIGKILL, or part of a power-off). The storage it
// started stays as it is.
func (n *Node) kill() {
	if n.proc != nil {
		n.proc.dead = true
		n.w.fenceJoins += n.proc.fences.Joins()
		for g := range n.st {
			n.st[g].stray = n.st[g].running && has(n.w.sc.Stray, n.id)
		}
		if wd := n.wd; wd != nil && wd.armed && !wd.magic {
			// The process's file closes: without magic close (or
			// nowayout) that stops the timer.
			n.w.tracef("%s watchdog closed by the exit: disarmed (no magic close)", n.name)
			wd.armed = false
		}
	}
	n.proc = nil
	n.paused = false
	n.pending = nil
}

// crash kills the daemon; it restarts after `after` (0: not by itself).
func (n *Node) crash(after time.Duration) {
	if n.proc == nil {
		return
	}
	n.w.tracef("%s daemon killed", n.name)
	n.kill()
	n.scheduleRestart(after)
}

func (n *Node) scheduleRestart(after time.Duration) {
	n.restart++
	if after <= 0 {
		return
	}
	tok := n.restart
	n.w.after(after, func() {
		if n.on && n.proc == nil && n.restart == tok {
			n.startProc()
		}
	})
}

// bootID is the machine's boot ID in this boot.
func (n *Node) bootID() string { return fmt.Sprintf("%s.boot%d", n.name, n.boots) }

func (n *Node) startProc() {
	n.advBoot = n.bootID()
	n.incs++
	p := newProc(n, n.incs)
	n.proc = p
	n.w.tracef("%s daemon starts (term %d, log %d, applied %d)", n.name, n.term, len(n.log)-1, n.applied)
	p.start()
}

// pause stops the process (SIGSTOP) for d: nothing it would do happens
// until then; what arrives waits.
func (n *Node) pause(d time.Duration) {
	if n.proc == nil || n.paused {
		return
	}
	n.w.tracef("%s paused for %s", n.name, d)
	n.paused = true
	inc := n.proc.inc
	n.w.after(d, func() {
		if n.proc != nil && n.proc.inc == inc {
			n.resume()
		}
	})
}

func (n *Node) resume() {
	if !n.paused {
		return
	}
	n.w.tracef("%s resumed (%d held)", n.name, len(n.pending))
	n.paused = false
	q := n.pending
	n.pending = nil
	inc := n.proc.inc
	for _, fn := range q {
		if n.proc == nil || n.proc.inc != inc {
			return
		}
		if n.paused {
			n.pending = append(n.pending, fn)
			continue
		}
		fn()
	}
}

// fencedOff is a fence device cutting the power. Before the heal the node
// stays off; after it, it is powered on again shortly (an admin, or a
// reboot action), or else a fence after the heal could leave a minority.
func (n *Node) fencedOff(by string) {
	n.powerOff("fenced by " + by)
	if !n.w.chk.healed || n.w.isDown(n) {
		return
	}
	tok := n.restart
	n.w.after(uniform(n.rng, 300*time.Millisecond, time.Second), func() {
		if n.restart == tok {
			n.powerOn()
		}
	})
}

// reset is a reset of the machine (sysrq, its watchdog): off now, on
// again shortly.
func (n *Node) reset(why string) {
	n.powerOff(why)
	n.restart++
	tok := n.restart
	n.w.after(uniform(n.rng, 500*time.Millisecond, 2*time.Second), func() {
		if n.restart == tok && !n.w.isDown(n) {
			n.powerOn()
		}
	})
}

// sysrq reports whether the node resets itself through sysrq.
func (n *Node) sysrq() bool { return !has(n.w.sc.NoSysrq, n.id) }

// timing is the lease timing this node's daemon runs.
func (n *Node) timing() tenure.Timing { return n.profile().timing }

func (n *Node) profile() profile {
	if ts := n.w.sc.Timings; len(ts) > 0 {
		return timingProfile(ts[n.id])
	}
	return profiles[n.w.sc.Profile]
}

// levelCuts reports whether fence level lvl of this node cuts its storage
// access (a SCSI reservation) rather than its power.
func (n *Node) levelCuts(lvl int) bool {
	sc := n.w.sc
	return has(sc.SCSI, n.id) && (lvl == 0 || has(sc.SCSIOnly, n.id))
}
