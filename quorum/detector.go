package quorum

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
//     asks the others; only when a majority (itself included) finds the
//     leader silent too does it stand for election, as raft's leadership
//     transfer does (a TimeoutNow to itself): at once, and voters that still
//     believe in the old leader grant the vote. A follower cut off from the
//     leader alone therefore disturbs nothing;
//   - ranks are staggered so that candidacies do not collide: the first to
//     act wins, so nodes that may hold primacy come first; one asked by an
//     earlier-ranked node holds back while that one stands;
//   - but only a node whose log is as new as a majority's can win: raft
//     refuses a vote to a candidate whose log lacks entries the voter has
//     (the dead leader's last entry may have reached only some followers).
//     So a follower asked by a node whose log is older says it will stand
//     itself, and does so at once; the asker holds back;
//   - a follower left without a leader by a candidacy that failed stands
//     itself once the old leader has been silent for another Detect, rather
//     than wait for raft's own timeout.
//
// Beacons and answers are only liveness hints: they start elections sooner,
// they cannot make anyone primary. Raft and the lease decide that.
type Detector struct {
	r    *Raft
	m    *Membership
	log  *slog.Logger
	opts DetectorOptions

	mu       sync.Mutex
	beacon   map[string]time.Time // leader → when its last beacon arrived
	numbered map[string]beaconSeq // leader → the newest numbered beacon taken
	replays  int                  // numbered beacons refused as replays
	replayAt time.Time            // when a replay was last logged
	// lonely is the leader this node alone finds silent (no majority
	// agrees), logged once when it starts and once when it ends, with
	// since and tries: not at every try.
	lonely      string
	lonelySince time.Time
	lonelyTries int
	holdTill    time.Time     // an earlier-ranked node is standing
	urgeTill    time.Time     // this node's log is newer than an asker's: it stands at once
	deferred    time.Time     // when this node last held back for another node (watch's own)
	deferRun    time.Time     // the first hold of the run that deferred continues (held back again within 2 × Detect)
	wake        chan struct{} // wakes watch (an urge)
	renew       renewState    // lease renewal rounds (renew.go)
	stop        chan struct{}
	wg          sync.WaitGroup
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
	// Majority is the number of votes a leader needs.
	Majority int
	Log      *slog.Logger
}

// beaconMagic starts a beacon datagram (gossip requests are JSON, '{').
const beaconMagic = 'B'

