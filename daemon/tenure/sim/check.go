package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// Invariant names, as failures report them.
const (
	InvTwoActing      = "at most one node acts as primary"
	InvLease          = "a node acts only within lease − margin of a renewal a majority stored"
	InvStartMajority  = "storage starts only after its mount intent is committed"
	InvStartEpoch     = "storage starts only at the current epoch"
	InvStartConfirmed = "storage starts only once every earlier holder is confirmed stopped"
	InvTwoStorage     = "the storage never runs on two nodes at once"
	InvTwoResource    = "no resource of the group runs on two nodes at once"
	InvEpoch          = "the epoch only rises"
	InvRaft           = "the simulated raft keeps its guarantees"
	InvLiveness       = "liveness"
)

// checker holds what the invariants need: the committed log as it really
// is (the truth, not any node's view of it), a reference FSM over it, and
// per resource group the renewals a majority stored and who started its
// storage when. Every invariant about a holder, an epoch or the storage is
// checked per group: each group has its own epochs, holders and storage.
type checker struct {
	w    *World
	fail *Failure

	leaders map[uint64]int // term → the node that led it
	truth   []entry        // committed entries; truth[0] is a sentinel
	tfsm    *quorum.FSM

	gs []*gcheck // per group

	// offLeader counts grants to a node that did not lead raft in the
	// grant's term (a group held off the leader).
	offLeader int

	healed bool
	live   time.Duration
	// acted: which groups had a primary act since the heal (liveness:
	// every group must).
	acted []bool
}

// gcheck is what the checker follows of one group, from the committed log,
// independently of the FSM.
type gcheck struct {
	epoch      uint64
	holder     string
	renew      []map[uint64]int64 // node → epoch → true time of the latest committed renewal's start
	mountEpoch []uint64           // node → epoch of its latest committed mount intent (0: none)
	cleared    []bool             // node → released or confirmed stopped since that intent
	mountOK    map[[2]uint64]verdict
	grants     map[uint64]string

	lastStartEpoch uint64
	lastStartNode  int
	// placedAfterHeal counts the group's placements committed after the
	// heal: more than a few is a placement loop (liveness).
	placedAfterHeal int
	placement       string
}

func (c *checker) init(w *World) {
	n := w.sc.Nodes
	c.w = w
	c.leaders = map[uint64]int{}
	c.truth = []entry{{}}
	c.tfsm = quorum.NewFSM(64)
	for range w.groups() {
		g := &gcheck{renew: make([]map[uint64]int64, n), mountEpoch: make([]uint64, n), cleared: make([]bool, n),
			mountOK: map[[2]uint64]verdict{}, grants: map[uint64]string{}, lastStartNode: -1}
		for i := range g.renew {
			g.renew[i] = map[uint64]int64{}
		}
		c.gs = append(c.gs, g)
	}
	c.acted = make([]bool, w.groups())
	c.live = -1
}

// group is the checker's state of the group a command names; nil (and a
// failure) for a group the run does not have.
func (c *checker) group(name string) (int, *gcheck) {
	g := c.w.groupIndex(name)
	if g < 0 {
		c.failf(InvRaft, "a committed command names group %q, which the run does not have", name)
		return -1, nil
	}
	return g, c.gs[g]
}

// gname is how failures name group g.
func (c *checker) gname(g int) string {
	if len(c.gs) == 1 {
		return ""
	}
	if g == 0 {
		return " [group default]"
	}
	return " [group " + groupName(g) + "]"
}

func (c *checker) failf(inv, format string, args ...any) {
	if c.fail != nil {
		return
	}
	c.fail = &Failure{Invariant: inv, At: time.Duration(c.w.now), Detail: fmt.Sprintf(format, args...)}
	c.w.tracef("VIOLATION %s: %s", inv, c.fail.Detail)
}

// leaderElected: at most one leader per term.
func (c *checker) leaderElected(n *Node, term uint64) {
	if l, ok := c.leaders[term]; ok && l != n.id {
		c.failf(InvRaft, "two leaders in term %d: %s and %s", term, nodeName(l), n.name)
	}
	c.leaders[term] = n.id
}

