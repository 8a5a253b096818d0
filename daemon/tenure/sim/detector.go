package sim

import (
	"math"
	"slices"
	"time"

	"github.com/fenced/fenced/quorum"
)

// The leader-failure detector as quorum.Detector runs it: the leader
// beacons every Detect/8 (a datagram, lost or delayed like any message); a
// follower counts the newest of raft's contact and its leader's beacon;
// once its leader has been silent for Detect + rank × Stagger it asks the
// others, and if a majority (itself included) finds the leader silent too
// (for Detect − Detect/8), it stands for election as a leadership transfer
// does (campaign(true): no pre-vote, granted by voters that still follow
// the old leader). Ranks: the other nodes in index order, standby nodes
// last. An answerer that finds the leader silent too settles which of the
// two stands: the one whose log is newer (it stands at once), with logs
// alike the earlier-ranked one; the other holds back for Detect/2 (the
// asker at most once per 2 × Detect). A follower left without a leader by
// a candidacy stands once the old leader has been silent for another
// Detect.
//
// The real detector also polls raft's state between its timers; here the
// watch runs every poll interval instead, which is as often or more.

func (p *proc) startDetector() {
	p.beacon = make([]int64, p.w.sc.Nodes)
	for i := range p.beacon {
		p.beacon[i] = noContact
	}
	p.deferred = noContact
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
func (p *proc) rankOf(id, l int) int { return slices.Index(p.rankOrder(l), nodeName(id)) }

// rankOrder is quorum.RankOrder of the voters after leader l.
func (p *proc) rankOrder(l int) []string {
	var voters []string
	for _, n := range p.w.nodes {
		voters = append(voters, n.name)
	}
	return quorum.RankOrder(voters, nodeName(l), p.mayNotHold())
}

// mayNotHold: a witness or a standby node (as the daemon's mayNotHold).
func (p *proc) mayNotHold() func(string) bool {
	standby := p.n.fsm.Holders().Standby
	return func(name string) bool { return p.w.sc.witness(p.w.node(name).id) || standby[name] }
}

func (p *proc) armWatch() {
	rt := p.w.timing.Raft()
	poll := max(min(rt.Stagger/2, rt.Detect/20), 5*time.Millisecond)
	p.timer(poll, func() {
		p.watchOnce()
		p.armWatch()
	})
}

// detectTiming is the detector's timing (quorum.DetectTiming).
func (p *proc) detectTiming() quorum.DetectTiming {
	rt := p.w.timing.Raft()
	return quorum.DetectTiming{Detect: rt.Detect, Stagger: rt.Stagger}
}

// watchOnce is quorum.Detector's watch: gather what a follower knows of its
// leader's silence, let quorum decide (DetectTiming.Due), and ask.
func (p *proc) watchOnce() {
	if p.role != follower || p.asking {
		return
	}
	now := int64(p.n.local())
	l := p.leaderID
	w := quorum.Watch{Held: time.Duration(p.holdTill - now), Urged: now < p.urgeTill, SinceAsked: time.Duration(now - p.lastTry)}
	if l < 0 {
		// Left without a leader by a candidacy (a newer term): the old
		// leader's silence counts from the last contact with it.
		l = p.prevLeader
		if l < 0 {
			return
		}
		since, ok := p.sinceContact(l)
		if !ok {
			return
		}
		if b := p.beacon[l]; b != noContact {
			since = min(since, time.Duration(now-b))
		}
		w.Silent, w.Leaderless = since, true
	} else {
		w.Silent = p.silence()
	}
	rank := p.rankOf(p.n.id, l)
	w.Rank = rank
	if ask, _ := p.detectTiming().Due(w); !ask {
		return
	}
	p.lastTry, p.asking = now, true
	agree, answered, self := 1, 0, p.n.id
	deferTo, standing := -1, false
	lastIdx, lastTerm := p.n.lastIndex(), p.n.lastTerm()
	peers := 0
	finish := func() {
		if !p.asking {
			return
		}
		p.asking = false
		if p.role != follower {
			return
		}
		now := int64(p.n.local())
		dt := p.detectTiming()
		sinceHeld, heldFor := time.Duration(math.MaxInt64), time.Duration(0)
		if p.deferred != noContact {
			sinceHeld = time.Duration(now - p.deferred)
			if dt.InHoldRun(sinceHeld) {
				heldFor = time.Duration(now - p.deferRun)
			}
		}
		switch dt.Decide(agree, p.w.majority, deferTo >= 0, standing, sinceHeld, heldFor) {
		case quorum.HoldBack:
			if !dt.InHoldRun(sinceHeld) {
				p.deferRun = now
			}
			p.deferred = now
			p.holdTill = now + int64(p.detectTiming().Detect/2)
			p.w.tracef("%s leader %s silent for a majority: %s stands", p.n.name, nodeName(l), nodeName(deferTo))
		case quorum.Stand:
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
			ok, defers, stands := q.answerSilence(l, rank, lastTerm, lastIdx)
			q.w.net.send(q.n.id, self, 0, func(r *proc) {
				if !r.asking {
					return
				}
				answered++
				if ok {
					agree++
				}
				if defers && (deferTo < 0 || stands && !standing) {
					deferTo, standing = q.n.id, stands
				}
				if answered == peers {
					finish()
				}
			})
		})
	}
	p.timer(max(p.detectTiming().Detect/4, 20*time.Millisecond), finish)
}

// answerSilence is quorum.Detector's answer to an asker of the given rank
// and log, about leader l (DetectTiming.Answer): whether this node finds l
// silent too, and whether it will stand itself; what it does besides (hold
// back, or stand at once) it does here.
func (q *proc) answerSilence(l, rank int, logTerm, logIdx uint64) (agrees, defers, standing bool) {
	now := int64(q.n.local())
	cur := ""
	if q.leaderID >= 0 {
		cur = nodeName(q.leaderID)
	}
	r := q.detectTiming().Answer(quorum.Asked{Leader: nodeName(l), Current: cur, Silent: q.silence(),
		Mine: q.rankOf(q.n.id, l), AskerRank: rank, Newer: quorum.CompareLog(q.n.lastTerm(), q.n.lastIndex(), logTerm, logIdx),
		Follower: q.role == follower, Candidate: q.role == candidate, Holding: now < q.holdTill})
	half := int64(q.detectTiming().Detect / 2)
	switch {
	case r.Urge:
		q.urgeTill, q.holdTill = now+half, 0
		q.timer(0, q.watchOnce) // the real detector's wake-up
	case r.Hold:
		q.holdTill = now + half
	}
	return r.Agrees, r.Defers, r.Standing
}
