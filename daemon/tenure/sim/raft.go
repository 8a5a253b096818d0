package sim

import (
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/quorum"
)

// The simulated raft follows hashicorp/raft v1.8 as fenced configures it
// (quorum/raft.go): followers start an election after a randomised
// HeartbeatTimeout (HT..2HT, HT = tenure.Timing.Raft()) without contact,
// with a pre-vote first (raft's default) and leader stickiness (a node
// that knows a live leader refuses votes, except for a leadership
// transfer); a candidate retries after a randomised ElectionTimeout; a new
// leader commits a no-op of its term first; it steps down when it has not
// heard from a majority within LeaderLeaseTimeout (= HT); it heartbeats
// every 2HT/10..2HT/5 (fenced's leaderPace doubles the leader's timeouts),
// and carries the commit index every CommitTimeout (HT..2HT) or with new
// entries. Heartbeats carry no commit index, as in hashicorp/raft, so a
// follower's FSM lags the leader's. Apply and Barrier futures resolve once
// the entry is committed and applied locally, or fail when the leader
// steps down (the entry may still commit later).

type role uint8

const (
	follower role = iota
	candidate
	leader
)

type entryKind uint8

const (
	entNoop entryKind = iota
	entBarrier
	entCommand
)

type entry struct {
	term uint64
	kind entryKind
	data []byte
	id   uint64 // unique in the run: the checker tells entries apart by it
	meta meta
}

// meta is the checker's bookkeeping of an entry (not raft's): who proposed
// it, and for a lease renewal (acquire or barrier), the group and epoch it
// renews and the true time of the machine's T0 (the renewal's start).
type meta struct {
	origin int
	group  int
	epoch  uint64
	t0     int64
}

type future struct {
	term uint64
	cb   func(resp any, err error)
}

type aeReq struct {
	term     uint64
	leader   int
	hb       bool
	prev     uint64
	prevTerm uint64
	ents     []entry
	commit   uint64
}

type aeResp struct {
	prev    uint64 // the request's
	reqTerm uint64
	term    uint64
	hb      bool
	ok      bool
	last    uint64
}

type voteReq struct {
	term     uint64
	cand     int
	lastIdx  uint64
	lastTerm uint64
	transfer bool
	pre      bool
	round    int
}

type voteResp struct {
	term    uint64
	granted bool
	pre     bool
	round   int
}

// maxBatch bounds the entries of one AppendEntries.
const maxBatch = 64

const noContact = -1 << 63

func (n *Node) lastIndex() uint64 { return uint64(len(n.log) - 1) }
func (n *Node) lastTerm() uint64  { return n.log[len(n.log)-1].term }

// setTerm moves to a newer term (durable).
func (p *proc) setTerm(t uint64) {
	if t > p.n.term {
		p.n.term = t
	}
}

func (p *proc) setLeader(l int) {
	if p.leaderID == l {
		return
	}
	if p.leaderID >= 0 {
		p.prevLeader = p.leaderID // quorum's PreviousLeader
	}
	p.leaderID = l
	if l >= 0 && l != p.n.id {
		p.w.tracef("%s follows %s (term %d)", p.n.name, nodeName(l), p.n.term)
	}
}

// timer runs fn after d on this node's clock, in this process.
func (p *proc) timer(d time.Duration, fn func()) {
	n, inc := p.n, p.inc
	p.w.after(n.trueDur(d), func() { n.exec(inc, fn) })
}

func (p *proc) startRaft() {
	p.contact = make([]int64, p.w.sc.Nodes)
	for i := range p.contact {
		p.contact[i] = noContact
	}
	p.leaderID, p.prevLeader = -1, -1
	p.lastContact = int64(p.n.local())
	p.taken = make([]seqOf, p.w.sc.Nodes)
	p.sealed = make([]uint64, p.w.sc.Nodes)
	p.startTerm = p.n.term
	p.becomeFollower()
}

func (p *proc) htFor() time.Duration {
	if p.role == leader {
		return 2 * p.w.ht
	}
	return p.w.ht
}

func (p *proc) becomeFollower() {
	was := p.role
	p.role = follower
	p.transferCand = false
	p.hbTok++
	p.armFollowerTimer()
	if was == leader {
		p.leaderLost()
	}
}