// StartDetector runs the detector until Stop.
func StartDetector(r *Raft, m *Membership, o DetectorOptions) (*Detector, error) {
	if o.Detect <= 0 || o.Stagger < 0 || o.Order == nil || o.Majority < 1 {
		return nil, errors.New("detector: Detect, Stagger, Order and Majority are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	d := &Detector{r: r, m: m, log: o.Log, opts: o, beacon: map[string]time.Time{}, numbered: map[string]beaconSeq{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	m.setBeaconHandler(d.received)
	m.setInternal(silenceMethod, d.answer)
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
	d.m.setInternal(silenceMethod, nil)
}

// send beacons to every other member while this node leads.
func (d *Detector) send() {
	defer d.wg.Done()
	every := max(d.opts.Detect/8, 10*time.Millisecond)
	// A follower sleeps until the leader changes (raft tells of its own
	// election too), looking every second besides in case it was missed.
	t := time.NewTimer(0)
	defer t.Stop()
	// The beacon: magic, term, then the sender's name (gossip's user
	// messages carry no sender; gossip is authenticated by the key). The
	// numbered one has a sequence number after the term, rising with
	// every beacon this process sends (the monotonic clock's nanoseconds
	// since it started, so a restarted leader, in a later term anyway,
	// needs no memory of it).
	msg := append(make([]byte, 1+8), d.r.self...)
	msg[0] = beaconMagic
	numbered := append(make([]byte, beaconSeqHeader), d.r.self...)
	numbered[0] = beaconMagicSeq
	var seq uint64
	for {
		changed := d.r.LeaderChanged() // before looking: no change missed
		if !d.r.IsLeader() {
			t.Reset(time.Second)
			select {
			case <-d.stop:
				return
			case <-changed:
				continue
			case <-t.C:
				continue
			}
		}
		term := d.r.Term()
		seq = max(seq+1, uint64(time.Since(processStart)))
		binary.BigEndian.PutUint64(msg[1:], term)
		binary.BigEndian.PutUint64(numbered[1:], term)
		binary.BigEndian.PutUint64(numbered[9:], seq)
		d.m.sendBeacons(msg, numbered)
		t.Reset(every)
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
	}
}

// beaconSeq is a leader's newest numbered beacon: its term and number.
type beaconSeq struct{ term, seq uint64 }

// processStart is where beacon numbers count from.
var processStart = time.Now()

// received records a beacon.
//
// A beacon recorded on the wire and sent again after the leader died would
// keep a follower from suspecting it until raft's own timeout (liveness
// only: a beacon makes no one primary). So a numbered beacon is taken
// only when its number is above that of every beacon taken from its
// sender in its term, and a plain one not at all from a sender whose
// numbered beacons this node took in that term (an older version's plain
// beacons are still taken). What stays open: a node that restarted has no numbers yet,
// and takes the first numbered beacon of each sender and term it is
// given, replayed or not; raft's contact and the ask of a majority still
// decide an election.
func (d *Detector) received(b []byte) {
	if len(b) > 0 {
		switch b[0] {
		case renewProbe:
			d.onProbe(b)
			return
		case renewAnswer:
			d.onAnswer(b)
			return
		}
	}
	head := 9
	if len(b) > 0 && b[0] == beaconMagicSeq {
		head = beaconSeqHeader
	}
	if len(b) < head+1 || len(b) > head+beaconNameMaxLen {
		return
	}
	term := binary.BigEndian.Uint64(b[1:9])
	from := string(b[head:])
	if term < d.r.Term() {
		return // a deposed leader's
	}
	d.mu.Lock()
	if last, ok := d.numbered[from]; ok && head == 9 && last.term == term {
		d.mu.Unlock()
		d.refuseReplay(from, "an unnumbered beacon from a leader that numbers its beacons in this term")
		return
	}
	if head == beaconSeqHeader {
		n := beaconSeq{term, binary.BigEndian.Uint64(b[9:17])}
		if last, ok := d.numbered[from]; ok && last.term == n.term && n.seq <= last.seq {
			d.mu.Unlock()
			d.refuseReplay(from, "a beacon numbered at or below one taken (a replay)")
			return
		}
		d.numbered[from] = n
	}
	d.beacon[from] = time.Now()
	d.mu.Unlock()
}

// refuseReplay counts a beacon refused as a replay, and logs it at most
// once a minute.
func (d *Detector) refuseReplay(from, why string) {
	d.mu.Lock()
	d.replays++
	n, say := d.replays, time.Since(d.replayAt) >= time.Minute
	if say {
		d.replayAt = time.Now()
	}
	d.mu.Unlock()
	if say {
		d.log.Warn("gossip: beacon refused", "from", from, "why", why, "refused", n)
	}
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
	// It sleeps until the earliest moment it could have to act (the
	// silence reaching this node's threshold if nothing more is heard, a
	// hold or the pause between tries ending), but at least poll; when it
	// is no follower or knows no leader, until the leader changes (or a
	// second, in case that was missed): one wake-up per threshold while the
	// leader beacons, not one per poll.
	poll := max(min(d.opts.Stagger/2, d.opts.Detect/20), 5*time.Millisecond)
	t := time.NewTimer(poll)
	defer t.Stop()
	var lastTry time.Time
	var changed <-chan struct{}
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		case <-changed:
		case <-d.wake:
		}
		changed = d.r.LeaderChanged() // before looking: no change missed
		wait := time.Second
		act, leader, rank, s := d.due(lastTry, &wait)
		if act {
			lastTry = time.Now()
			d.stand(leader, rank, s)
			wait = poll
		} else if d.lonely != "" && (leader != d.lonely || s < d.opts.Detect) {
			d.endLonely("heard again, or another leader")
		}
		t.Reset(max(wait, poll))
	}
}

// due says whether this node should act on its leader's silence now; if
// not, it lowers *wait to when it might have to (DetectTiming.Due).
func (d *Detector) due(lastTry time.Time, wait *time.Duration) (act bool, leader string, rank int, silent time.Duration) {
	if d.r.r.State() != raft.Follower {
		return false, "", 0, 0
	}
	leader = d.r.Leader()
	w := Watch{SinceAsked: forever}
	if leader == "" {
		// Without a leader, this node follows none because a candidacy
		// began. Before any leader was known (startup), raft's own timer
		// elects.
		prev, since, ok := d.r.PreviousLeader()
		if !ok {
			return false, "", 0, 0
		}
		leader, silent, w.Leaderless = prev, min(since, d.sinceBeacon(prev)), true
	} else {
		silent = d.Silence()
	}
	rank = slices.Index(d.opts.Order(leader), d.r.self)
	if !lastTry.IsZero() {
		w.SinceAsked = time.Since(lastTry)
	}
	w.Rank, w.Silent, w.Held, w.Urged = rank, silent, time.Until(d.holdUntil()), d.urged()
	act, after := d.timing().Due(w)
	*wait = min(*wait, after)
	return act, leader, rank, silent
}

func (d *Detector) timing() DetectTiming {
	return DetectTiming{Detect: d.opts.Detect, Stagger: d.opts.Stagger}
}