// committed: leader n moved its commit index from old to idx. A committed
// entry is never replaced.
func (c *checker) committed(n *Node, old, idx uint64) {
	for i := old + 1; i <= idx; i++ {
		e := n.log[i]
		if i < uint64(len(c.truth)) {
			if c.truth[i].id != e.id {
				c.failf(InvRaft, "%s committed entry %d (id %d) but entry %d was committed before (id %d)", n.name, i, e.id, i, c.truth[i].id)
			}
			continue
		}
		c.truth = append(c.truth, e)
		c.process(i, e)
	}
}

// applied: a node applies only committed entries, in order.
func (c *checker) applied(n *Node, i uint64, e entry) {
	if i >= uint64(len(c.truth)) || c.truth[i].id != e.id {
		c.failf(InvRaft, "%s applies entry %d (id %d) that is not the committed one", n.name, i, e.id)
	}
}

// fsmApplied: a node's replicated epoch of each group never goes back.
func (c *checker) fsmApplied(n *Node) {
	for g := range c.gs {
		e := n.fsm.HoldersOf(groupName(g)).Epoch
		if e < n.lastEpoch[g] {
			c.failf(InvEpoch, "%s's replicated epoch went from %d back to %d%s", n.name, n.lastEpoch[g], e, c.gname(g))
		}
		n.lastEpoch[g] = e
	}
}

// process follows a newly committed entry: renewals, grants, mount
// intents, releases and confirmed fences.
func (c *checker) process(i uint64, e entry) {
	m := e.meta
	switch e.kind {
	case entBarrier:
		if g := c.gs[m.group]; m.origin >= 0 && g.renew[m.origin][m.epoch] < m.t0 {
			g.renew[m.origin][m.epoch] = m.t0
		}
		return
	case entNoop:
		return
	}
	var cmd quorum.Command
	if err := json.Unmarshal(e.data, &cmd); err != nil {
		c.failf(InvRaft, "entry %d: %v", i, err)
		return
	}
	gi, g := c.group(cmd.Group)
	if g == nil {
		return
	}
	// Before the reference FSM applies it: the state the mount intent meets.
	if cmd.Op == quorum.OpState && cmd.State == quorum.HolderMounting {
		c.mountIntent(g, cmd)
	}
	resp := c.tfsm.Apply(&raft.Log{Index: i, Term: e.term, Type: raft.LogCommand, Data: e.data})
	_, refused := resp.(error)
	switch cmd.Op {
	case quorum.OpAcquire:
		if refused {
			return
		}
		gr := resp.(quorum.Grant)
		if gr.Epoch != g.epoch+1 {
			c.failf(InvEpoch, "grant of epoch %d after epoch %d%s", gr.Epoch, g.epoch, c.gname(gi))
		}
		g.epoch, g.holder = gr.Epoch, cmd.Node
		g.grants[gr.Epoch] = cmd.Node
		if l, ok := c.leaders[e.term]; ok && nodeName(l) != cmd.Node {
			c.offLeader++
		}
		if id := c.w.node(cmd.Node).id; m.origin == id {
			g.renew[id][gr.Epoch] = m.t0
		}
	case quorum.OpRenew:
		// A renewal through the log: it renews from its start only if
		// the state machine took it (the epoch current, not released,
		// placed there).
		if !refused {
			if id := c.w.node(cmd.Node).id; m.origin == id && g.renew[id][cmd.Epoch] < m.t0 {
				g.renew[id][cmd.Epoch] = m.t0
			}
		}
	case quorum.OpPlace:
		if !refused && cmd.Node != g.placement {
			g.placement = cmd.Node
			if c.healed {
				g.placedAfterHeal++
			}
		}
	case quorum.OpState:
		if cmd.State == quorum.HolderMounting && !refused {
			id := c.w.node(cmd.Node).id
			g.mountEpoch[id], g.cleared[id] = cmd.Epoch, false
		}
	case quorum.OpRelease:
		id := c.w.node(cmd.Node).id
		if g.mountEpoch[id] != 0 && g.mountEpoch[id] <= cmd.Epoch {
			g.cleared[id] = true
		}
	case quorum.OpRecord:
		r := cmd.Record
		// What the machines count as confirmed stopped; whether it was
		// true is the physical checks' to say (overlap). A power fence
		// and an admin's confirmation are of the machine: every group;
		// a fence that cut the storage only, a lease expiry and a
		// watchdog are of the record's group.
		if r == nil || r.Outcome != fencing.OutcomeSuccess {
			return
		}
		t := c.w.node(r.Target)
		if t == nil {
			return
		}
		switch {
		case r.Kind == fencing.KindFence && r.Action != fencing.ActionOn && r.Scope != fencing.ScopeStorage, r.Kind == fencing.KindConfirm:
			for _, g := range c.gs {
				g.cleared[t.id] = true
			}
		case r.Kind == fencing.KindFence && r.Action != fencing.ActionOn, r.Kind == fencing.KindExpiry, r.Kind == fencing.KindWatchdog:
			g.cleared[t.id] = true
		}
	}
}

