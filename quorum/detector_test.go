package quorum

import (
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestRankOrder(t *testing.T) {
	none := func(string) bool { return false }
	witness := func(n string) bool { return n == "w" }
	cases := []struct {
		voters []string
		leader string
		inel   func(string) bool
		want   []string
	}{
		{[]string{"a", "b", "c"}, "a", none, []string{"b", "c"}},
		// The first to act wins: a data node before the witness.
		{[]string{"w", "a", "b"}, "a", witness, []string{"b", "w"}},
		{[]string{"a", "b", "c", "x", "y"}, "c", func(n string) bool { return n == "x" || n == "b" }, []string{"a", "y", "b", "x"}},
	}
	for _, c := range cases {
		if got := RankOrder(c.voters, c.leader, c.inel); !reflect.DeepEqual(got, c.want) {
			t.Errorf("RankOrder(%v, %s) = %v, want %v", c.voters, c.leader, got, c.want)
		}
	}
}

// A follower asked by a later-ranked one whether the leader is silent,
// when it finds it silent too, agrees and says it will stand itself (the
// asker then holds back); asked by an earlier-ranked one, it agrees and
// holds back its own candidacy instead.
func TestSilenceAnswerDefersToEarlierRank(t *testing.T) {
	const lease = 6 * time.Second // raft's own timeout (2s) stays out of the way
	nodes, trans := inmemCluster(t, 3, lease)
	all := []string{"a", "b", "c"}
	leader := waitLeader(t, nodes, all, "")
	var first, second string
	for _, n := range all {
		switch {
		case n == leader:
		case first == "":
			first = n
		default:
			second = n
		}
	}
	order := func(string) []string { return []string{first, second} }
	det := func(n string) *Detector {
		return &Detector{r: nodes[n], log: slog.New(slog.DiscardHandler), beacon: map[string]time.Time{},
			opts: DetectorOptions{Detect: 100 * time.Millisecond, Stagger: 10 * time.Millisecond, Order: order, Majority: 2}}
	}
	df, ds := det(first), det(second)
	ask := func(d *Detector, rank int) silenceResp {
		t.Helper()
		body, _ := json.Marshal(silenceReq{Leader: leader, Rank: rank})
		out, err := d.answer("asker", body)
		if err != nil {
			t.Fatal(err)
		}
		var r silenceResp
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// While the leader speaks: not silent, nobody defers or holds.
	if r := ask(df, 1); r.Defer || time.Duration(r.SilentNs) >= df.agreeAt() {
		t.Fatalf("leader alive: answer %+v", r)
	}
	for _, n := range all {
		if n != leader {
			trans[leader].Disconnect(raft.ServerAddress(n))
			trans[n].Disconnect(raft.ServerAddress(leader))
		}
	}
	time.Sleep(150 * time.Millisecond)
	if r := ask(df, 1); !r.Defer || time.Duration(r.SilentNs) < df.agreeAt() {
		t.Fatalf("rank 0 asked by rank 1 about a silent leader: answer %+v, want agreement and Defer", r)
	}
	if r := ask(ds, 0); r.Defer || time.Duration(r.SilentNs) < ds.agreeAt() {
		t.Fatalf("rank 1 asked by rank 0 about a silent leader: answer %+v, want agreement without Defer", r)
	}
	if !time.Now().Before(ds.holdUntil()) {
		t.Fatal("rank 1 asked by rank 0 does not hold back its own candidacy")
	}
}

// TestDetectorElectsTheNewestLog: the dead leader's last entry reached only
// one follower, and the other follower ranks first. raft refuses its vote
// to a candidate whose log is older than the voter's, so the rank-0
// follower cannot win; raft's own timeout (20 s here) would elect only
// after a long stall.
//   - asked: the rank-0 follower asks the other, which says it will stand
//     itself and does so at once; the rank-0 one holds back (one election:
//     the term rises by one).
//   - failed candidacy: the rank-0 follower stands without asking (as an
//     older version would) and loses; the other, left without a leader,
//     stands itself once the old leader has been silent another Detect.
func TestDetectorElectsTheNewestLog(t *testing.T) {
	for _, byHand := range []bool{false, true} {
		name := map[bool]string{false: "asked", true: "failed candidacy"}[byHand]
		t.Run(name, func(t *testing.T) {
			const lease = 60 * time.Second // raft's own timeout: 20 s
			const detect = 200 * time.Millisecond
			nodes, trans := inmemCluster(t, 3, lease)
			all := []string{"a", "b", "c"}
			if err := nodes["a"].kick.kick(time.Second); err != nil {
				t.Fatal(err)
			}
			leader := waitLeader(t, nodes, all, "")
			var rest []string
			for _, n := range all {
				if n != leader {
					rest = append(rest, n)
				}
			}
			behind, ahead := rest[0], rest[1]
			log := slog.New(slog.DiscardHandler)
			ms, _ := meshOf(t, all, log)
			ds := map[string]*Detector{}
			order := func(l string) []string {
				var o []string
				for _, n := range all {
					if n != l {
						o = append(o, n)
					}
				}
				return o
			}
			for _, n := range all {
				d, err := StartDetector(nodes[n], ms[n], DetectorOptions{Detect: detect, Stagger: 30 * time.Millisecond,
					Order: order, Majority: 2, Log: log.With("node", n)})
				if err != nil {
					t.Fatal(err)
				}
				ds[n] = d
				t.Cleanup(d.Stop)
			}
			// The leader's last entry reaches only the later-ranked follower.
			trans[leader].Disconnect(raft.ServerAddress(behind))
			trans[behind].Disconnect(raft.ServerAddress(leader))
			if _, err := nodes[leader].Apply(Command{Op: OpAcquire, Node: leader, Time: time.Now()}, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			bi, bt := nodes[behind].LastLog()
			ai, at := nodes[ahead].LastLog()
			if CompareLog(at, ai, bt, bi) <= 0 {
				t.Fatalf("%s's log (%d/%d) is not newer than %s's (%d/%d)", ahead, at, ai, behind, bt, bi)
			}
			term := nodes[ahead].Term()
			// The leader dies: no beacons, no raft.
			ds[leader].Stop()
			ms[leader].Shutdown()
			trans[leader].Disconnect(raft.ServerAddress(ahead))
			trans[ahead].Disconnect(raft.ServerAddress(leader))
			nodes[leader].Shutdown()
			if byHand {
				if err := nodes[behind].kick.kick(time.Second); err != nil {
					t.Fatal(err)
				}
			}
			t0 := time.Now()
			for nodes[ahead].Leader() != ahead || !nodes[ahead].IsLeader() {
				if time.Since(t0) > 5*time.Second {
					t.Fatalf("no new leader 5s after the leader died (%s: %s, leader %q; %s: %s, leader %q)", ahead, nodes[ahead].RaftState(), nodes[ahead].Leader(),
						behind, nodes[behind].RaftState(), nodes[behind].Leader())
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Logf("%s elected %s after the leader died, term %d → %d", ahead, time.Since(t0).Round(time.Millisecond), term, nodes[ahead].Term())
			if !byHand && nodes[ahead].Term() != term+1 {
				t.Errorf("term %d → %d: %s stood too (want one election, by %s)", term, nodes[ahead].Term(), behind, ahead)
			}
		})
	}
}

// A beacon frame recorded on the wire and sent again after the leader
// died (issue 27) must not keep a follower from suspecting it. Frames as
// an onlooker could have recorded them (sealed under the cluster key, this
// term, the leader's name): one numbered low, and one of the plain kind.
func TestReplayedBeaconIsRefused(t *testing.T) {
	const detect = 200 * time.Millisecond
	nodes, _ := inmemCluster(t, 3, 60*time.Second)
	all := []string{"a", "b", "c"}
	if err := nodes["a"].kick.kick(time.Second); err != nil {
		t.Fatal(err)
	}
	leader := waitLeader(t, nodes, all, "")
	log := slog.New(slog.DiscardHandler)
	ms, addrs := meshOf(t, all, log)
	var follower string
	for _, n := range all {
		if n != leader {
			follower = n
			break
		}
	}
	gossip := addrs[follower]
	// Only the follower runs a detector: no one stands for election here.
	ds := map[string]*Detector{}
	for _, n := range []string{leader, follower} {
		d, err := StartDetector(nodes[n], ms[n], DetectorOptions{Detect: detect, Stagger: 30 * time.Millisecond,
			Order: func(string) []string { return nil }, Majority: 2, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		ds[n] = d
		t.Cleanup(d.Stop)
	}
	d := ds[follower]
	lastBeacon := func() time.Time {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.beacon[leader]
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d.mu.Lock()
		_, numbered := d.numbered[leader]
		d.mu.Unlock()
		if numbered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower never took a numbered beacon")
		}
	}
	term := nodes[follower].Term()
	// The leader's beacons stop (it died, or is cut off).
	ds[leader].Stop()
	ms[leader].Shutdown()
	time.Sleep(50 * time.Millisecond)
	stopped := lastBeacon()

	aead, err := beaconCipher(keyA)
	if err != nil {
		t.Fatal(err)
	}
	plain := append(binary.BigEndian.AppendUint64([]byte{beaconMagic}, term), leader...)
	low := append(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64([]byte{beaconMagicSeq}, term), 1), leader...)
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	dst, _ := net.ResolveUDPAddr("udp", gossip)
	for range 20 {
		u.WriteToUDP(sealBeacon(aead, plain), dst)
		u.WriteToUDP(sealBeacon(aead, low), dst)
		time.Sleep(20 * time.Millisecond)
	}
	if got := lastBeacon(); got.After(stopped) {
		t.Fatalf("a replayed beacon was taken: the leader's last beacon moved %v past its death", got.Sub(stopped))
	}
	d.mu.Lock()
	replays := d.replays
	d.mu.Unlock()
	if replays == 0 {
		t.Fatal("no replay refused (or none arrived)")
	}
}

// A follower cut off from its leader alone asks the others again and
// again and finds no majority that agrees (issue 24): it logs that once
// when it starts and once when it ends, not at every ask.
func TestLonelySilenceLoggedOnce(t *testing.T) {
	const detect = 150 * time.Millisecond
	nodes, trans := inmemCluster(t, 3, 60*time.Second)
	all := []string{"a", "b", "c"}
	if err := nodes["a"].kick.kick(time.Second); err != nil {
		t.Fatal(err)
	}
	leader := waitLeader(t, nodes, all, "")
	quiet := slog.New(slog.DiscardHandler)
	ms, _ := meshOf(t, all, quiet)
	var lone, other string
	for _, n := range all {
		if n != leader {
			if lone == "" {
				lone = n
			} else {
				other = n
			}
		}
	}
	logs := &logRecords{}
	// Raft and the leader's beacons reach the other follower, not the
	// lone one.
	for _, n := range []string{leader, lone, other} {
		l := quiet
		if n == lone {
			l = slog.New(logs)
		}
		d, err := StartDetector(nodes[n], ms[n], DetectorOptions{Detect: detect, Stagger: 30 * time.Millisecond,
			Order: func(l string) []string { return []string{lone, other} }, Majority: 2, Log: l})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
	}
	ms[lone].setBeaconHandler(func([]byte) {})
	trans[leader].Disconnect(raft.ServerAddress(lone))
	trans[lone].Disconnect(raft.ServerAddress(leader))
	time.Sleep(2 * time.Second)
	count := func(msg string) int {
		n := 0
		for _, r := range logs.records() {
			if strings.HasPrefix(r.Message, msg) {
				n++
			}
		}
		return n
	}
	if n := count("leader silent here, but not for a majority"); n != 1 {
		t.Fatalf("logged %d times in 2 s that the leader is silent here only, want once", n)
	}
	trans[leader].Connect(raft.ServerAddress(lone), trans[lone])
	trans[lone].Connect(raft.ServerAddress(leader), trans[leader])
	// Raft's next heartbeat to it ends the silence (beacons are dropped).
	waitFor := time.Now().Add(20 * time.Second)
	for count("leader silent here but not for a majority: ended") != 1 {
		if time.Now().After(waitFor) {
			t.Fatalf("the end was not logged once: %d", count("leader silent here but not for a majority: ended"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if nodes[leader].Leader() != leader || nodes[lone].Leader() != leader {
		t.Fatal("an election happened")
	}
}

// meshOf starts a gossip membership for each of names, under the cluster
// key, and waits until each sees all of them. It returns the memberships
// and the gossip address of each node.
func meshOf(t *testing.T, names []string, log *slog.Logger) (map[string]*Membership, map[string]string) {
	t.Helper()
	var peers []Peer
	addrs := map[string]string{}
	for _, n := range names {
		peers = append(peers, Peer{Name: n, Gossip: freeGossipAddr(t)})
		addrs[n] = peers[len(peers)-1].Gossip
	}
	ms := map[string]*Membership{}
	for _, n := range names {
		m, err := JoinMembership(MembershipOptions{Self: n, Peers: peers, Key: keyA, Logger: log}, Meta{Role: "secondary"})
		if err != nil {
			t.Fatal(err)
		}
		ms[n] = m
		t.Cleanup(func() { m.Shutdown() })
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		met := true
		for _, m := range ms {
			met = met && m.ml.NumMembers() == len(names)
		}
		if met {
			return ms, addrs
		}
		if time.Now().After(deadline) {
			t.Fatal("the nodes did not meet")
		}
	}
}
