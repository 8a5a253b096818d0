package nemesis

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Fault is one injected fault and what it did to the service.
type Fault struct {
	N       int      `json:"n"`
	Kind    string   `json:"kind"`
	Targets []string `json:"targets"`
	Params  string   `json:"params,omitempty"`
	// Primary and its epoch when the fault began.
	Primary string `json:"primary"`
	Epoch   uint64 `json:"epoch"`
	// Start: injected; Healed: every fault removed; Recovered: a primary
	// writes again with every node back.
	Start     time.Time `json:"start"`
	Healed    time.Time `json:"healed"`
	Recovered time.Time `json:"recovered"`
	// Takeover is the time from the injection to the first write of
	// another tenure (node or epoch), if there was one.
	Takeover  time.Duration `json:"takeoverNs,omitempty"`
	NewWriter string        `json:"newWriter,omitempty"`
	// Gap is the longest time without any write from Start to Recovered.
	Gap     time.Duration `json:"gapNs"`
	Blocked bool          `json:"blocked"` // a BLOCKED takeover was seen
	Notes   []string      `json:"notes,omitempty"`
	// Stuck is set when the cluster did not recover in time.
	Stuck string `json:"stuck,omitempty"`
	// Violation is set when the fault's own expectation about safety
	// failed (a takeover that should have blocked did not).
	Violation string `json:"violation,omitempty"`
}

type kindDef struct {
	name     string
	weight   int
	minNodes int
	run      func(r *faultRun) error
}

// Kinds lists every fault kind, in the order of the summary table.
func Kinds() []string {
	var out []string
	for _, k := range kindDefs {
		out = append(out, k.name)
	}
	return out
}

var kindDefs = []kindDef{
	{"kill-primary", 3, 3, killPrimary},
	{"kill-daemon", 2, 3, killDaemon},
	{"kill-follower", 1, 3, killFollower},
	{"pause-primary", 3, 3, pausePrimary},
	{"pause-brief", 1, 3, pauseBrief},
	{"pause-follower", 1, 3, pauseFollower},
	{"restart-graceful", 2, 3, restartGraceful},
	{"restart-node", 2, 3, restartNode},
	{"restart-daemon", 1, 3, restartDaemon},
	{"partition-primary", 3, 3, partitionPrimary},
	{"partition-follower", 1, 3, partitionFollower},
	{"partition-bridge", 2, 3, partitionBridge},
	{"partition-halves", 2, 5, partitionHalves},
	{"packet-loss", 2, 3, packetLoss},
	{"slow-link", 2, 3, slowLink},
	{"dead-bmc", 2, 3, deadBMC},
	{"slow-bmc", 1, 3, slowBMC},
	{"lying-bmc", 2, 3, lyingBMC},
}

// faultRun is the state of one fault while it runs.
type faultRun struct {
	c     *cluster
	ctx   context.Context
	rng   *rand.Rand
	f     *Fault
	lease time.Duration
	prim  *node
	// tenure at the start: the last writer.
	node  string
	epoch uint64
}

func (r *faultRun) note(format string, args ...any) {
	r.f.Notes = append(r.f.Notes, fmt.Sprintf(format, args...))
}

func (r *faultRun) target(ns ...*node) {
	for _, n := range ns {
		r.f.Targets = append(r.f.Targets, n.name)
	}
}

// between returns a duration in [lo, hi] leases.
func (r *faultRun) between(lo, hi float64) time.Duration {
	return time.Duration((lo + r.rng.Float64()*(hi-lo)) * float64(r.lease))
}

func (r *faultRun) sleep(d time.Duration) {
	select {
	case <-r.ctx.Done():
	case <-time.After(d):
	}
}

func (r *faultRun) hold(lo, hi float64) time.Duration {
	d := r.between(lo, hi)
	r.sleep(d)
	return d
}

func (r *faultRun) others(skip ...*node) []*node {
	var out []*node
	for _, n := range r.c.nodes {
		keep := true
		for _, s := range skip {
			keep = keep && n != s
		}
		if keep {
			out = append(out, n)
		}
	}
	return out
}