func (p *proc) armFollowerTimer() {
	tok := p.hbTok
	ht := p.w.ht
	p.timer(uniform(p.n.rng, ht, 2*ht), func() {
		if p.hbTok != tok || p.role != follower {
			return
		}
		p.armFollowerTimer()
		if time.Duration(int64(p.n.local())-p.lastContact) < ht {
			return
		}
		p.w.tracef("%s heartbeat timeout: election", p.n.name)
		p.setLeader(-1)
		p.campaign(false)
	})
}

// stepDown ends this node's leadership (a newer term, or no majority).
func (p *proc) stepDown(term uint64) {
	p.setTerm(term)
	if p.role == leader {
		p.w.tracef("%s steps down (term %d)", p.n.name, p.n.term)
	}
	p.setLeader(-1)
	p.becomeFollower()
}

// leaderLost fails what waited on this leadership.
func (p *proc) leaderLost() {
	fs := p.futures
	p.futures = nil
	idx := make([]uint64, 0, len(fs))
	for i := range fs {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		fs[i].cb(nil, raft.ErrLeadershipLost)
	}
	if x := p.xfer; x != nil {
		p.xfer = nil
		x.cb(nil) // "lost leadership during transfer (expected)"
	}
	p.loopKick() // LeaderCh
}

func (p *proc) campaign(transfer bool) {
	if p.role == leader {
		return
	}
	p.role = candidate
	p.hbTok++
	p.setLeader(-1)
	p.round++
	p.elTerm = p.n.term + 1
	p.votes, p.pvotes, p.prefused = 1, 1, 0
	p.prevoting = !transfer
	p.transferCand = transfer
	if transfer {
		p.electSelf()
	} else {
		p.broadcastVote(true)
	}
	p.armElectionTimer()
}

func (p *proc) armElectionTimer() {
	p.elTok++
	tok := p.elTok
	et := p.w.ht
	p.timer(uniform(p.n.rng, et, 2*et), func() {
		if p.elTok != tok || p.role != candidate {
			return
		}
		p.w.tracef("%s election timeout", p.n.name)
		p.campaign(false)
	})
}

func (p *proc) electSelf() {
	p.prevoting = false
	p.setTerm(p.elTerm)
	p.n.votedFor, p.n.votedTerm = p.n.id, p.elTerm
	p.votes = 1
	p.w.tracef("%s candidate for term %d", p.n.name, p.elTerm)
	p.broadcastVote(false)
}

func (p *proc) broadcastVote(pre bool) {
	req := voteReq{term: p.elTerm, cand: p.n.id, lastIdx: p.n.lastIndex(), lastTerm: p.n.lastTerm(),
		transfer: p.transferCand, pre: pre, round: p.round}
	for i := range p.w.nodes {
		if i != p.n.id {
			p.w.net.sendRaft(p.n.id, i, 0, func(q *proc) { q.onVote(req) })
		}
	}
}

func (p *proc) onVote(req voteReq) {
	n := p.n
	resp := voteResp{term: n.term, pre: req.pre, round: req.round}
	defer func() {
		from := req.cand
		p.w.net.sendRaft(n.id, from, diskDelay(n), func(q *proc) { q.onVoteResp(resp) })
	}()
	if p.leaderID >= 0 && p.leaderID != req.cand && (req.pre || !req.transfer) {
		return
	}
	if req.term < n.term {
		return
	}
	if req.pre {
		if req.term > n.term {
			resp.term = req.term
		}
		if n.lastTerm() > req.lastTerm || n.lastTerm() == req.lastTerm && n.lastIndex() > req.lastIdx {
			return
		}
		resp.granted = true
		return
	}
	if req.term > n.term {
		p.setTerm(req.term)
		if p.role != follower {
			p.stepDown(req.term)
		}
		resp.term = req.term
	}
	if n.votedTerm == req.term {
		resp.granted = n.votedFor == req.cand
		return
	}
	if n.lastTerm() > req.lastTerm || n.lastTerm() == req.lastTerm && n.lastIndex() > req.lastIdx {
		return
	}
	n.votedFor, n.votedTerm = req.cand, req.term
	resp.granted = true
	p.lastContact = int64(n.local())
}