// roundRenewed: leader n's renewal round for epoch, begun at t0 (true
// time), was answered by answers nodes, itself included. Like a barrier a
// majority stored, it renews the lease from t0.
func (c *checker) roundRenewed(n *Node, group int, epoch uint64, t0 int64, answers int) {
	if answers < c.w.majority {
		c.failf(InvLease, "%s's renewal round at epoch %d completed with %d answers, fewer than a majority%s", n.name, epoch, answers, c.gname(group))
		return
	}
	if g := c.gs[group]; g.renew[n.id][epoch] < t0 {
		g.renew[n.id][epoch] = t0
	}
}

// verdict is what the committed log says of a mount intent when it met
// the state: stale (another epoch is current), or msg names a node that may
// still run the storage; ok when neither.
type verdict struct {
	stale bool
	msg   string
}

// mountIntent decides, from the committed log alone, whether node may
// start the storage at cmd.Epoch: it holds the newest epoch, and every
// other node that committed a mount intent has since released or been
// confirmed stopped.
func (c *checker) mountIntent(g *gcheck, cmd quorum.Command) {
	key := [2]uint64{uint64(c.w.node(cmd.Node).id), cmd.Epoch}
	if _, seen := g.mountOK[key]; seen {
		return
	}
	var why verdict
	switch {
	case cmd.Epoch != g.epoch || cmd.Node != g.holder:
		why = verdict{stale: true, msg: fmt.Sprintf("its mount intent met epoch %d of %s", g.epoch, g.holder)}
	default:
		for id, e := range g.mountEpoch {
			if nodeName(id) != cmd.Node && e != 0 && !g.cleared[id] {
				why.msg = fmt.Sprintf("%s committed a mount intent at epoch %d and had neither released nor been confirmed stopped", nodeName(id), e)
				break
			}
		}
	}
	g.mountOK[key] = why
}

// storageStart: node n starts group gi's storage at epoch e (the Start
// action).
func (c *checker) storageStart(n *Node, gi int, e uint64) {
	g, in := c.gs[gi], c.gname(gi)
	why, ok := g.mountOK[[2]uint64{uint64(n.id), e}]
	switch {
	case !ok:
		c.failf(InvStartMajority, "%s starts the storage at epoch %d without a committed mount intent%s", n.name, e, in)
	case why.stale:
		c.failf(InvStartEpoch, "%s starts the storage at epoch %d: %s%s", n.name, e, why.msg, in)
	case why.msg != "":
		c.failf(InvStartConfirmed, "%s starts the storage at epoch %d: %s%s", n.name, e, why.msg, in)
	}
	c.overlap(n, gi, fmt.Sprintf("starts the storage (epoch %d)", e), false)
	if e < g.lastStartEpoch || e == g.lastStartEpoch && g.lastStartNode != n.id {
		c.failf(InvEpoch, "%s starts the storage at epoch %d after %s started it at epoch %d%s", n.name, e, nodeName(g.lastStartNode), g.lastStartEpoch, in)
	}
	g.lastStartEpoch, g.lastStartNode = e, n.id
}

