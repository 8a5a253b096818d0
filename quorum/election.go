package quorum

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Election is a raft election this node won, as it saw it: what the
// history's election record (fencing.KindElection) carries. Times are wall
// clock, informational: they place the election on a timeline, they
// decide nothing.
type Election struct {
	Term   uint64
	Leader string
	// Previous is the leader before ("" = none known since start; this
	// node itself when it is re-elected with no other leader between).
	Previous string
	// LastContact is when this node last heard from Previous (zero: never
	// since it started).
	LastContact time.Time
	// Started is when this node first stood as candidate in this
	// campaign (zero: not seen); Won when it became leader.
	Started, Won time.Time
	// Rounds is how many terms the campaign took (1: won at once).
	Rounds int
}

// elections follows raft's state and leader observations (raft's own
// goroutine calls it, through observe): the leader before, when it was
// last heard, when this node stood as candidate and in which term; and the
// election it last won.
type elections struct {
	mu        sync.Mutex
	leader    string    // the last leader known ("" before any)
	contact   time.Time // the last contact with it, sampled when it went
	since     time.Time // standing as candidate since (zero: not)
	sinceTerm uint64    // the term when it began standing
	won       Election  // the newest election won (Term 0: none)
}

// observeElection takes one raft observation.
func (q *Raft) observeElection(o any) {
	e := &q.elections
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	switch d := o.(type) {
	case raft.RaftState:
		switch d {
		case raft.Candidate:
			if e.since.IsZero() {
				e.since, e.sinceTerm = now, q.r.CurrentTerm()
			}
		case raft.Follower, raft.Shutdown:
			e.since = time.Time{}
		}
	case raft.LeaderObservation:
		switch id := string(d.LeaderID); {
		case id == "":
			// The leader went: raft's last contact is still its.
			if e.leader != "" && e.leader != q.self {
				e.contact = q.r.LastContact()
			}
		case id == q.self:
			term := q.r.CurrentTerm()
			won := Election{Term: term, Leader: id, Previous: e.leader, LastContact: e.contact, Started: e.since, Won: now, Rounds: 1}
			if !e.since.IsZero() && term > e.sinceTerm {
				won.Rounds = int(term - e.sinceTerm)
			}
			if won.Previous != q.self && won.Previous != "" && won.LastContact.IsZero() {
				won.LastContact = q.r.LastContact()
			}
			e.won, e.leader, e.since = won, id, time.Time{}
		default:
			e.leader, e.contact, e.since = id, time.Time{}, time.Time{}
		}
	}
}

// LastElection is the newest election this node won since it started (ok
// false: none). It does not say this node still leads.
func (q *Raft) LastElection() (Election, bool) {
	e := &q.elections
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.won, e.won.Term > 0
}
