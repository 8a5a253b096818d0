package quorum

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Lease renewal rounds over the beacon channel.
//
// A lease renewal must show that a majority heard from the holder after
// the renewal began (t0). raft's barrier shows it, but it rides raft's one
// TCP stream per follower: under heavy packet loss a segment lost a few
// times in a row stalls that stream for seconds, on every follower at
// once, and a healthy primary gives up its lease. So the leader also runs
// a renewal round over gossip's UDP beside each barrier: it sends each
// follower a probe (term, round), again every Detect/8 until a majority
// answered; a follower that still follows it in that term records the
// contact, on its own boot-time clock, before it answers. The first of
// the two paths to complete renews the lease.
//
// Why a round is a majority-confirmed renewal (see BoundOf): a successor
// bounds the former holder's last renewal by asking a majority when each
// last heard from it. Let M1 be the majority that answered the round begun
// at t0, and M2 the majority whose answers bound it. They share a node N.
// N recorded the contact, at or after t0, before it answered the round; if
// it did so before it answered the successor, its answer is at or after
// t0, which is what BoundOf needs. It cannot have done so after: a node
// that answers a successor's question about a leader seals that leader's
// terms up to its own current term (BoundContact), and records no round
// of a sealed term again. A restarted node has lost its seals, so it
// answers rounds only of terms after the one it started in. And a round is
// answered only by a node still in the round's term, so a round cannot
// complete after a majority moved to a later term: the bound "lease +
// margin after a successor's grant" stays true too.
//
// Only with a cluster key: frames are sealed with it (AES-GCM), so no one
// without the key can answer a round; a round number is taken once per
// leader and term, so a recorded probe sent again records nothing.
const (
	renewProbe  = 'P' // magic, term, round, leader's name
	renewAnswer = 'A' // magic, term, round, follower's name
	// beaconRenews is the Meta.Beacon of a node that answers renewal
	// rounds (and reads numbered beacons).
	beaconRenews = 3
)

// ErrNoRenewRound says a renewal round cannot run: no cluster key, or not
// leading.
var ErrNoRenewRound = errors.New("no renewal round: no cluster key, or not the leader")

// renewal is one round this node runs as leader.
type renewal struct {
	term     uint64
	answered map[string]bool // guarded by renewState.mu
	done     chan struct{}   // closed once a majority answered
}

// renewState is the detector's renewal bookkeeping.
type renewState struct {
	mu     sync.Mutex
	next   uint64               // the last round number used
	rounds map[uint64]*renewal  // this node's rounds in flight
	taken  map[string]beaconSeq // leader → the newest round recorded from it
}

