package quorum

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Leader failure detection.
//
// hashicorp/raft notices a silent leader on a randomised timer of one to
// two heartbeat timeouts, counting only its TCP traffic as contact, and a
// follower refuses to vote while it still believes in a leader, so an
// election succeeds only once the slowest of a majority's timers has run
// out: detection takes one to three timeouts. And under packet loss one
// TCP segment lost three times in a row stalls raft's heartbeat connection
// for 1.4 s (200 + 400 + 800 ms retransmission timeouts), which a short
// timeout takes for a dead leader.
//
// So raft's own timeout is set long (a fallback, robust to loss), and the
// Detector decides sooner and more precisely:
//   - the leader sends a beacon over gossip's UDP every Detect/8 (encrypted
//     with the cluster key like all gossip); a follower counts the newest
//     of raft's contact and the leader's beacon, so only losing about eight
//     datagrams in a row, and TCP at once, looks like silence;
//   - a follower whose leader has been silent for Detect + rank × Stagger
//     makes raft check at once against Detect, which starts raft's normal
//     pre-vote and election;
//   - ranks are staggered so that candidates do not split the vote: the
//     first majority−1 to notice cannot win (the others still follow the
//     leader and turn them away) but grant their votes to the next one,
//     which can; nodes that may not hold primacy (witnesses, standby) are
//     placed among those first, so the winner is one that may hold it.
//
// Beacons are only ever a liveness hint: they start elections sooner, they
// cannot make anyone primary. Raft and the lease decide that.
type Detector struct {
	r    *Raft
	m    *Membership
	log  *slog.Logger
	opts DetectorOptions

	mu     sync.Mutex
	beacon map[string]time.Time // leader → when its last beacon arrived
	stop   chan struct{}
	wg     sync.WaitGroup
}

// DetectorOptions configure a Detector.
type DetectorOptions struct {
	// Detect is how long a leader may be silent before a follower acts.
	Detect time.Duration
	// Stagger separates the followers' moments of acting, by rank.
	Stagger time.Duration
	// Order returns the configured voters in the order they act on a
	// silent leader, leader excluded (see RankOrder).
	Order func(leader string) []string
	Log   *slog.Logger
}

// beaconMagic starts a beacon datagram (gossip requests are JSON, '{').
const beaconMagic = 'B'

// StartDetector runs the detector until Stop.
func StartDetector(r *Raft, m *Membership, o DetectorOptions) (*Detector, error) {
	if o.Detect <= 0 || o.Stagger < 0 || o.Order == nil {
		return nil, errors.New("detector: Detect, Stagger and Order are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	d := &Detector{r: r, m: m, log: o.Log, opts: o, beacon: map[string]time.Time{}, stop: make(chan struct{})}
	m.setBeaconHandler(d.received)
	d.wg.Add(2)
	go d.send()
	go d.watch()
	return d, nil
}

// Stop ends the detector's goroutines.
func (d *Detector) Stop() {
	select {
	case <-d.stop:
		return
	default:
	}
	close(d.stop)
	d.wg.Wait()
	d.m.setBeaconHandler(nil)
}

// send beacons to every other member while this node leads.
func (d *Detector) send() {
	defer d.wg.Done()
	every := max(d.opts.Detect/8, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	// The beacon: magic, term, then the sender's name (gossip's user
	// messages carry no sender; gossip is authenticated by the key).
	msg := append(make([]byte, 1+8), d.r.self...)
	msg[0] = beaconMagic
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		if !d.r.IsLeader() {
			continue
		}
		binary.BigEndian.PutUint64(msg[1:], d.r.Term())
		d.m.sendBeacons(msg)
	}
}

// received records a beacon.
func (d *Detector) received(b []byte) {
	if len(b) < 10 || len(b) > 9+64 {
		return
	}
	term := binary.BigEndian.Uint64(b[1:9])
	from := string(b[9:])
	if term < d.r.Term() {
		return // a deposed leader's
	}
	d.mu.Lock()
	d.beacon[from] = time.Now()
	d.mu.Unlock()
}

// Silence is how long this node has heard nothing from its leader, by raft
// or beacon (0 when it leads or knows no leader).
func (d *Detector) Silence() time.Duration {
	if d.r.IsLeader() {
		return 0
	}
	leader := d.r.Leader()
	if leader == "" {
		return 0
	}
	last := d.r.LastContact()
	d.mu.Lock()
	if b := d.beacon[leader]; b.After(last) {
		last = b
	}
	d.mu.Unlock()
	if last.IsZero() {
		return 0
	}
	return time.Since(last)
}

// watch acts on a silent leader.
func (d *Detector) watch() {
	defer d.wg.Done()
	poll := max(min(d.opts.Stagger/2, d.opts.Detect/20), 5*time.Millisecond)
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		if d.r.r.State() != raft.Follower {
			continue
		}
		leader := d.r.Leader()
		if leader == "" {
			continue
		}
		rank := slices.Index(d.opts.Order(leader), d.r.self)
		if rank < 0 {
			continue
		}
		if s := d.Silence(); s >= d.opts.Detect+time.Duration(rank)*d.opts.Stagger {
			d.log.Info("leader silent: starting an election", "leader", leader, "silent", s.Round(time.Millisecond), "rank", rank)
			d.r.recheck(d.opts.Detect, d.stop)
		}
	}
}

// RankOrder is the order in which followers act on a silent leader: the
// voters other than the leader, with up to majority−1 of those that may not
// hold primacy (ineligible) first, then those that may, then the rest; each
// group in configuration order. The majority-th to act wins the election,
// so it is one that may hold primacy whenever one exists.
func RankOrder(voters []string, leader string, majority int, ineligible func(string) bool) []string {
	var may, mayNot []string
	for _, v := range voters {
		switch {
		case v == leader:
		case ineligible(v):
			mayNot = append(mayNot, v)
		default:
			may = append(may, v)
		}
	}
	k := min(max(majority-1, 0), len(mayNot))
	out := append([]string{}, mayNot[:k]...)
	out = append(out, may...)
	return append(out, mayNot[k:]...)
}
