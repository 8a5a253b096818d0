package quorum

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// renewRig is a 3-node cluster on raft's in-memory transport (raft's own
// timeout long, so it stays out of the way) with real gossip under the
// cluster key, and a detector on each node that never stands for election.
type renewRig struct {
	nodes     map[string]*Raft
	trans     map[string]*raft.InmemTransport
	ms        map[string]*Membership
	ds        map[string]*Detector
	leader    string
	followers []string
}

func newRenewRig(t *testing.T) *renewRig {
	t.Helper()
	const lease = 60 * time.Second
	nodes, trans := inmemCluster(t, 3, lease)
	all := []string{"a", "b", "c"}
	if err := nodes["a"].kick.kick(time.Second); err != nil {
		t.Fatal(err)
	}
	r := &renewRig{nodes: nodes, trans: trans, ds: map[string]*Detector{}}
	r.leader = waitLeader(t, nodes, all, "")
	log := slog.New(slog.DiscardHandler)
	r.ms, _ = meshOf(t, all, log)
	for _, n := range all {
		if n != r.leader {
			r.followers = append(r.followers, n)
		}
		d, err := StartDetector(nodes[n], r.ms[n], DetectorOptions{Detect: 400 * time.Millisecond, Stagger: 30 * time.Millisecond,
			Order: func(string) []string { return nil }, Majority: 2, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		r.ds[n] = d
		t.Cleanup(d.Stop)
	}
	// The leader knows that both followers answer rounds.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m := r.ms[r.leader]
		m.mu.Lock()
		ok := m.reads[r.followers[0]] >= beaconRenews && m.reads[r.followers[1]] >= beaconRenews
		m.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader never learnt that its followers answer renewal rounds")
		}
	}
	return r
}

// stallRaft cuts raft's links from the leader to every follower: its
// barriers cannot commit (as when packet loss stalls raft's streams),
// while gossip's datagrams still pass.
func (r *renewRig) stallRaft() {
	for _, f := range r.followers {
		r.trans[r.leader].Disconnect(raft.ServerAddress(f))
	}
}

// A renewal round confirms the lease while raft's streams are stalled, and
// each follower that answered recorded the contact before it did. A
// follower that has answered a successor's question about the leader
// (BoundContact) answers no round of that term again; a follower restarted
// in the term answers none of it either. Without a majority of answers, a
// round fails.
func TestRenewalRound(t *testing.T) {
	r := newRenewRig(t)
	lead := r.ds[r.leader]
	r.stallRaft()
	barrier := make(chan error, 1)
	go func() { barrier <- r.nodes[r.leader].Confirm(time.Second) }()
	select {
	case err := <-barrier:
		t.Fatalf("raft's barrier returned (%v) with every link from the leader cut: the rig does not stall raft", err)
	case <-time.After(300 * time.Millisecond): // and the followers last heard from the leader a while ago
	}
	start := time.Now()
	if err := lead.Renew(ctxFor(t, 2*time.Second)); err != nil {
		t.Fatalf("renewal round with raft stalled: %v", err)
	}
	took := time.Since(start)
	heard := 0
	for _, f := range r.followers {
		if e, ok := r.nodes[f].SinceContact(r.leader); ok && e <= time.Since(start) {
			heard++
		}
	}
	if heard == 0 {
		t.Fatal("the round completed, but no follower recorded a contact with the leader after it began")
	}
	t.Logf("a round over loopback with raft stalled: %v", took)

	// One follower alone (the other's detector stopped) is a majority
	// with the leader.
	f, other := r.followers[0], r.followers[1]
	r.ds[other].Stop()
	if err := lead.Renew(ctxFor(t, time.Second)); err != nil {
		t.Fatalf("round answered by %s alone: %v", f, err)
	}
	// f answers a successor's question about the leader: sealed.
	if _, ok := r.nodes[f].BoundContact(r.leader); !ok {
		t.Fatalf("%s has no contact with the leader to answer with", f)
	}
	if err := lead.Renew(ctxFor(t, 500*time.Millisecond)); err == nil {
		t.Fatalf("a round completed through %s after it answered a successor about this leader's term", f)
	}
	// A round of the term a node restarted in is not recorded either.
	tr := r.nodes[f].contacts
	tr.mu.Lock()
	tr.sealed = map[string]uint64{}
	tr.startTerm = r.nodes[f].Term()
	tr.mu.Unlock()
	if err := lead.Renew(ctxFor(t, 500*time.Millisecond)); err == nil {
		t.Fatalf("a round completed through %s, restarted in this term", f)
	}
	tr.mu.Lock()
	tr.startTerm = 0
	tr.mu.Unlock()
	if err := lead.Renew(ctxFor(t, time.Second)); err != nil {
		t.Fatalf("round answered by %s once neither sealed nor restarted: %v", f, err)
	}
}