// sinceBeacon is how long ago leader's last beacon arrived (forever if
// never).
func (d *Detector) sinceBeacon(leader string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.beacon[leader]
	if !ok {
		return time.Duration(math.MaxInt64)
	}
	return time.Since(b)
}

// stand asks the others whether leader is silent for them too and, if a
// majority agrees, stands for election.
//
// A node that ranks before this one and finds the leader silent too will
// stand itself, within about one beacon interval: this node's own silence
// may have reached its threshold first only because its last contact
// (a beacon, or raft's own messages, which reach each follower at its own
// time) was earlier. It then holds back for Detect/2, once per Detect×2,
// so the earlier-ranked node wins (a witness that wins only hands
// leadership on, one more election), and stands after all if that node
// does not.
func (d *Detector) stand(leader string, rank int, s time.Duration) {
	agree, asked, deferTo, standing := d.confirm(leader, rank)
	dt := d.timing()
	sinceHeld, heldFor := forever, time.Duration(0)
	if !d.deferred.IsZero() {
		sinceHeld = time.Since(d.deferred)
		if dt.InHoldRun(sinceHeld) {
			heldFor = time.Since(d.deferRun)
		}
	}
	switch dt.Decide(agree, d.opts.Majority, deferTo != "", standing, sinceHeld, heldFor) {
	case HoldBack:
		d.endLonely("a majority finds it silent too")
		if !dt.InHoldRun(sinceHeld) {
			d.deferRun = time.Now()
		}
		d.deferred = time.Now()
		d.hold()
		msg := "leader silent for a majority: an earlier-ranked node stands"
		if standing {
			msg = "leader silent for a majority: another node stands already"
		}
		d.log.Info(msg, "leader", leader, "silent", s.Round(time.Millisecond), "rank", rank, "to", deferTo)
	case NoElection:
		if d.lonely != leader {
			d.endLonely("another leader")
			d.lonely, d.lonelySince, d.lonelyTries = leader, time.Now(), 0
			d.log.Info("leader silent here, but not for a majority: no election (logged once until it ends)", "leader", leader,
				"silent", s.Round(time.Millisecond), "agree", agree, "asked", asked)
		}
		d.lonelyTries++
		return
	case Stand:
		d.endLonely("a majority finds it silent too")
		d.log.Info("leader silent for a majority: starting election (as a leadership transfer)", "leader", leader, "silent", s.Round(time.Millisecond), "rank", rank, "agree", agree)
		if err := d.r.kick.kick(d.opts.Detect); err != nil {
			d.log.Warn("standing for election", "err", err)
		}
	}
}

// endLonely logs the end of a silence that only this node saw, if one
// was logged.
func (d *Detector) endLonely(how string) {
	if d.lonely == "" {
		return
	}
	d.log.Info("leader silent here but not for a majority: ended", "leader", d.lonely, "how", how,
		"lasted", time.Since(d.lonelySince).Round(time.Millisecond), "asked", d.lonelyTries)
	d.lonely = ""
}

// silenceMethod asks a node how long it has not heard from a leader.
const silenceMethod = "quorum.silence"

type silenceReq struct {
	Leader string `json:"leader"`
	Rank   int    `json:"rank"`
	// LogTerm and LogIndex are the asker's newest log entry (0 and 0 from
	// a version that did not send them: rank alone decides then).
	LogTerm  uint64 `json:"logTerm,omitempty"`
	LogIndex uint64 `json:"logIndex,omitempty"`
}

type silenceResp struct {
	SilentNs int64 `json:"silentNs"`
	// Defer: the answerer finds the leader silent too and will stand
	// itself, because its log is newer than the asker's, or as new and it
	// ranks before the asker (see stand).
	Defer bool `json:"defer,omitempty"`
	// Standing: it defers because it is a candidate already (Reply).
	Standing bool `json:"standing,omitempty"`
}