func (p *proc) onVoteResp(r voteResp) {
	if p.role != candidate || r.round != p.round {
		return
	}
	if r.pre {
		if !p.prevoting {
			return
		}
		if r.term > p.elTerm {
			p.stepDown(r.term)
			return
		}
		if r.granted {
			p.pvotes++
		} else {
			p.prefused++
		}
		if p.pvotes >= p.w.majority {
			p.armElectionTimer()
			p.electSelf()
		}
		return
	}
	if r.term > p.n.term {
		p.stepDown(r.term)
		return
	}
	if p.prevoting || p.n.term != p.elTerm {
		return
	}
	if r.granted {
		p.votes++
	}
	if p.votes >= p.w.majority {
		p.becomeLeader()
	}
}

func (p *proc) becomeLeader() {
	n, w := p.n, p.w
	p.role = leader
	p.elTok++
	p.hbTok++
	p.setLeader(n.id)
	w.chk.leaderElected(n, n.term)
	w.tracef("%s LEADER of term %d", n.name, n.term)
	N := w.sc.Nodes
	p.next = make([]uint64, N)
	p.match = make([]uint64, N)
	p.peerContact = make([]int64, N)
	now := int64(n.local())
	for i := range N {
		p.next[i] = n.lastIndex() + 1
		p.peerContact[i] = now
	}
	p.futures = map[uint64]future{}
	p.appendEntry(entry{kind: entNoop, meta: meta{origin: -1}}, nil)
	p.versionStep(n.term)
	p.armHeartbeat()
	p.armCommitTimer()
	tok := p.hbTok
	p.timer(w.ht, func() { p.leaseCheck(tok) })
	p.loopKick() // LeaderCh
}

// versionStep is the daemon's (daemon/clusterversion.go): the leader
// raises the committed cluster version one step at a time to this
// build's, every node running it; until then a command that names a
// group other than the default is refused at proposal. A run of one group
// needs no version above 1 and leaves it there, so that its schedules run
// as they did before groups.
func (p *proc) versionStep(term uint64) {
	if p.role != leader || p.n.term != term || p.dead || p.w.groups() == 1 {
		return
	}
	v := p.n.fsm.ClusterVersion()
	if v >= quorum.ClusterVersionMax {
		return
	}
	p.applyCmd(quorum.Command{Op: quorum.OpClusterVersion, ClusterVersion: v + 1}, func(_ any, err error) {
		if err != nil {
			p.timer(time.Second, func() { p.versionStep(term) })
			return
		}
		p.versionStep(term)
	})
}

func (p *proc) armHeartbeat() {
	tok := p.hbTok
	ht := p.htFor()
	p.timer(uniform(p.n.rng, ht/10, ht/5), func() {
		if p.hbTok != tok || p.role != leader {
			return
		}
		req := aeReq{term: p.n.term, leader: p.n.id, hb: true}
		for i := range p.w.nodes {
			if i != p.n.id {
				p.w.net.sendRaft(p.n.id, i, 0, func(q *proc) { q.onAppend(req) })
			}
		}
		p.armHeartbeat()
	})
}

func (p *proc) armCommitTimer() {
	tok := p.hbTok
	ct := p.w.ht
	p.timer(uniform(p.n.rng, ct, 2*ct), func() {
		if p.hbTok != tok || p.role != leader {
			return
		}
		p.replicateAll()
		p.armCommitTimer()
	})
}

// leaseCheck is hashicorp's checkLeaderLease: step down without a
// majority's contact within LeaderLeaseTimeout.
func (p *proc) leaseCheck(tok int) {
	if p.hbTok != tok || p.role != leader {
		return
	}
	lease := p.w.ht
	now := int64(p.n.local())
	contacted := 1
	var maxDiff time.Duration
	for i, c := range p.peerContact {
		if i == p.n.id {
			continue
		}
		if d := time.Duration(now - c); d <= lease {
			contacted++
			maxDiff = max(maxDiff, d)
		}
	}
	if contacted < p.w.majority {
		p.w.tracef("%s lost contact with a majority: stepping down", p.n.name)
		p.stepDown(p.n.term)
		return
	}
	p.timer(max(lease-maxDiff, 10*time.Millisecond), func() { p.leaseCheck(tok) })
}