// A probe numbered below one taken is refused as a replay and records
// nothing; the same round sent again is answered but records no new
// contact; a higher one records it. A follower answers no probe of another
// term or from a node it does not follow.
func TestRenewalProbeOrder(t *testing.T) {
	r := newRenewRig(t)
	f := r.followers[0]
	d, q := r.ds[f], r.nodes[f]
	term := q.Term()
	probe := func(from string, term, round uint64) []byte {
		b := append(make([]byte, beaconSeqHeader), from...)
		b[0] = renewProbe
		binary.BigEndian.PutUint64(b[1:], term)
		binary.BigEndian.PutUint64(b[9:], round)
		return b
	}
	recorded := func() Mono {
		q.contacts.mu.Lock()
		defer q.contacts.mu.Unlock()
		return q.contacts.last[r.leader]
	}
	taken := func() uint64 {
		d.renew.mu.Lock()
		defer d.renew.mu.Unlock()
		return d.renew.taken[r.leader].seq
	}
	base := uint64(1) << 62 // above any round the leader's own detector sends
	d.onProbe(probe(r.leader, term, base+10))
	if taken() != base+10 {
		t.Fatalf("round %d not taken (taken %d)", base+10, taken())
	}
	at := recorded()
	time.Sleep(5 * time.Millisecond)
	d.onProbe(probe(r.leader, term, base+10))
	if recorded() != at {
		t.Fatal("the same round sent again recorded a new contact")
	}
	d.onProbe(probe(r.leader, term, base+3))
	if recorded() != at || taken() != base+10 {
		t.Fatal("a lower round (a replay) was taken")
	}
	d.onProbe(probe(r.leader, term+1, base+20))
	d.onProbe(probe(r.followers[1], term, base+30))
	if recorded() != at || taken() != base+10 {
		t.Fatal("a probe of another term, or from a node this one does not follow, was taken")
	}
	d.onProbe(probe(r.leader, term, base+11))
	if recorded() <= at || taken() != base+11 {
		t.Fatal("a higher round was not taken")
	}
}

// Without a cluster key there are no rounds: nothing would authenticate an
// answer.
func TestRenewalRoundNeedsKey(t *testing.T) {
	nodes, _ := inmemCluster(t, 1, 600*time.Millisecond)
	waitLeader(t, nodes, []string{"a"}, "")
	m, err := JoinMembership(MembershipOptions{Self: "a", Peers: []Peer{{Name: "a", Gossip: freeGossipAddr(t)}}}, Meta{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown() })
	d, err := StartDetector(nodes["a"], m, DetectorOptions{Detect: time.Second, Order: func(string) []string { return nil }, Majority: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	if err := d.Renew(ctxFor(t, time.Second)); !errors.Is(err, ErrNoRenewRound) {
		t.Fatalf("Renew without a key: %v, want ErrNoRenewRound", err)
	}
}

// ctxFor is a context that ends after d (or with the test).
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
