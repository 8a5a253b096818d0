package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
)

// Mutation deliberately breaks one rule, for the negative controls: the
// checker must catch every one of them. None is reachable from the product.
type Mutation uint8

const (
	MutNone Mutation = iota
	// MutNoReadBack trusts a fence device's acknowledgement without the
	// engine's read-back: a device that acks off and leaves the node on
	// produces a "confirmed" fence.
	MutNoReadBack
	// MutSkipWait answers the successor's lease-bound query at once with a
	// bound long past: the successor skips its lease + margin wait.
	MutSkipWait
	// MutMinBound takes the earliest answer of the lease-bound query
	// instead of the majority-th: a minority that lost contact early
	// shortens the wait.
	MutMinBound
	// MutStaleConfirm renews the lease whenever the node believes it leads
	// (no barrier through a majority), as a lease read from a stale
	// leadership flag would.
	MutStaleConfirm
	// MutNoTimings hides the timings holders advertised from the
	// machines: each successor waits out its own.
	MutNoTimings
	// MutBlindUnfence hides the fence history from the start-up: a node
	// fenced during this boot unfences itself.
	MutBlindUnfence
	// MutTokensOnly declares a group with a floating address as if every
	// resource checked tokens.
	MutTokensOnly
	// MutTrustWatchdog advertises a watchdog whose timer stops when the
	// daemon's file closes.
	MutTrustWatchdog
	// MutGroupMixup shows every group's machine the default group's
	// list of who may still run it (unconfirmed nodes, formers, the
	// lease it waits for) instead of its own.
	MutGroupMixup
	// MutBarrierRenew renews a group held off the leader with a raft
	// barrier through the leader instead of OpRenew: it commits even
	// after a successor's grant.
	MutBarrierRenew
)

var mutationNames = [...]string{"none", "no-read-back", "skip-wait", "min-bound", "stale-confirm", "no-timings", "blind-unfence",
	"tokens-only", "trust-watchdog", "group-mixup", "barrier-renew"}

func (m Mutation) String() string {
	if int(m) < len(mutationNames) {
		return mutationNames[m]
	}
	return fmt.Sprintf("mutation(%d)", m)
}

// Mutations lists the negative controls.
var Mutations = []Mutation{MutNoReadBack, MutSkipWait, MutMinBound, MutStaleConfirm, MutNoTimings, MutBlindUnfence, MutTokensOnly,
	MutTrustWatchdog, MutGroupMixup, MutBarrierRenew}

// Options are what a run does besides its schedule.
type Options struct {
	Mutation Mutation
	// Trace keeps a line per noteworthy event (Result.Trace).
	Trace bool
}

// Drift is the clock-rate bound the simulated clocks stay within (parts
// per million): 0.1 %, what tenure.MinMarginFraction's comment allows for.
const Drift = 1000

// event is one thing that happens at a point of true time.
type event struct {
	at  int64
	seq uint64
	fn  func()
}

// World is one run: the nodes, the network, the event queue and the
// checker, on true (virtual) time in nanoseconds.
type World struct {
	sc       Schedule
	opt      Options
	timing   tenure.Timing
	ht       time.Duration // raft's follower heartbeat timeout
	majority int

	now  int64
	seq  uint64
	heap []event
	end  int64

	nodes []*Node
	net   network
	rng   *rand.Rand // nemesis and network noise
	chk   checker

	entrySeq                            uint64
	partTok, lossTok, slowTok, stallTok int

	steps      int // machine steps, for statistics
	events     int
	fenceJoins int // of processes that ended (live ones: their driver.Fences)
	moves      map[[2]tenure.Phase]int
	trace      []string
}

