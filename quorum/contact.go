package quorum

import (
	"sync"
	"time"
)

// contactTracker remembers, per leader, when this node last heard from it,
// on the boot-time clock. A new primary asks a majority for these to learn
// an upper bound on the old primary's last lease renewal (see
// daemon.leaseBound), so it need not wait a whole lease after its own
// election.
type contactTracker struct {
	mu     sync.Mutex
	last   map[string]Mono
	prev   string // the leader at the last sample
	before string // the leader before prev (another node, or "")
	// sealed is, per leader, the newest term whose renewal rounds this
	// node records no more: its term when it last answered a successor's
	// question about that leader (BoundContact). startTerm is the term
	// raft started in: seals made before a restart are lost, so no round
	// of it or an earlier term is recorded (see renew.go).
	sealed    map[string]uint64
	startTerm uint64
}

// takeRound records contact with leader now, for a renewal round of term
// that this node follows leader in, unless that term is sealed for leader
// or not after the one raft started in; it reports whether it did (and so
// whether the round may be answered).
func (q *Raft) takeRound(leader string, term uint64) bool {
	t := q.contacts
	now := Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if term <= t.startTerm || term <= t.sealed[leader] {
		return false
	}
	if now > t.last[leader] {
		t.last[leader] = now
	}
	return true
}

// BoundContact is SinceContact for a successor that bounds leader's last
// lease renewal by the answer (daemon's contact question): before it
// answers, it seals leader's terms up to this node's current one, so that
// no renewal round of them is recorded after the answer.
func (q *Raft) BoundContact(leader string) (time.Duration, bool) {
	t := q.contacts
	term := q.r.CurrentTerm()
	t.mu.Lock()
	t.sealed[leader] = max(t.sealed[leader], term)
	t.mu.Unlock()
	return q.SinceContact(leader)
}

// sampleContact records raft's current leader and last contact.
func (q *Raft) sampleContact() {
	t := q.contacts
	now := Now()
	_, id := q.r.LeaderWithID()
	lc := q.r.LastContact()
	var at Mono
	if !lc.IsZero() {
		at = now - Mono(time.Since(lc))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if id != "" && at > t.last[string(id)] {
		t.last[string(id)] = at
	}
	if t.prev != "" && t.prev != string(id) && at > t.last[t.prev] {
		// The leader changed since the last sample: the old one may have
		// made contact after it. raft's last contact only moves forward,
		// so it is at or after any such contact: a safe bound, and exact
		// when taken at the change itself (onLeaderChange).
		t.last[t.prev] = at
	}
	if t.prev != string(id) && t.prev != "" {
		t.before = t.prev
	}
	t.prev = string(id)
}

// PreviousLeader is the leader this node knew before the current one (""
// if none), and how long ago it last heard from it while it led (ok false
// if never).
// onLeaderChange samples at every change of leader, so before is current;
// SinceContact samples afresh for the contact itself.
func (q *Raft) PreviousLeader() (name string, since time.Duration, ok bool) {
	t := q.contacts
	t.mu.Lock()
	name = t.before
	t.mu.Unlock()
	if name == "" {
		return "", 0, false
	}
	since, ok = q.SinceContact(name)
	return name, since, ok
}

// SinceContact reports how long ago this node last heard from leader, and
// whether it heard from it at all since it started.
func (q *Raft) SinceContact(leader string) (time.Duration, bool) {
	// A fresh sample first: the answer must cover contacts made since the
	// tracker last looked.
	q.sampleContact()
	t := q.contacts
	t.mu.Lock()
	defer t.mu.Unlock()
	if leader == q.self {
		// This node was the leader itself: it "heard" from it until now.
		return 0, true
	}
	at, ok := t.last[leader]
	if !ok {
		return 0, false
	}
	return Since(at), true
}
