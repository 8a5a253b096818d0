package sim

import (
	"errors"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
)

// Lease renewal rounds as quorum.Detector.Renew runs them beside raft's
// barrier (the daemon's confirm: the first of the two to succeed renews):
// the leader sends each follower a probe of its term and a round number,
// again every Detect/8 to those that have not answered, until a majority
// (itself included) answered or a lease passed. A follower answers a probe
// when it follows the sender in the probe's term, the term is after the one
// its process started in, and no successor's question about the sender
// sealed the term (seal); a round number above the last one
// taken from that leader records the contact, before the answer leaves.
//
// Random schedules, stalls of raft's streams (the Stall fault) included,
// do not reach the interleavings the seal and the start term guard against
// (a follower that answers a successor while still in the old term, then
// the old leader's round, which a majority of recent contacts did not see
// and which spans the successor's election): with either rule removed, 10,000
// schedules found nothing. The quorum package's TestRenewalRound fails
// without either. Here the rounds run in every schedule, under every
// invariant, and the Stall fault makes them the only renewal that gets
// through.

// roundState is one round the leader runs.
type roundState struct {
	term     uint64
	answered map[int]bool
	done     func(error) // nil once finished
	check    func()      // finishes the round once a majority answered
}

// renewRound runs a round for a renewal begun at t0; done(nil) once a
// majority answered while this node still leads in the round's term.
func (p *proc) renewRound(group int, epoch uint64, t0 tenure.Time, done func(error)) {
	if p.role != leader {
		p.timer(0, func() { done(errors.New("not leader")) })
		return
	}
	t := p.n.timing()
	every := max(t.Raft().Detect/8, 10*time.Millisecond)
	p.roundSeq++
	id, term, self := p.roundSeq, p.n.term, p.n.id
	rd := &roundState{term: term, answered: map[int]bool{}}
	finish := func(err error) {
		if rd.done == nil {
			return
		}
		d := rd.done
		rd.done = nil
		delete(p.rounds, id)
		d(err)
	}
	rd.done = done
	if p.rounds == nil {
		p.rounds = map[uint64]*roundState{}
	}
	p.rounds[id] = rd
	rd.check = func() {
		if rd.done == nil || len(rd.answered)+1 < p.w.majority {
			return
		}
		if p.role != leader || p.n.term != term {
			finish(errors.New("renewal round: leadership lost"))
			return
		}
		p.w.chk.roundRenewed(p.n, group, epoch, p.n.clk.trueOf(t0), len(rd.answered)+1)
		finish(nil)
	}
	var send func(left time.Duration)
	send = func(left time.Duration) {
		if rd.done == nil {
			return
		}
		if left <= 0 || p.role != leader || p.n.term != term {
			finish(errors.New("renewal round: no majority answered"))
			return
		}
		for i := range p.w.nodes {
			if i != self && !rd.answered[i] {
				p.w.net.send(self, i, 0, func(q *proc) { q.onProbe(self, term, id) })
			}
		}
		p.timer(every, func() { send(left - every) })
	}
	send(t.Lease)
}

// onProbe is a follower's answer to leader l's probe.
func (p *proc) onProbe(l int, term, id uint64) {
	if p.role != follower || p.n.term != term || p.leaderID != l {
		return
	}
	last := p.taken[l]
	if last.term == term && id < last.seq {
		return // a replay
	}
	if last.term != term || id > last.seq {
		if term <= p.sealed[l] || term <= p.startTerm {
			return
		}
		now := int64(p.n.local())
		p.contact[l] = max(p.contact[l], now)
		p.beacon[l] = now
		p.taken[l] = seqOf{term, id}
	}
	self := p.n.id
	p.w.net.send(self, l, 0, func(r *proc) { r.onRoundAnswer(id, term, self) })
}

// onRoundAnswer counts follower f's answer to round id.
func (p *proc) onRoundAnswer(id, term uint64, f int) {
	rd := p.rounds[id]
	if rd == nil || rd.term != term || rd.answered[f] {
		return
	}
	rd.answered[f] = true
	rd.check()
}

// seqOf is a leader's newest round taken: its term and number.
type seqOf struct{ term, seq uint64 }

// seal is BoundContact's: before this node answers a successor's question
// about leader l, no round of l's up to its current term is recorded again.
func (p *proc) seal(l int) {
	p.sealed[l] = max(p.sealed[l], p.n.term)
}