// Renew runs a renewal round: it returns nil once a majority of the
// configured nodes (this one included) answered a probe sent after the
// call, while this node still leads in the round's term; else an error
// when ctx ends first.
func (d *Detector) Renew(ctx context.Context) error {
	if !d.m.ring.Load().encrypted() || !d.r.IsLeader() {
		return ErrNoRenewRound
	}
	term := d.r.Term()
	rs := &d.renew
	rs.mu.Lock()
	rs.next = max(rs.next+1, uint64(time.Since(processStart)))
	id := rs.next
	rd := &renewal{term: term, answered: map[string]bool{}, done: make(chan struct{})}
	if rs.rounds == nil {
		rs.rounds = map[uint64]*renewal{}
	}
	rs.rounds[id] = rd
	rs.mu.Unlock()
	defer func() {
		rs.mu.Lock()
		delete(rs.rounds, id)
		rs.mu.Unlock()
	}()
	if d.opts.Majority <= 1 {
		close(rd.done)
	}
	probe := append(make([]byte, beaconSeqHeader), d.r.self...)
	probe[0] = renewProbe
	binary.BigEndian.PutUint64(probe[1:], term)
	binary.BigEndian.PutUint64(probe[9:], id)
	frame := d.m.ring.Load().seal(probe)
	every := max(d.opts.Detect/8, 10*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	answered := func(name string) bool {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		return rd.answered[name]
	}
	for {
		d.m.sendRenewal(frame, answered)
		select {
		case <-rd.done:
			if !d.r.IsLeader() || d.r.Term() != term {
				return fmt.Errorf("renewal round: leadership lost in term %d", term)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("renewal round: no majority answered: %w", ctx.Err())
		case <-d.stop:
			return ErrNoRenewRound
		case <-tick.C:
		}
	}
}

// sendRenewal sends frame to every other configured node that answers
// rounds and has not answered this one: to the last address gossip knew
// for it, alive or not (under heavy loss gossip may take a live node for
// suspect).
func (m *Membership) sendRenewal(frame []byte, answered func(name string) bool) {
	for _, p := range m.opts.Peers {
		if p.Name == m.opts.Self {
			continue
		}
		m.mu.Lock()
		n, reads := m.addrs[p.Name], m.reads[p.Name]
		m.mu.Unlock()
		if n == nil || reads < beaconRenews {
			continue
		}
		if answered(p.Name) {
			continue
		}
		if _, err := m.guard.WriteToAddress(frame, memberlist.Address{Addr: n.Address(), Name: n.Name}); err != nil {
			m.log.Debug("gossip: renewal probe", "to", n.Name, "err", err)
		}
	}
}

// renewFrame parses a probe or an answer: term, round, name.
func renewFrame(b []byte) (term, round uint64, name string, ok bool) {
	if len(b) < beaconSeqHeader+1 || len(b) > beaconSeqHeader+beaconNameMaxLen {
		return 0, 0, "", false
	}
	return binary.BigEndian.Uint64(b[1:9]), binary.BigEndian.Uint64(b[9:17]), string(b[beaconSeqHeader:]), true
}

// onProbe answers a leader's renewal probe, if this node follows that
// leader in the probe's term and may record the round (Raft.takeRound).
// A probe is leader traffic like a beacon: it counts against silence.
func (d *Detector) onProbe(b []byte) {
	term, round, leader, ok := renewFrame(b)
	if !ok || !d.m.ring.Load().encrypted() || leader == d.r.self {
		return
	}
	if d.r.IsLeader() || d.r.Term() != term || d.r.Leader() != leader {
		return
	}
	rs := &d.renew
	rs.mu.Lock()
	last, seen := rs.taken[leader]
	fresh := !seen || last.term != term || round > last.seq
	if seen && last.term == term && round < last.seq {
		rs.mu.Unlock()
		d.refuseReplay(leader, "a renewal probe numbered below one taken (a replay)")
		return
	}
	if fresh {
		// Recorded once per round: the leader's resends of a round only
		// ask for the answer again.
		if !d.r.takeRound(leader, term) {
			rs.mu.Unlock()
			return
		}
		if rs.taken == nil {
			rs.taken = map[string]beaconSeq{}
		}
		rs.taken[leader] = beaconSeq{term, round}
	}
	rs.mu.Unlock()
	if fresh {
		d.mu.Lock()
		d.beacon[leader] = time.Now()
		d.mu.Unlock()
	}
	answer := append(make([]byte, beaconSeqHeader), d.r.self...)
	answer[0] = renewAnswer
	copy(answer[1:beaconSeqHeader], b[1:beaconSeqHeader])
	d.m.sendFrameTo(leader, d.m.ring.Load().seal(answer))
}

// onAnswer counts a follower's answer to one of this node's rounds.
func (d *Detector) onAnswer(b []byte) {
	term, round, from, ok := renewFrame(b)
	if !ok || !d.m.ring.Load().encrypted() {
		return
	}
	if d.m.peerOf(from) == nil || from == d.r.self {
		return
	}
	rs := &d.renew
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rd := rs.rounds[round]
	if rd == nil || rd.term != term || rd.answered[from] {
		return
	}
	rd.answered[from] = true
	if len(rd.answered)+1 == d.opts.Majority {
		close(rd.done)
	}
}

// peerOf returns the configured peer called name, or nil.
func (m *Membership) peerOf(name string) *Peer { return findPeer(m.opts.Peers, name) }

// sendFrameTo sends a sealed frame to the last address gossip knew for
// node name.
func (m *Membership) sendFrameTo(name string, frame []byte) {
	m.mu.Lock()
	n := m.addrs[name]
	m.mu.Unlock()
	if n == nil {
		return
	}
	if _, err := m.guard.WriteToAddress(frame, memberlist.Address{Addr: n.Address(), Name: n.Name}); err != nil {
		m.log.Debug("gossip: renewal answer", "to", name, "err", err)
	}
}
