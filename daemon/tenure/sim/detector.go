package sim

import (
	"slices"
	"time"
)

// The leader-failure detector as quorum.Detector runs it: the leader
// beacons every Detect/8 (a datagram, lost or delayed like any message); a
// follower counts the newest of raft's contact and its leader's beacon;
// once its leader has been silent for Detect + rank × Stagger it asks the
// others, and if a majority (itself included) finds the leader silent too
// (for Detect − Detect/8), it stands for election as a leadership transfer
// does (campaign(true): no pre-vote, granted by voters that still follow
// the old leader). A node asked by an earlier-ranked one holds back for
// Detect/2. Ranks: the other nodes in index order, standby nodes last.
//
// Not modelled (they change only when an election starts, not what a
// majority or the lease allow): the answer that tells a later-ranked asker
// that this node stands itself, the newer log standing before rank, and the
// follower left leaderless by a failed candidacy standing after another
// Detect. The liveness figures the simulation prints are for the detector
// without them.

func (p *proc) startDetector() {
	p.beacon = make([]int64, p.w.sc.Nodes)
	for i := range p.beacon {
		p.beacon[i] = noContact
	}
	p.armBeacon()
	p.armWatch()
}

func (p *proc) armBeacon() {
	rt := p.w.timing.Raft()
	p.timer(max(rt.Detect/8, 10*time.Millisecond), func() {
		if p.role == leader {
			term, self := p.n.term, p.n.id
			for i := range p.w.nodes {
				if i != self {
					p.w.net.send(self, i, 0, func(q *proc) { q.onBeacon(self, term) })
				}
			}
		}
		p.armBeacon()
	})
}

func (p *proc) onBeacon(from int, term uint64) {
	if term < p.n.term {
		return // a deposed leader's
	}
	p.beacon[from] = int64(p.n.local())
}

// silence is how long this node has not heard from its leader (0 without
// one).
func (p *proc) silence() time.Duration {
	if p.role == leader || p.leaderID < 0 {
		return 0
	}
	last := max(p.lastContact, p.beacon[p.leaderID])
	return time.Duration(int64(p.n.local()) - last)
}

// rankOf is node id's rank in acting on a silent leader l.
func (p *proc) rankOf(id, l int) int {
	standby := p.n.fsm.View().Standby
	var order []int
	for pass := range 2 {
		for i := range p.w.nodes {
			if i == l || standby[nodeName(i)] != (pass == 1) {
				continue
			}
			order = append(order, i)
		}
	}
	return slices.Index(order, id)
}

func (p *proc) armWatch() {
	rt := p.w.timing.Raft()
	poll := max(min(rt.Stagger/2, rt.Detect/20), 5*time.Millisecond)
	p.timer(poll, func() {
		p.watchOnce()
		p.armWatch()
	})
}

func (p *proc) watchOnce() {
	rt := p.w.timing.Raft()
	if p.role != follower || p.leaderID < 0 || p.asking {
		return
	}
	now := int64(p.n.local())
	l := p.leaderID
	rank := p.rankOf(p.n.id, l)
	if rank < 0 || now < p.holdTill || now-p.lastTry < int64(rt.Detect/2) ||
		p.silence() < rt.Detect+time.Duration(rank)*rt.Stagger {
		return
	}
	p.lastTry, p.asking = now, true
	agree, answered, self := 1, 0, p.n.id
	peers := 0
	finish := func() {
		if !p.asking {
			return
		}
		p.asking = false
		if agree >= p.w.majority && p.role == follower {
			p.w.tracef("%s leader %s silent for a majority: election", p.n.name, nodeName(l))
			p.campaign(true)
		}
	}
	for i := range p.w.nodes {
		if i == self || i == l {
			continue
		}
		peers++
		p.w.net.send(self, i, 0, func(q *proc) {
			s := q.silence()
			if q.leaderID < 0 {
				s = rt.Detect
			} else if q.leaderID != l {
				s = 0
			}
			ok := s >= rt.Detect-rt.Detect/8
			if ok && q.rankOf(q.n.id, l) > rank {
				q.holdTill = int64(q.n.local()) + int64(rt.Detect/2)
			}
			q.w.net.send(q.n.id, self, 0, func(r *proc) {
				if !r.asking {
					return
				}
				answered++
				if ok {
					agree++
				}
				if answered == peers {
					finish()
				}
			})
		})
	}
	p.timer(max(rt.Detect/4, 20*time.Millisecond), finish)
}
