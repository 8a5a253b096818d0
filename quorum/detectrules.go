package quorum

import (
	"math"
	"time"
)

// The leader detector's decisions (see Detector), as pure functions of what
// a node knows at the moment it decides. The Detector's goroutines only
// gather what these read (clocks, raft's state, answers) and carry out what
// they return; the simulator (daemon/tenure/sim) calls the same functions
// on virtual time, so the rules it explores are the daemon's.

// DetectTiming is the detector's timing: how long a leader may be silent
// before a follower acts on it, and how far apart the followers act, by
// rank.
type DetectTiming struct {
	Detect, Stagger time.Duration
}

// forever is a wait with no end.
const forever = time.Duration(math.MaxInt64)

// Watch is what a follower knows when it decides whether to ask the others
// about its leader's silence.
type Watch struct {
	// Rank is this node's place in the rank order for the leader (−1: it
	// does not act on that leader's silence).
	Rank int
	// Silent is how long the leader has been silent: neither raft traffic
	// nor a beacon.
	Silent time.Duration
	// Leaderless: this node follows no leader because a candidacy began
	// (raft forgets the leader at a newer term). Silent is then the
	// previous leader's, and the candidate gets another Detect to win
	// before this node stands.
	Leaderless bool
	// Held is what is left of this node's hold (an earlier-ranked node
	// stands); Urged, that its log is newer than an asker's (it stands at
	// once).
	Held  time.Duration
	Urged bool
	// SinceAsked is how long ago this node last asked (forever if never).
	SinceAsked time.Duration
}

// Due decides whether the follower asks now. When it does not, wait is how
// long until it might have to, if nothing is heard meanwhile: its silence
// reaching Detect + rank × Stagger (a beacon interval short of Detect when
// urged), its hold ending, or the pause between two asks (Detect/2).
func (t DetectTiming) Due(w Watch) (ask bool, wait time.Duration) {
	if w.Rank < 0 {
		return false, forever
	}
	threshold := t.Detect + time.Duration(w.Rank)*t.Stagger
	if w.Leaderless {
		threshold += t.Detect
	}
	held := w.Held
	if w.Urged {
		threshold, held = min(threshold, AgreeAt(t.Detect)), 0
	}
	retry := t.Detect/2 - w.SinceAsked
	switch {
	case held > 0:
		return false, held
	case w.Silent < threshold:
		return false, threshold - w.Silent
	case retry > 0:
		return false, retry
	}
	return true, 0
}

// Asked is what a node knows when another asks whether a leader is silent.
type Asked struct {
	// Leader is the leader asked about; Current the one this node follows
	// ("" for none), silent for Silent.
	Leader, Current string
	Silent          time.Duration
	// Mine and AskerRank are the two nodes' ranks for Leader (Mine −1: this
	// node does not act on its silence).
	Mine, AskerRank int
	// Newer compares this node's log with the asker's, as a vote does
	// (CompareLog): > 0 when this node's is newer; 0 when they are alike or
	// the asker sent none (an older version: rank alone decides).
	Newer int
	// Follower: this node follows (is not a candidate or the leader).
	Follower bool
	// Candidate: this node stands for election now.
	Candidate bool
	// Holding: a hold of this node's own runs.
	Holding bool
}

// Reply is a node's answer about a leader's silence, and what it does.
type Reply struct {
	// Silent is what it answers: its leader's silence, none when it follows
	// another leader, Detect when it knows no leader at all.
	Silent time.Duration
	// Agrees: the leader is silent here too (at least AgreeAt).
	Agrees bool
	// Defers: this node will stand itself; the asker holds back. Urge: at
	// once (its log is newer: the asker could not win its vote), ending any
	// hold of its own.
	Defers, Urge bool
	// Hold: this node holds back, the asker stands (its log is newer, or
	// it ranks first).
	Hold bool
	// Standing: this node defers the asker because it is a candidate
	// already. Standing too would split the vote (both ask in the same
	// term, each has voted for itself), and under packet loss a vote
	// request takes a few retransmissions to arrive: the asker holds back
	// for as long as the candidacy may take (Decide).
	Standing bool
}

// Answer settles, when both find the leader silent, which of the two
// stands: a node that already stands unless the asker's log is newer (its
// vote request is on its way; a second candidacy in its term would split
// the vote), else the one with the newer log (the other could not win this
// node's vote, or would need others'), and with logs alike the
// earlier-ranked one — unless this node already holds back for another.
func (t DetectTiming) Answer(a Asked) Reply {
	r := Reply{Silent: a.Silent}
	switch {
	case a.Current == "":
		r.Silent = t.Detect // it knows no leader at all
	case a.Current != a.Leader:
		r.Silent = 0 // it follows another leader: not silent
	}
	if r.Silent < AgreeAt(t.Detect) {
		return r
	}
	r.Agrees = true
	switch {
	case a.Mine < 0:
	case a.Candidate && a.Newer >= 0:
		r.Defers, r.Standing = true, true
	case a.Newer > 0 && a.Follower:
		r.Defers, r.Urge = true, true
	case a.Newer < 0 || a.Mine > a.AskerRank:
		r.Hold = true
	case a.Mine < a.AskerRank && a.Follower && !a.Holding:
		r.Defers = true
	}
	return r
}

// Verdict is what a follower does once the others answered.
type Verdict uint8

// Verdicts.
const (
	// NoElection: fewer than a majority (this node included) find the
	// leader silent; a follower cut off from the leader alone disturbs
	// nobody.
	NoElection Verdict = iota
	// HoldBack: a node that agrees stands itself (it ranks earlier or has
	// the newer log, or it is a candidate already); this one holds back
	// (Detect/2), once per 2 × Detect, and stands after all if that one
	// does not win. For a candidate it holds back again and again, up to
	// CandidateHold in a row: its vote request may need retransmissions.
	HoldBack
	// Stand: stand for election, as a leadership transfer does.
	Stand
)

// Decide is the verdict after asking: agree is how many find the leader
// silent (this node included), deferTo whether another node said it will
// stand and standing whether it said it is a candidate already, sinceHeld
// how long ago this node last held back (forever if never) and heldFor
// how long it has held back in a row (since the first hold after a pause
// of more than 2 × Detect; 0 if it does not hold).
func (t DetectTiming) Decide(agree, majority int, deferTo, standing bool, sinceHeld, heldFor time.Duration) Verdict {
	switch {
	case agree < majority:
		return NoElection
	case deferTo && !t.InHoldRun(sinceHeld):
		return HoldBack
	case deferTo && standing && heldFor < t.CandidateHold():
		return HoldBack
	}
	return Stand
}

// InHoldRun reports whether a hold sinceHeld after the last one continues
// that one's run (within 2 × Detect): Decide then lets a node hold back
// again only for a candidate, and heldFor counts from the run's first hold.
func (t DetectTiming) InHoldRun(sinceHeld time.Duration) bool { return sinceHeld <= 2*t.Detect }

// CandidateHold is how long in a row a node holds back for a candidate
// (4 × Detect): long enough for its vote request to get through a lossy
// link (TCP retransmits after 200 ms, then later), bounded so that a
// candidate that cannot win (its requests lost for good) does not keep
// the others from standing.
func (t DetectTiming) CandidateHold() time.Duration { return 4 * t.Detect }