// appendEntry adds an entry to the leader's log and replicates it; cb (if
// any) runs once it is committed and applied here, or the leadership ends.
func (p *proc) appendEntry(e entry, cb func(any, error)) {
	n := p.n
	e.term = n.term
	p.w.entrySeq++
	e.id = p.w.entrySeq
	n.log = append(n.log, e)
	if cb != nil {
		p.futures[n.lastIndex()] = future{term: e.term, cb: cb}
	}
	p.replicateAll()
}

// apply is raft.Apply / Barrier as quorum.Raft uses them.
func (p *proc) apply(kind entryKind, data []byte, m meta, cb func(any, error)) {
	switch {
	case p.role != leader:
		cb(nil, raft.ErrNotLeader)
	case p.xfer != nil:
		cb(nil, raft.ErrLeadershipTransferInProgress)
	default:
		p.appendEntry(entry{kind: kind, data: data, meta: m}, cb)
	}
}

func (p *proc) replicateAll() {
	for i := range p.w.nodes {
		if i != p.n.id {
			p.sendAppend(i)
		}
	}
}

func (p *proc) sendAppend(i int) {
	n := p.n
	prev := p.next[i] - 1
	end := min(n.lastIndex()+1, p.next[i]+maxBatch)
	req := aeReq{term: n.term, leader: n.id, prev: prev, prevTerm: n.log[prev].term,
		ents: slices.Clone(n.log[p.next[i]:end]), commit: p.commit}
	p.next[i] = end
	p.w.net.sendRaft(n.id, i, 0, func(q *proc) { q.onAppend(req) })
}

func (p *proc) onAppend(req aeReq) {
	n := p.n
	resp := aeResp{prev: req.prev, reqTerm: req.term, term: n.term, hb: req.hb, last: n.lastIndex()}
	reply := func() {
		p.w.net.sendRaft(n.id, req.leader, diskDelay(n), func(q *proc) { q.onAppendResp(n.id, resp) })
	}
	if req.term < n.term {
		reply()
		return
	}
	if req.term > n.term || p.role != follower && !p.transferCand {
		p.setTerm(req.term)
		if p.role == leader {
			p.stepDown(req.term)
		} else if p.role != follower {
			p.becomeFollower()
		}
		resp.term = n.term
	}
	p.setLeader(req.leader)
	if !req.hb {
		if req.prev > n.lastIndex() || n.log[req.prev].term != req.prevTerm {
			reply()
			return
		}
		for k, e := range req.ents {
			idx := req.prev + 1 + uint64(k)
			if idx <= n.lastIndex() {
				if n.log[idx].term == e.term {
					continue
				}
				n.log = n.log[:idx]
			}
			n.log = append(n.log, e)
		}
		lastNew := req.prev + uint64(len(req.ents))
		if req.commit > p.commit {
			p.commit = min(req.commit, lastNew)
			p.applyCommitted()
		}
		resp.ok, resp.last = true, lastNew
	} else {
		resp.ok = true
	}
	now := int64(n.local())
	p.lastContact = now
	p.contact[req.leader] = now
	reply()
}

func (p *proc) onAppendResp(from int, r aeResp) {
	if p.role != leader {
		return
	}
	if r.term > p.n.term {
		p.stepDown(r.term)
		return
	}
	if r.reqTerm != p.n.term {
		return
	}
	p.peerContact[from] = int64(p.n.local())
	if r.hb {
		return
	}
	if r.ok {
		p.match[from] = max(p.match[from], r.last)
		p.next[from] = max(p.next[from], p.match[from]+1)
		p.advanceCommit()
		return
	}
	// The entry before the batch did not match: back up to it (or to the
	// follower's end), as raft's nextIndex = min(nextIndex−1, lastLog+1).
	if r.prev+1 < p.next[from] || r.last+1 < p.next[from] {
		p.next[from] = max(1, min(r.prev, r.last+1))
		p.sendAppend(from)
	}
}