// confirm asks the other voters whether the leader is silent for them too
// and returns how many agree (this node included), how many it asked, and
// a node that agrees and will stand itself ("" if none), and whether that
// one is a candidate already (one that is, if any is).
func (d *Detector) confirm(leader string, rank int) (agree, asked int, deferTo string, standing bool) {
	idx, term := d.r.LastLog()
	body, _ := json.Marshal(silenceReq{Leader: leader, Rank: rank, LogTerm: term, LogIndex: idx})
	ctx, cancel := context.WithTimeout(context.Background(), max(d.opts.Detect/4, 20*time.Millisecond))
	defer cancel()
	var peers []string
	for _, p := range d.m.opts.Peers {
		if p.Name != d.r.self && p.Name != leader {
			peers = append(peers, p.Name)
		}
	}
	type answer struct {
		from                    string
		agree, defers, standing bool
	}
	answers := make(chan answer, len(peers))
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Over datagrams, asked again every Detect/32: under heavy
			// loss a TCP connection per question takes a second or more
			// to open, far longer than the question may wait.
			out, err := d.m.CallDatagram(ctx, p, silenceMethod, body, d.opts.Detect/32)
			var r silenceResp
			ok := err == nil && json.Unmarshal(out, &r) == nil && time.Duration(r.SilentNs) >= d.agreeAt()
			answers <- answer{from: p, agree: ok, defers: ok && r.Defer, standing: ok && r.Defer && r.Standing}
		}()
	}
	wg.Wait()
	close(answers)
	agree = 1
	for a := range answers {
		if a.agree {
			agree++
		}
		if a.defers && (deferTo == "" || a.standing && !standing) {
			deferTo, standing = a.from, a.standing
		}
	}
	return agree, len(peers), deferTo, standing
}

// hold keeps this node from standing for Detect/2: another node stands.
func (d *Detector) hold() {
	d.mu.Lock()
	d.holdTill = time.Now().Add(d.opts.Detect / 2)
	d.mu.Unlock()
}

func (d *Detector) holdUntil() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.holdTill
}

// agreeAt is the silence at which a node agrees the leader is silent.
func (d *Detector) agreeAt() time.Duration { return AgreeAt(d.opts.Detect) }

// AgreeAt is the silence at which a node agrees, when asked, that its
// leader is silent: a beacon interval short of detect, for the asker may
// have seen the leader's last beacon that much earlier.
func AgreeAt(detect time.Duration) time.Duration { return detect - detect/8 }

// answer tells an asker how long this node has not heard from the leader.
// When it finds the leader silent too, it settles which of the two stands:
// the one with the newer log (the other could not win this node's vote, or
// would need others'), and with logs alike the earlier-ranked one. The other
// holds back.
func (d *Detector) answer(from string, body []byte) ([]byte, error) {
	var req silenceReq
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("silence query from %s: %w", from, err)
	}
	a := Asked{Leader: req.Leader, Current: d.r.Leader(), Silent: d.Silence(), AskerRank: req.Rank,
		Mine: slices.Index(d.opts.Order(req.Leader), d.r.self), Follower: d.r.r.State() == raft.Follower,
		Candidate: d.r.r.State() == raft.Candidate, Holding: time.Now().Before(d.holdUntil())}
	if req.LogTerm != 0 || req.LogIndex != 0 {
		idx, term := d.r.LastLog()
		a.Newer = CompareLog(term, idx, req.LogTerm, req.LogIndex)
	}
	r := d.timing().Answer(a)
	switch {
	case r.Urge:
		d.urge()
	case r.Hold:
		d.hold()
	}
	return json.Marshal(silenceResp{SilentNs: int64(r.Silent), Defer: r.Defers, Standing: r.Standing})
}

// urge makes this node stand at once (its log is newer than an asker's),
// ending any hold.
func (d *Detector) urge() {
	d.mu.Lock()
	d.urgeTill = time.Now().Add(d.opts.Detect / 2)
	d.holdTill = time.Time{}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Detector) urged() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return time.Now().Before(d.urgeTill)
}

// CompareLog orders two raft log positions as a vote does: by last term,
// then last index (> 0: the first is newer).
func CompareLog(termA, idxA, termB, idxB uint64) int {
	if c := cmp.Compare(termA, termB); c != 0 {
		return c
	}
	return cmp.Compare(idxA, idxB)
}

// RankOrder is the order in which followers act on a silent leader: the
// voters other than the leader, those that may hold primacy first (the first
// to act wins the election), then those that may not; each group in
// configuration order.
func RankOrder(voters []string, leader string, ineligible func(string) bool) []string {
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
	return append(may, mayNot...)
}

// Successor is the node a leader that may not hold primacy (a witness, a
// standby or ineligible node) hands leadership to: the first of order
// (RankOrder's, with this node as the leader) that may hold primacy
// (mayNot false), is alive, and is not silent (the previous leader gone
// silent: it is most likely dead, this node having been elected because it
// was silent, and gossip takes seconds to see that). raft's own choice is
// the most up-to-date voter, which can be exactly that node, and then the
// transfer only times out. "" if there is none (raft's choice then).
//
// any is false when no node of order may hold primacy at all: handing
// leadership on would only hand the same refusal on, node after node, a
// new raft term each time. The leader then keeps it (it still never
// starts the group: that needs primacy, which it may not take).
func Successor(order []string, mayNot, alive func(string) bool, silent string) (to string, any bool) {
	for _, n := range order {
		switch {
		case mayNot(n):
			continue
		case !alive(n), n == silent:
			any = true
			continue
		}
		return n, true
	}
	return "", any
}