func (w *World) at(t int64, fn func()) {
	if t < w.now {
		t = w.now
	}
	w.seq++
	w.heap = append(w.heap, event{at: t, seq: w.seq, fn: fn})
	// sift up
	h := w.heap
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (w *World) after(d time.Duration, fn func()) { w.at(w.now+int64(d), fn) }

func less(a, b event) bool { return a.at < b.at || a.at == b.at && a.seq < b.seq }

func (w *World) pop() event {
	h := w.heap
	e := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{}
	h = h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && less(h[l], h[m]) {
			m = l
		}
		if r < len(h) && less(h[r], h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	w.heap = h
	return e
}

// tracef records a trace line when tracing.
func (w *World) tracef(format string, args ...any) {
	if !w.opt.Trace {
		return
	}
	w.trace = append(w.trace, fmt.Sprintf("%9.3fms ", float64(w.now)/1e6)+fmt.Sprintf(format, args...))
}

// uniform returns a duration in [lo, hi).
func uniform(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// clock is a node's CLOCK_BOOTTIME: it starts at base when the node boots
// and runs ppm parts per million fast (or slow).
type clock struct {
	bootAt int64
	base   int64
	ppm    int64
}

func (c clock) local(t int64) tenure.Time {
	d := t - c.bootAt
	return tenure.Time(c.base + d + d*c.ppm/1e6)
}

// trueOf returns the earliest true time at which the clock reads l or more.
func (c clock) trueOf(l tenure.Time) int64 {
	if l == tenure.Never {
		return 1<<63 - 1
	}
	d := (int64(l) - c.base) * 1e6 / (1e6 + c.ppm)
	t := c.bootAt + d
	for c.local(t) < l {
		t++
	}
	for c.local(t-1) >= l {
		t--
	}
	return t
}

// Failure is a violated invariant.
type Failure struct {
	Invariant string
	At        time.Duration // true time
	Detail    string
}

func (f *Failure) Error() string {
	return fmt.Sprintf("invariant %q violated at %s: %s", f.Invariant, f.At, f.Detail)
}

// Result is the outcome of one run.
type Result struct {
	Failure *Failure
	// Live is how long after the heal a primary acted (−1: the run
	// ended before the heal, e.g. on a failure).
	Live   time.Duration
	Steps  int // machine steps
	Events int
	// Moves counts the machines' phase changes (what the run exercised).
	Moves map[[2]tenure.Phase]int
	// Grants is, per group, how many epochs the committed log granted.
	Grants []int
	// FenceJoins counts takeovers that waited for another group's fence
	// of the same node instead of running their own (driver.Fences).
	FenceJoins int
	// OffLeader counts grants to a node that did not lead raft then.
	OffLeader int
	Trace     []string
}

// Run executes one schedule.
func Run(sc Schedule, opt Options) Result {
	w := newWorld(sc, opt)
	w.start()
	for len(w.heap) > 0 && w.chk.fail == nil {
		e := w.pop()
		if e.at > w.end {
			break
		}
		w.now = e.at
		w.events++
		e.fn()
	}
	if w.chk.fail == nil && w.chk.live < 0 {
		w.chk.failf(InvLiveness, "no primary acted within %s of the heal (the liveness bound)", w.livenessBound())
	}
	for g, gc := range w.chk.gs {
		// After the heal a group moves only because its node must give it
		// up (down at the heal, fenced, ineligible): at most a few times.
		if w.chk.fail == nil && gc.placedAfterHeal > 3*w.sc.Nodes {
			w.chk.failf(InvLiveness, "group %s placed %d times after the heal: a placement loop", groupName(g), gc.placedAfterHeal)
		}
	}
	for _, n := range w.nodes {
		if n.proc != nil {
			w.fenceJoins += n.proc.fences.Joins()
		}
	}
	r := Result{Failure: w.chk.fail, Live: w.chk.live, Steps: w.steps, Events: w.events, Moves: w.moves, Trace: w.trace, FenceJoins: w.fenceJoins, OffLeader: w.chk.offLeader}
	for _, g := range w.chk.gs {
		r.Grants = append(r.Grants, len(g.grants))
	}
	if r.Failure != nil && opt.Trace {
		r.Trace = append(r.Trace, "FAILURE: "+r.Failure.Error())
	}
	return r
}

func newWorld(sc Schedule, opt Options) *World {
	w := &World{sc: sc, opt: opt, timing: profiles[sc.Profile].timing, moves: map[[2]tenure.Phase]int{}}
	w.ht = w.timing.Raft().HeartbeatTimeout
	w.majority = sc.Nodes/2 + 1
	w.rng = rand.New(rand.NewPCG(sc.Seed, 0x5eed))
	w.net = newNetwork(w, sc.Nodes)
	for i := range sc.Nodes {
		w.nodes = append(w.nodes, newNode(w, i))
	}
	for _, i := range sc.Watchdog {
		w.nodes[i].wd = newSimWatchdog(w.nodes[i])
	}
	w.chk.init(w)
	w.end = int64(sc.Heal + w.livenessBound())
	return w
}

func (w *World) start() {
	for _, n := range w.nodes {
		n.powerOn()
	}
	for i, f := range w.sc.Faults {
		w.at(int64(f.At), func() { w.inject(i, f) })
	}
	w.at(int64(w.sc.Heal), w.heal)
}

func (w *World) node(name string) *Node {
	for _, n := range w.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func nodeName(i int) string { return fmt.Sprintf("n%d", i+1) }

// groups is how many resource groups the run has.
func (w *World) groups() int { return max(w.sc.Groups, 1) }

// groupName is group g's name in commands: "" for the first (the default
// group), g2, g3… for the others.
func groupName(g int) string {
	if g == 0 {
		return ""
	}
	return fmt.Sprintf("g%d", g+1)
}

// groupIndex is the group a command or record names (−1: none of the run's).
func (w *World) groupIndex(name string) int {
	if name == "" || name == quorum.DefaultGroup {
		return 0
	}
	for g := 1; g < w.groups(); g++ {
		if groupName(g) == name {
			return g
		}
	}
	return -1
}

// maxTiming is, field by field, the longest timing any node runs.
func (w *World) maxTiming() tenure.Timing {
	var m tenure.Timing
	for _, n := range w.nodes {
		t := n.timing()
		m.Heartbeat, m.Lease, m.Margin = max(m.Heartbeat, t.Heartbeat), max(m.Lease, t.Lease), max(m.Margin, t.Margin)
		m.Grace, m.FenceTimeout = max(m.Grace, t.Grace), max(m.FenceTimeout, t.FenceTimeout)
	}
	return m
}

// leaderProc returns a process that leads raft right now (the highest
// term if a stale one still believes it leads), or nil.
func (w *World) leaderProc() *proc {
	var best *proc
	for _, n := range w.nodes {
		p := n.live()
		if p != nil && !n.paused && p.role == leader && (best == nil || n.term > best.n.term) {
			best = p
		}
	}
	return best
}