// storageBack: node n's access to the storage was restored (it unfenced
// itself) while what it started may still run.
func (c *checker) storageBack(n *Node) {
	for g, st := range n.st {
		if st.running {
			c.overlap(n, g, fmt.Sprintf("unfenced itself while the storage it started at epoch %d still runs there", st.runEpoch), true)
		}
	}
}

// overlap checks that what runs on n (about to: starting is true for a
// start) runs nowhere else: a resource that checks no tokens (the group's
// address) on no other node that runs the group; the storage on no other
// node that can still write it (not cut from it by a storage-level fence),
// unless it checks tokens — then a stale writer's writes are refused.
func (c *checker) overlap(n *Node, g int, what string, diskOnly bool) {
	sc := c.w.sc
	for _, o := range c.w.nodes {
		st := o.st[g]
		if o == n || !st.running {
			continue
		}
		switch {
		case sc.VIP && !diskOnly:
			c.failf(InvTwoResource, "%s %s while the group's address runs on %s (epoch %d)%s", n.name, what, o.name, st.runEpoch, c.gname(g))
		case !sc.Tokens && !n.st[g].cut && !st.cut:
			c.failf(InvTwoStorage, "%s %s while it runs on %s (epoch %d)%s", n.name, what, o.name, st.runEpoch, c.gname(g))
		}
	}
}

// maxTrue is the longest true time a node's clock can take to count d.
func maxTrue(d time.Duration) int64 { return (int64(d)*1e6+(1e6-Drift)-1)/(1e6-Drift) + 1 }

// afterStep checks the invariants that a machine step can break, for each
// group: at most one node acting, each within lease − margin of a renewal
// a majority stored, under an epoch granted to it; and notes liveness.
func (c *checker) afterStep(stepped *Node) {
	w := c.w
	for g := range c.gs {
		c.afterStepOf(g)
	}
	if c.healed && c.live < 0 && !slices.Contains(c.acted, false) {
		c.live = time.Duration(w.now) - w.sc.Heal
		w.end = min(w.end, w.now+int64(w.maxTiming().Lease))
	}
}

// afterStepOf is afterStep for group gi.
func (c *checker) afterStepOf(gi int) {
	w, g, in := c.w, c.gs[gi], c.gname(gi)
	var acting []*Node
	for _, n := range w.nodes {
		t := n.timing()
		p := n.proc
		if p == nil || len(p.ds) <= gi {
			continue
		}
		m := p.ds[gi].m
		if !m.Acting(n.local()) {
			continue
		}
		if n.st[gi].cut && !w.sc.VIP {
			// Fenced from the storage: whatever it believes of its
			// lease, it can no longer touch a group that lives on the
			// storage alone (its writes are refused).
			continue
		}
		acting = append(acting, n)
		e := m.Epoch()
		if h := g.grants[e]; h != n.name {
			c.failf(InvEpoch, "%s acts at epoch %d, which the committed log grants to %q%s", n.name, e, h, in)
		}
		s, ok := g.renew[n.id][e]
		if !ok {
			c.failf(InvLease, "%s acts at epoch %d without a committed grant or renewal%s", n.name, e, in)
			continue
		}
		until := n.clk.trueOf(m.ActingUntil())
		if limit := s + maxTrue(t.Lease-t.Margin); until > limit {
			c.failf(InvLease, "%s acts until %s (true time) at epoch %d; its latest renewal a majority stored began at %s: lease − margin ends at %s%s",
				n.name, time.Duration(until), e, time.Duration(s), time.Duration(limit), in)
		}
	}
	if len(acting) > 1 {
		var names []string
		for _, n := range acting {
			names = append(names, fmt.Sprintf("%s (epoch %d)", n.name, n.proc.ds[gi].m.Epoch()))
		}
		c.failf(InvTwoActing, "%v act as primary at once%s", names, in)
	}
	if c.healed && len(acting) > 0 {
		c.acted[gi] = true
	}
}
