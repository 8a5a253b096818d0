package sim

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
)

// Groups other than the default one (docs/groups.md). The default group is
// held by the raft leader, as in a one-group cluster; every other group is
// held wherever the leader placed it (tenure.Config.OffLeader), renews its
// lease with OpRenew through the leader, and writes everything through the
// leader (driver.Log.Propose). The leader places with quorum.Place, the
// daemon's rule, from what it knows of each node: its raft contact, its
// advertised eligibility, standby, and which groups list it as unconfirmed.
// Group g (g ≥ 1) prefers node g (mod the node count), so that the groups
// spread over the cluster.

// groupSpecs are the placed groups' specs (every group but the default).
func (w *World) groupSpecs() []quorum.GroupSpec {
	var out []quorum.GroupSpec
	for g := 1; g < w.groups(); g++ {
		out = append(out, quorum.GroupSpec{Name: groupName(g), Prefer: []string{nodeName(g % w.sc.Nodes)}})
	}
	return out
}

// placeStep runs the leader's placement (driver.Placer) on what this node
// knows of each node: its raft contact, its advertised eligibility, whether
// it is a witness.
func (p *proc) placeStep() {
	w := p.w
	if w.groups() == 1 || p.role != leader {
		return
	}
	now := int64(p.n.local())
	var nodes []driver.Candidate
	for _, o := range w.nodes {
		reached := o == p.n || now-p.peerContact[o.id] < int64(w.ht)
		nodes = append(nodes, driver.Candidate{Name: o.name, Eligible: reached && !w.sc.witness(o.id) && o.proc != nil && o.proc.ineligible() == ""})
	}
	p.placer.Step(true, p.n.fsm.ClusterVersion(), nodes)
}

// Propose is the driver's write for an OffLeader group: applied here when
// this node leads, else forwarded to the leader; the checker's bookkeeping
// (who proposed it, the renewal's start) goes with it.
func (l simLog) Propose(c quorum.Command, t0 tenure.Time, done func(any, error)) {
	p := l.p
	m := meta{origin: p.n.id, group: p.w.groupIndex(c.Group), epoch: c.Epoch}
	if t0 != 0 {
		m.t0 = p.n.clk.trueOf(t0)
	}
	if c.Op == quorum.OpRenew && p.w.opt.Mutation == MutBarrierRenew {
		// Broken on purpose: a barrier commits whatever the epoch.
		p.forwardKind(entBarrier, c, m, done)
		return
	}
	p.forwardMeta(c, m, done)
}

// Move hands an OffLeader group on: to `to`, or ("") wherever the
// leader's placement puts it; the leader then keeps it off this node for a
// lease (PlaceNode.Refuses). Refused if the group is no longer placed here.
func (l simLog) Move(group, to string, done func(error)) {
	p := l.p
	p.w.tracef("%s hands %s on (to %q)", p.n.name, group, to)
	c := quorum.Command{Op: quorum.OpPlace, Group: group, Node: to, From: p.n.name}
	p.forwardMeta(c, meta{origin: p.n.id}, func(_ any, err error) { done(err) })
}

// appliedPlace notes a handover this node applied (every node does: a
// new leader keeps to it): the node that handed the group on is placed
// there again only after a lease.
func (q *proc) appliedPlace(data []byte) {
	var c quorum.Command
	if json.Unmarshal(data, &c) == nil && c.Op == quorum.OpPlace && c.From != "" {
		q.placer.HandedOn(c, q.n.local())
		q.loopKick()
	}
}

// forwardMeta is forwardCommand with the leader's answer: applied here
// when this node leads, else sent to the leader, which applies it and
// sends the answer back; the wait ends after a lease.
func (p *proc) forwardMeta(c quorum.Command, m meta, cb func(any, error)) {
	p.forwardKind(entCommand, c, m, cb)
}

// forwardKind is forwardMeta of an entry of kind (a command, or a barrier
// for the negative control).
func (p *proc) forwardKind(kind entryKind, c quorum.Command, m meta, cb func(any, error)) {
	apply := func(q *proc, reply func(any, error)) {
		if kind == entBarrier {
			q.apply(entBarrier, nil, m, reply)
			return
		}
		q.applyMeta(c, m, reply)
	}
	if p.role == leader {
		apply(p, cb)
		return
	}
	l := p.leaderID
	if l < 0 {
		p.timer(0, func() { cb(nil, errNoLeader) })
		return
	}
	answered := false
	once := func(res any, err error) {
		if !answered {
			answered = true
			cb(res, err)
		}
	}
	p.timer(p.n.timing().Lease, func() { once(nil, errNoAnswer) })
	self := p.n.id
	p.w.net.send(self, l, 0, func(q *proc) {
		reply := func(res any, err error) {
			q.w.net.send(q.n.id, self, 0, func(r *proc) {
				if r == p {
					once(res, err)
				}
			})
		}
		if q.role != leader {
			reply(nil, errNoLeader)
			return
		}
		apply(q, reply)
	})
}

var errNoAnswer = errors.New("forwarded command: no answer within a lease")

// placeBound is what placement adds to the liveness bound: the leader
// notices a silent node within a heartbeat timeout, and a group handed on
// by a machine that may not hold it is placed again within one.
func (w *World) placeBound() time.Duration {
	if w.groups() == 1 {
		return 0
	}
	return 3 * w.ht
}
