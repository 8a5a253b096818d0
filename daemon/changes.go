package daemon

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// changeLog records in the replicated history the changes of leader and
// of primacy that the fence records do not show: each raft election this
// node wins (fencing.KindElection) and each grant of primacy it takes,
// with the phases its takeover went through (fencing.KindPrimacy). They
// are what `fencectl history --timeline` and the status page draw.
//
// They are ordinary records, committed by this node as leader with
// OpRecord like a fence's: every version of the state machine assigns them
// the same IDs and keeps them within history.limit. They are cheap: one
// record per election (a leader re-elected with no other leader between
// takes its own record again, as a retried fence does), and per tenure at
// most four writes of its record (the grant, a block, serving, the end),
// never one per renewal. They are informational: nothing decides on them,
// and one that cannot be committed (this node no longer leads) is dropped.
//
// The control loop tells it about the machine's steps (stepped); one
// goroutine (run) commits, so writes never wait on the loop nor the loop
// on them.
type changeLog struct {
	d    *Daemon
	kick chan struct{}

	mu sync.Mutex
	// acquiring is the holder before this node's acquire in flight, and
	// when it was asked.
	acquiringFrom  string
	acquiringState string
	acquiringEpoch uint64
	acquiringAt    time.Time
	// tenure is the record of the current tenure, as it should be
	// committed; id its history ID once committed (0: not yet); dirty
	// that it changed since it was last committed.
	tenure *fencing.Record
	id     uint64
	dirty  bool
	// open: the tenure has not ended (its record takes further steps).
	open bool
	// term is the newest election term recorded.
	term uint64
}

func newChangeLog(d *Daemon) *changeLog {
	return &changeLog{d: d, kick: make(chan struct{}, 1)}
}

func (c *changeLog) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// stepped follows a step of the tenure machine (on the control loop).
func (c *changeLog) stepped(before tenure.Phase, acts []tenure.Action, m *tenure.Machine) {
	now := time.Now()
	after := m.Phase()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range acts {
		if _, ok := a.(tenure.Acquire); ok {
			h := c.d.raft.FSM().Holders()
			c.acquiringFrom, c.acquiringState, c.acquiringEpoch, c.acquiringAt = h.Holder, h.HolderState, h.Epoch, now
		}
	}
	if after == before {
		return
	}
	if before == tenure.Acquiring && after > tenure.Acquiring && after <= tenure.Serving {
		c.tenure = &fencing.Record{Kind: fencing.KindPrimacy, Target: c.d.self, Epoch: m.Epoch(), Previous: c.acquiringFrom,
			RequestedBy: c.d.self + " (takeover)", Executor: c.d.self, Started: c.acquiringAt, Outcome: fencing.OutcomeSuccess,
			Reason: grantReason(c.acquiringFrom, c.acquiringState, c.acquiringEpoch, c.d.self)}
		if c.tenure.Started.IsZero() {
			c.tenure.Started = now
		}
		c.id, c.open, c.dirty = 0, true, true
	}
	r := c.tenure
	if r == nil || !c.open {
		return
	}
	ended := after > tenure.Serving || after == tenure.Secondary
	if !ended && slices.ContainsFunc(r.Steps, func(s fencing.Step) bool { return s.Phase == after.String() }) || len(r.Steps) >= maxSteps {
		// A blocked takeover's retries move it between fencing and
		// blocked every few seconds: its fence record counts them.
		return
	}
	step := fencing.Step{Phase: after.String(), At: now}
	if ended {
		step.Reason = m.Demotion().String()
		c.open = false
		if r.Finished.IsZero() {
			r.Finished = now
		}
	}
	r.Steps = append(r.Steps, step)
	switch {
	case after == tenure.Blocked, ended:
		c.dirty = true
	case after == tenure.Serving:
		r.Finished, c.dirty = now, true
	}
	if c.dirty {
		c.wake()
	}
}

// maxSteps bounds a tenure record's steps (a takeover passes through at
// most seven phases).
const maxSteps = 12

// grantReason says how the holder before a grant left.
func grantReason(prev, state string, epoch uint64, self string) string {
	switch {
	case prev == "":
		return "first grant: no holder before"
	case prev == self:
		return fmt.Sprintf("granted again (held epoch %d before)", epoch)
	case state == quorum.HolderReleased:
		return fmt.Sprintf("%s had released epoch %d", prev, epoch)
	}
	return fmt.Sprintf("%s held epoch %d (%s) and had not released: it may still run the storage", prev, epoch, state)
}