func (p *proc) advanceCommit() {
	n := p.n
	for idx := n.lastIndex(); idx > p.commit; idx-- {
		if n.log[idx].term != n.term {
			break
		}
		votes := 1
		for i, m := range p.match {
			if i != n.id && m >= idx {
				votes++
			}
		}
		if votes >= p.w.majority {
			p.w.chk.committed(n, p.commit, idx)
			p.commit = idx
			p.applyCommitted()
			return
		}
	}
}

// applyCommitted applies committed entries to this node's FSM, as raft's
// FSM goroutine does, and answers this leader's futures.
func (p *proc) applyCommitted() {
	n := p.n
	changed := false
	for n.applied < p.commit {
		i := n.applied + 1
		e := n.log[i]
		p.w.chk.applied(n, i, e)
		var resp any
		if e.kind == entCommand {
			resp = n.fsm.Apply(&raft.Log{Index: i, Term: e.term, Type: raft.LogCommand, Data: e.data})
			changed = true
			p.w.chk.fsmApplied(n)
			if _, refused := resp.(error); !refused && p.w.groups() > 1 {
				p.appliedPlace(e.data)
			}
		}
		n.applied = i
		if f, ok := p.futures[i]; ok && p.role == leader {
			delete(p.futures, i)
			if f.term != e.term {
				f.cb(nil, raft.ErrLeadershipLost)
			} else if err, isErr := resp.(error); isErr {
				f.cb(nil, err)
			} else {
				f.cb(resp, nil)
			}
		}
	}
	if changed {
		p.loopKick()
	}
}

// transfer is raft's LeadershipTransfer(ToServer): catch the target up,
// send it TimeoutNow, and wait up to an ElectionTimeout for this node to
// lose leadership; applies are refused meanwhile.
type xfer struct {
	cb       func(error)
	target   int
	answered bool
}

func (p *proc) transfer(to int, cb func(error)) {
	if p.role != leader {
		cb(raft.ErrNotLeader)
		return
	}
	if p.xfer != nil {
		cb(raft.ErrLeadershipTransferInProgress)
		return
	}
	if to < 0 {
		for i := range p.w.nodes {
			if i != p.n.id && (to < 0 || p.match[i] > p.match[to]) {
				to = i
			}
		}
	}
	x := &xfer{cb: cb, target: to}
	p.xfer = x
	et := p.htFor()
	done := func(err error) {
		if p.xfer == x {
			p.xfer = nil
			x.cb(err)
		}
	}
	p.timer(et, func() {
		if !x.answered {
			done(errors.New("leadership transfer timeout"))
		}
	})
	// Catch the target up first: TimeoutNow goes out once it acknowledged
	// the leader's last entry (raft's replicateTo waits for the answer).
	var poll func(n int)
	poll = func(n int) {
		if p.xfer != x || p.role != leader {
			return
		}
		if p.match[to] < p.n.lastIndex() {
			if n%5 == 0 {
				p.next[to] = p.match[to] + 1
				p.sendAppend(to)
			}
			p.timer(10*time.Millisecond, func() { poll(n + 1) })
			return
		}
		self := p.n.id
		p.w.net.sendRaft(self, to, 0, func(q *proc) {
			q.w.tracef("%s TimeoutNow from %s", q.n.name, nodeName(self))
			q.campaign(true)
			q.w.net.sendRaft(q.n.id, self, 0, func(r *proc) {
				if r.xfer != x {
					return
				}
				x.answered = true
				r.timer(et, func() { done(errors.New("leadership transfer timeout")) })
			})
		})
	}
	poll(0)
}

// sinceContact is quorum's SinceContact: how long ago this node last
// heard from leader l (AppendEntries it accepted), if at all since it
// started.
func (p *proc) sinceContact(l int) (time.Duration, bool) {
	if l == p.n.id {
		return 0, true
	}
	c := p.contact[l]
	if c == noContact {
		return 0, false
	}
	return time.Duration(int64(p.n.local()) - c), true
}

// diskDelay is an fsync before an answer leaves.
func diskDelay(n *Node) time.Duration {
	if n.w.sc.Quiet {
		return 100 * time.Microsecond
	}
	return uniform(n.rng, 50*time.Microsecond, 2*time.Millisecond)
}