func (r *faultRun) pick(ns []*node) *node { return ns[r.rng.Intn(len(ns))] }

func (r *faultRun) shuffled(ns []*node) []*node {
	out := append([]*node(nil), ns...)
	r.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// newTenure reports the first write after the fault began by a tenure other
// than the one writing at its start.
func (r *faultRun) newTenure() (Record, bool) {
	return r.c.tail.firstAfter(r.f.Start, func(rec Record) bool { return rec.Node != r.node || rec.Epoch != r.epoch })
}

// waitNewTenure waits up to limit for another tenure's first write.
func (r *faultRun) waitNewTenure(limit time.Duration) (Record, bool) {
	deadline := time.Now().Add(limit)
	for {
		if rec, ok := r.newTenure(); ok {
			return rec, true
		}
		if time.Now().After(deadline) || r.ctx.Err() != nil {
			r.note("no new writer within %v", limit)
			return Record{}, false
		}
		r.sleep(25 * time.Millisecond)
	}
}

// offsets draws the clock offsets of a boot: none, far ahead, or behind
// (bounded by the host's own uptime, clocks cannot go below zero).
func (r *faultRun) offsets() (mono, boot int64) {
	switch r.rng.Intn(4) {
	case 0:
		return 0, 0
	case 1:
		mono = 3600 + r.rng.Int63n(30*86400)
		return mono, mono + r.rng.Int63n(86400)
	case 2:
		back := min(hostUptime()/2, 3600)
		if back < 2 {
			return 0, 0
		}
		mono = -(1 + r.rng.Int63n(back-1))
		return mono, mono
	default:
		mono = r.rng.Int63n(600)
		return mono, mono + r.rng.Int63n(600)
	}
}

func hostUptime() int64 {
	b, _ := os.ReadFile("/proc/uptime")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return int64(v)
}

func killPrimary(r *faultRun) error {
	r.target(r.prim)
	if err := r.prim.crash(); err != nil {
		return err
	}
	r.waitNewTenure(30 * time.Second)
	r.hold(0, 0.5)
	return nil
}

func killDaemon(r *faultRun) error {
	r.target(r.prim)
	if err := r.prim.killDaemon(); err != nil {
		return err
	}
	r.waitNewTenure(30 * time.Second)
	if r.prim.on() {
		r.note("machine still on after the takeover")
	}
	return nil
}

func killFollower(r *faultRun) error {
	f := r.pick(r.others(r.prim))
	r.target(f)
	if err := f.crash(); err != nil {
		return err
	}
	r.hold(0.5, 2)
	return nil
}

func pausePrimary(r *faultRun) error {
	r.target(r.prim)
	if err := r.prim.freeze(); err != nil {
		return err
	}
	d := r.hold(2, 4)
	r.f.Params = "paused " + d.Round(time.Millisecond).String()
	r.prim.thaw()
	return nil
}

func pauseBrief(r *faultRun) error {
	r.target(r.prim)
	if err := r.prim.freeze(); err != nil {
		return err
	}
	d := r.hold(0.1, 0.6)
	r.f.Params = "paused " + d.Round(time.Millisecond).String()
	r.prim.thaw()
	return nil
}

func pauseFollower(r *faultRun) error {
	f := r.pick(r.others(r.prim))
	r.target(f)
	if err := f.freeze(); err != nil {
		return err
	}
	d := r.hold(1, 3)
	r.f.Params = "paused " + d.Round(time.Millisecond).String()
	f.thaw()
	return nil
}

func restartGraceful(r *faultRun) error {
	p := r.prim
	r.target(p)
	if err := p.stopDaemon(10 * r.lease); err != nil {
		return err
	}
	if err := p.crash(); err != nil {
		return err
	}
	r.sleep(r.between(0, 0.5))
	mono, boot := r.offsets()
	r.f.Params = fmt.Sprintf("reboot with clock offsets %+ds/%+ds", mono, boot)
	return p.powerOn(r.ctx, mono, boot)
}

func restartNode(r *faultRun) error {
	n := r.prim
	if r.rng.Intn(2) == 0 {
		n = r.pick(r.others(r.prim))
	}
	r.target(n)
	if err := n.crash(); err != nil {
		return err
	}
	r.sleep(r.between(0, 1))
	mono, boot := r.offsets()
	r.f.Params = fmt.Sprintf("clock offsets %+ds/%+ds", mono, boot)
	return n.powerOn(r.ctx, mono, boot)
}

func restartDaemon(r *faultRun) error {
	n := r.pick(r.others(r.prim))
	r.target(n)
	if err := n.killDaemon(); err != nil {
		return err
	}
	r.sleep(r.between(0.2, 1))
	return n.restartDaemon()
}

// split cuts every link between the two groups.
func (r *faultRun) split(a, b []*node) error {
	var pairs [][2]*node
	for _, x := range a {
		for _, y := range b {
			pairs = append(pairs, [2]*node{x, y})
		}
	}
	r.f.Params = groupName(a) + " | " + groupName(b)
	return r.c.block(pairs)
}

func groupName(ns []*node) string {
	var s []string
	for _, n := range ns {
		s = append(s, n.name)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func partitionPrimary(r *faultRun) error {
	minority := []*node{r.prim}
	if len(r.c.nodes) == 5 {
		minority = append(minority, r.pick(r.others(r.prim)))
	}
	r.target(minority...)
	if err := r.split(minority, r.others(minority...)); err != nil {
		return err
	}
	r.hold(2, 4)
	return nil
}

func partitionFollower(r *faultRun) error {
	f := r.pick(r.others(r.prim))
	r.target(f)
	if err := r.split([]*node{f}, r.others(f)); err != nil {
		return err
	}
	r.hold(1, 4)
	return nil
}

// partitionBridge: the hub sees everyone; the others fall in two groups
// that do not see each other.
func partitionBridge(r *faultRun) error {
	hub := r.prim
	if r.rng.Intn(3) != 0 {
		hub = r.pick(r.others(r.prim))
	}
	rest := r.shuffled(r.others(hub))
	g1, g2 := rest[:len(rest)/2], rest[len(rest)/2:]
	r.target(hub)
	if err := r.split(g1, g2); err != nil {
		return err
	}
	r.f.Params = "hub " + hub.name + ": " + r.f.Params
	r.hold(2, 4)
	return nil
}

func partitionHalves(r *faultRun) error {
	all := r.shuffled(r.c.nodes)
	minority, majority := all[:2], all[2:]
	r.target(minority...)
	if err := r.split(minority, majority); err != nil {
		return err
	}
	r.hold(2, 4)
	return nil
}

func packetLoss(r *faultRun) error {
	pct := []int{10, 20, 35}[r.rng.Intn(3)]
	k := 1 + r.rng.Intn(len(r.c.nodes))
	ns := r.shuffled(r.c.nodes)[:k]
	r.target(ns...)
	r.f.Params = fmt.Sprintf("%d%% loss on %s", pct, groupName(ns))
	for _, n := range ns {
		if err := r.c.setLoss(n, pct); err != nil {
			return err
		}
	}
	r.hold(2, 4)
	return nil
}

func slowLink(r *faultRun) error {
	n := r.prim
	if r.rng.Intn(2) == 0 {
		n = r.pick(r.others(r.prim))
	}
	d := time.Duration([]float64{0.05, 0.12, 0.25}[r.rng.Intn(3)] * float64(r.lease))
	r.target(n)
	r.f.Params = fmt.Sprintf("%v each way", d.Round(time.Millisecond))
	if err := n.line.start(d); err != nil {
		return err
	}
	r.c.event("net", n.name, "slow link", r.f.Params)
	r.hold(2, 4)
	return nil
}

// blockedTakeover is the second half of the dead and lying BMC faults: the
// takeover must block (no other writer) until the BMC is fixed or an
// administrator confirms the node down after making sure it is.
func (r *faultRun) blockedTakeover(fix func()) {
	d := r.hold(1.5, 3)
	// With storage that checks tokens the takeover goes on once the old
	// lease and its stop deadline have certainly ended, recorded as a
	// lease expiry (the handover check reads it): nothing to block.
	if rec, ok := r.newTenure(); ok && rec.Node != r.prim.name && !r.c.opts.Tokens {
		r.f.Violation = fmt.Sprintf("%s wrote under epoch %d at %s while %s's BMC could not power it off and nobody confirmed it down",
			rec.Node, rec.Epoch, rec.Time.Format(time.RFC3339Nano), r.prim.name)
	}
	if s, ok := r.c.obs.actingBetween(r.f.Start, time.Now(), r.prim.name); ok && r.f.Violation == "" && !r.c.opts.Tokens {
		r.f.Violation = fmt.Sprintf("%s acted as primary at epoch %d from %s while %s's BMC could not power it off and nobody confirmed it down",
			s.Node, s.Epoch, s.From.Format(time.RFC3339Nano), r.prim.name)
	}
	if r.c.obs.blockedBetween(r.f.Start, time.Now()) {
		r.f.Blocked = true
	} else {
		r.note("no BLOCKED state seen in %v", d.Round(time.Millisecond))
	}
	if r.rng.Intn(2) == 0 {
		r.note("BMC fixed")
		fix()
	} else {
		// The administrator makes sure, then confirms.
		r.prim.crash()
		if err := r.c.confirm(r.ctx, r.prim); err != nil {
			r.note("confirm: %v", err)
		} else {
			r.note("confirmed by fencectl")
		}
	}
	r.waitNewTenure(60 * time.Second)
}

func deadBMC(r *faultRun) error {
	p := r.prim
	r.target(p)
	p.faults.SetDead(true)
	r.c.event("bmc", p.name, "dead", p.bmcKind)
	if r.rng.Intn(2) == 0 {
		r.f.Params = "then crash"
		if err := p.crash(); err != nil {
			return err
		}
	} else {
		r.f.Params = "then isolate"
		if err := r.split([]*node{p}, r.others(p)); err != nil {
			return err
		}
		r.f.Params = "then isolate"
	}
	r.blockedTakeover(func() { p.faults.SetDead(false); r.c.event("bmc", p.name, "alive", "") })
	return nil
}

func slowBMC(r *faultRun) error {
	p := r.prim
	r.target(p)
	d := []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond}[r.rng.Intn(3)]
	p.faults.SetDelay(d)
	r.c.event("bmc", p.name, "slow", d.String())
	if r.rng.Intn(2) == 0 {
		r.f.Params = d.String() + " per datagram, then crash"
		if err := p.crash(); err != nil {
			return err
		}
	} else {
		r.f.Params = d.String() + " per datagram, then pause"
		if err := p.freeze(); err != nil {
			return err
		}
	}
	// The fence may fail while the BMC is this slow; the takeover then
	// retries with backoff, and the heal speeds the BMC up again.
	r.waitNewTenure(20 * time.Second)
	return nil
}

func lyingBMC(r *faultRun) error {
	p := r.prim
	if !p.canLie() {
		r.f.Kind = "slow-bmc"
		return slowBMC(r)
	}
	r.target(p)
	p.setLying(true)
	r.c.event("bmc", p.name, "lying", "acknowledges off, stays on")
	r.f.Params = "then pause"
	if err := p.freeze(); err != nil {
		return err
	}
	r.blockedTakeover(func() { p.setLying(false); r.c.event("bmc", p.name, "honest", "") })
	return nil
}

// confirm runs `fencectl confirm NODE --yes` on the live nodes until one
// accepts it. fenced refuses it while gossip still sees the node alive, so
// right after the power-off it takes a few tries.
func (c *cluster) confirm(ctx context.Context, target *node) error {
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		for _, n := range c.nodes {
			if n == target || !n.on() || n.isPaused() {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			out, err := exec.CommandContext(cctx, c.opts.Fencectl, "-s", n.dn.Socket, "-o", "json", "confirm", target.name,
				"--yes", "--reason", "nemesis: machine verified powered off").CombinedOutput()
			cancel()
			if err == nil {
				c.event("confirm", target.name, "fencectl confirm", "via "+n.name)
				return nil
			}
			last = fmt.Errorf("via %s: %v: %s", n.name, err, strings.TrimSpace(string(out)))
		}
		time.Sleep(300 * time.Millisecond)
	}
	return last
}