// run commits what stepped and the elections ask for, until done closes.
func (c *changeLog) run(done <-chan struct{}) {
	for {
		leader := c.d.raft.LeaderChanged() // before looking: no change missed
		c.commitElection()
		c.commitTenure()
		select {
		case <-done:
			return
		case <-leader:
		case <-c.kick:
		}
	}
}

// commitElection records the election this node won last, once, while it
// still leads.
func (c *changeLog) commitElection() {
	q := c.d.raft
	e, ok := q.LastElection()
	c.mu.Lock()
	recorded := c.term
	c.mu.Unlock()
	if !ok || e.Term <= recorded || !q.IsLeader() {
		return
	}
	// A barrier first: this node's state then holds every entry of the
	// terms before, so the fold below reads the cluster's history.
	if err := q.Confirm(c.d.commitTimeout()); err != nil {
		return
	}
	rec := electionRecord(e, q.FSM().State(), c.d.self)
	if _, err := q.Apply(quorum.Command{Op: quorum.OpRecord, Record: &rec}, c.d.commitTimeout()); err != nil {
		c.d.log.Debug("election not recorded in the history", "term", e.Term, "err", err)
		return
	}
	c.mu.Lock()
	c.term = max(c.term, e.Term)
	c.mu.Unlock()
}

// electionRecord is the record of election e in a history whose newest
// election record may be e's leader's own from before: a re-election with
// no other leader between takes that record again (its first campaign's
// start and contact, the newest term and win, one run more).
func electionRecord(e quorum.Election, st quorum.State, self string) fencing.Record {
	rec := fencing.Record{Kind: fencing.KindElection, Target: e.Leader, Term: e.Term, Previous: e.Previous, LastContact: e.LastContact,
		Started: e.Started, Finished: e.Won, Outcome: fencing.OutcomeSuccess, RequestedBy: self, Executor: self, Epoch: st.Epoch,
		Reason: electionReason(e)}
	if rec.Started.IsZero() {
		rec.Started = e.Won
	}
	if e.Previous != e.Leader {
		return rec
	}
	for i := len(st.History) - 1; i >= 0; i-- {
		old := st.History[i]
		if old.Kind != fencing.KindElection {
			continue
		}
		if old.Target == e.Leader && old.Term < e.Term {
			old.Term, old.Finished, old.Epoch = e.Term, e.Won, st.Epoch
			old.Runs = max(old.Runs, 1) + 1
			old.Reason = fmt.Sprintf("re-elected in term %d (%d elections since the first)", e.Term, old.Runs)
			return old
		}
		break
	}
	return rec
}

func electionReason(e quorum.Election) string {
	rounds := ""
	if e.Rounds > 1 {
		rounds = fmt.Sprintf(" after %d rounds", e.Rounds)
	}
	switch {
	case e.Previous == "":
		return fmt.Sprintf("won term %d%s; no leader known before", e.Term, rounds)
	case e.Previous == e.Leader:
		return fmt.Sprintf("re-elected in term %d%s", e.Term, rounds)
	case !e.LastContact.IsZero() && !e.Started.IsZero():
		return fmt.Sprintf("won term %d%s; %s last heard %s before the campaign", e.Term, rounds, e.Previous,
			e.Started.Sub(e.LastContact).Round(time.Millisecond))
	}
	return fmt.Sprintf("won term %d%s; the leader before was %s", e.Term, rounds, e.Previous)
}

// commitTenure commits the tenure's record if it changed, while this node
// leads.
func (c *changeLog) commitTenure() {
	c.mu.Lock()
	if c.tenure == nil || !c.dirty {
		c.mu.Unlock()
		return
	}
	rec := *c.tenure
	rec.Steps = slices.Clone(rec.Steps)
	rec.ID = c.id
	c.dirty = false
	c.mu.Unlock()
	if !c.d.raft.IsLeader() {
		return
	}
	res, err := c.d.raft.Apply(quorum.Command{Op: quorum.OpRecord, Record: &rec}, c.d.commitTimeout())
	if err != nil {
		c.d.log.Debug("primacy not recorded in the history", "epoch", rec.Epoch, "err", err)
		return
	}
	id, _ := res.(uint64)
	c.mu.Lock()
	if c.tenure != nil && c.tenure.Epoch == rec.Epoch && c.tenure.Started.Equal(rec.Started) && c.id == 0 {
		c.id = id
	}
	c.mu.Unlock()
}
