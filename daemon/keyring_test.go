package daemon_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// rotationLoss is the loss on every cluster link during TestKeyRotationLossy,
// within the nemesis's packet-loss fault (10, 20 or 35 %).
const rotationLoss = 25

// TestKeyRotationLossy (issue 26 §2): a running 3-node cluster of real
// processes in network namespaces, every link losing rotationLoss % of its
// packets, rotates its cluster key from A to B in three rolling reloads (add
// B, make B first, remove A). After each step the holder, the epoch and
// every node's raft term are unchanged, no fence was recorded, and every
// node shows every other's keys. A follower restarted with B alone rejoins
// (all its connections new, under B). The two others then rotate on to C
// while it runs on with B: it is shut out of gossip and, at the last step,
// of raft, with no election among the others; started again with B alone it
// stays out. Both sides log the refusals with their key IDs. Needs root.
func TestKeyRotationLossy(t *testing.T) {
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("needs root")
		}
		t.Fatal("needs root for network namespaces (run as root, or -short)")
	}
	start := time.Now()
	ns, err := devcluster.NewNetns(fmt.Sprintf("fkr%d", os.Getpid()%10000), 3, (os.Getpid()+137)%250)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	dir := t.TempDir()
	keyFile := func(i int) string { return filepath.Join(dir, fmt.Sprintf("node%d.key", i+1)) }
	// The defaults' timing (a lease of 3 s), as the lossy soak runs: the
	// tests' faster one is not meant for this much loss.
	c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: dir, Bin: fencedBin, BMC: true, Hosts: ns.Hosts, Wrap: ns.Wrap,
		Timing: config.Default().Timing,
		// A key file per node, each starting as the cluster's (key A).
		NodeConfig: func(i int, cfg *config.Config) {
			b, err := os.ReadFile(cfg.Gossip.KeyFile)
			if err == nil {
				err = os.WriteFile(keyFile(i), b, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg.Gossip.KeyFile = keyFile(i)
		}})
	if err != nil {
		t.Fatal(err)
	}
	var bmcs []*net.UDPAddr
	for _, b := range c.BMCs {
		bmcs = append(bmcs, b.Addr())
	}
	relay, err := ns.RelayUDP(bmcs)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		relay.Close()
		if leaks := c.LeakedSecrets(); len(leaks) > 0 {
			t.Errorf("BMC password found in logs: %v", leaks)
		}
		if t.Failed() {
			t.Logf("whole logs kept in %s", keepLogs(c))
			for _, nd := range c.Nodes {
				b, _ := os.ReadFile(nd.Log)
				t.Logf("---- %s log (last 4000 bytes) ----\n%s", nd.Name, tail(string(b), 4000))
			}
		}
	})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	watchSafety(t, c)
	keyA, err := quorum.ReadKey(keyFile(0))
	if err != nil {
		t.Fatal(err)
	}
	keyB := make([]byte, 32)
	rand.Read(keyB)
	idA, idB := quorum.KeyID(keyA), quorum.KeyID(keyB)
	writeKeys := func(i int, keys ...[]byte) {
		t.Helper()
		s := "# cluster keys, the first encrypts\n"
		for _, k := range keys {
			s += base64.StdEncoding.EncodeToString(k) + "\n"
		}
		if err := os.WriteFile(keyFile(i), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	p, epoch, err := c.Primary(ctxT(t, 40*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Every node in gossip with the others, and agreeing on the leader,
	// before the loss begins.
	var leader string
	waitUntil(t, "every node sees the others and one leader", 20*time.Second, func() bool {
		leaders := map[string]bool{}
		for _, n := range c.Nodes {
			st, err := n.Status(context.Background())
			if err != nil || st.Quorum.Leader == "" {
				return false
			}
			leaders[st.Quorum.Leader] = true
			leader = st.Quorum.Leader
			for _, o := range st.Nodes {
				if o.Gossip != "alive" {
					return false
				}
			}
		}
		return len(leaders) == 1
	})
	terms := map[string]uint64{}
	for _, n := range c.Nodes {
		st, err := n.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		terms[n.Name] = st.Self.Term
	}
	t.Logf("primary %s epoch %d, raft leader %s, terms %v, after %s", p.Name, epoch, leader, terms, time.Since(start).Round(time.Millisecond))
	for i := range c.Nodes {
		if err := ns.Loss(i, rotationLoss); err != nil {
			t.Fatal(err)
		}
	}

	// unchanged checks that no election, failover or fence happened on
	// any of nodes (running ones).
	unchanged := func(step string, nodes []*devcluster.Node) {
		t.Helper()
		for _, n := range nodes {
			st, err := n.Status(context.Background())
			if err != nil {
				t.Fatalf("%s: %s status: %v", step, n.Name, err)
			}
			if st.Primary.Node != p.Name || st.Primary.Epoch != epoch {
				t.Fatalf("%s: %s says primary %s epoch %d, was %s epoch %d", step, n.Name, st.Primary.Node, st.Primary.Epoch, p.Name, epoch)
			}
			if st.Self.Term != terms[n.Name] {
				t.Fatalf("%s: %s is in raft term %d, was %d: an election", step, n.Name, st.Self.Term, terms[n.Name])
			}
			h, err := historyOf(context.Background(), n, "")
			if err != nil {
				t.Fatalf("%s: %s history: %v", step, n.Name, err)
			}
			for _, r := range h {
				if r.Kind == fencing.KindFence {
					t.Fatalf("%s: a fence was recorded: %+v", step, r)
				}
			}
		}
	}

	// A bad key file is refused, naming its line, and the keys stay.
	os.WriteFile(keyFile(0), []byte(base64.StdEncoding.EncodeToString(keyA)+"\nnot a key\n"), 0o600)
	if _, err := reload(t, c.Nodes[0]); err == nil || !strings.Contains(err.Error(), keyFile(0)+" line 2: not base64") {
		t.Fatalf("reload of a bad key file: %v", err)
	}
	if st, err := c.Nodes[0].Status(context.Background()); err != nil || !slices.Equal(st.Self.Keys, []string{idA}) {
		t.Fatalf("after a refused reload: keys %v (%v)", st.Self.Keys, err)
	}

	// rotate runs the three rolling reloads from key old to key nw on
	// nodes (the others keep their keys), checking after each step.
	rotate := func(nodes []*devcluster.Node, old, nw []byte, oldName, newName string) {
		t.Helper()
		names := map[string]bool{}
		for _, n := range nodes {
			names[n.Name] = true
		}
		for _, step := range []struct {
			name string
			keys [][]byte
		}{
			{"add " + newName, [][]byte{old, nw}},
			{"make " + newName + " first", [][]byte{nw, old}},
			{"remove " + oldName, [][]byte{nw}},
		} {
			began := time.Now()
			ids := quorum.KeyIDs(step.keys)
			for _, n := range nodes {
				writeKeys(n.Index, step.keys...)
				r, err := reload(t, n)
				if err != nil {
					t.Fatalf("%s: reload %s: %v", step.name, n.Name, err)
				}
				want := "gossip.key_file (keys " + strings.Join(ids, ", ") + ")"
				if !slices.Contains(r.Changed, want) {
					t.Fatalf("%s: %s reload changed %q, want %q", step.name, n.Name, r.Changed, want)
				}
				st, err := n.Status(context.Background())
				if err != nil || !slices.Equal(st.Self.Keys, ids) {
					t.Fatalf("%s: %s shows keys %v (%v), want %v", step.name, n.Name, st.Self.Keys, err, ids)
				}
			}
			// Gossip carries each node's keys to the others: it reads them.
			waitUntil(t, step.name+": every node shows every node's keys", 20*time.Second, func() bool {
				for _, n := range nodes {
					st, err := n.Status(context.Background())
					if err != nil {
						return false
					}
					for _, o := range st.Nodes {
						if names[o.Name] && !slices.Equal(o.Keys, ids) {
							return false
						}
					}
				}
				return true
			})
			// Renewals (one a heartbeat), beacons and probes under the
			// loss with the new keys, for two thirds of a lease.
			time.Sleep(config.Default().Timing.Lease.D() * 2 / 3)
			unchanged(step.name, nodes)
			t.Logf("%s: keys %v on %d nodes, no election, failover or fence (%s)", step.name, ids, len(nodes), time.Since(began).Round(time.Millisecond))
		}
	}
	rotate(c.Nodes, keyA, keyB, "A", "B")

	// A node that is neither the primary nor the leader restarts, with B:
	// its raft and gossip connections are all new, under B alone, and it
	// rejoins without an election.
	var victim *devcluster.Node
	for _, n := range c.Nodes {
		if n.Name != p.Name && n.Name != leader {
			victim = n
		}
	}
	rest := slices.DeleteFunc(slices.Clone(c.Nodes), func(n *devcluster.Node) bool { return n == victim })
	// logged says whether a line of n's log since mark holds every one of
	// parts.
	offsets := map[string]int{}
	mark := func() {
		for _, n := range c.Nodes {
			b, _ := os.ReadFile(n.Log)
			offsets[n.Name] = len(b)
		}
	}
	logged := func(n *devcluster.Node, parts ...string) bool {
		b, _ := os.ReadFile(n.Log)
		for _, l := range strings.Split(string(b[min(offsets[n.Name], len(b)):]), "\n") {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
				return true
			}
		}
		return false
	}
	restart := func() {
		t.Helper()
		victim.Signal(syscall.SIGTERM)
		if !victim.Wait(15 * time.Second) {
			t.Fatalf("%s did not stop after SIGTERM", victim.Name)
		}
		if err := victim.Start(); err != nil {
			t.Fatal(err)
		}
	}
	rejoin := time.Now()
	restart()
	waitUntil(t, victim.Name+" back in gossip and raft with B", 30*time.Second, func() bool {
		st, err := victim.Status(context.Background())
		if err != nil || !st.Quorum.Have || st.Quorum.Leader != leader || st.Self.Raft != "follower" {
			return false
		}
		for _, n := range rest {
			st, err := n.Status(context.Background())
			if err != nil {
				return false
			}
			for _, o := range st.Nodes {
				if o.Name == victim.Name && (o.Gossip != "alive" || !slices.Equal(o.Keys, []string{idB})) {
					return false
				}
			}
		}
		return true
	})
	unchanged(victim.Name+" restarted with B", rest)
	t.Logf("%s restarted with B alone: back in gossip and raft, no election (%s)", victim.Name, time.Since(rejoin).Round(time.Millisecond))

	// The two others rotate on to key C while it runs on, left with B: it
	// is shut out of gossip (it reads none of theirs) and, at the last
	// step, of raft (its connections, made under B, are closed and new
	// ones refused).
	keyC := make([]byte, 32)
	rand.Read(keyC)
	idC := quorum.KeyID(keyC)
	left := time.Now()
	mark()
	rotate(rest, keyB, keyC, "B", "C")
	undecryptable := func(ids ...string) string {
		return "could not be decrypted with any of this node's keys (ids " + strings.Join(ids, ", ") + "): the sender's key was removed or never added"
	}
	// shutOut checks that victim, of key id alone, is out: the others log
	// that its gossip does not decrypt with theirs (and, closing, raft),
	// it logs that theirs does not with its own, it has no quorum, and
	// no other node sees it, nor it any.
	shutOut := func(what, id string, closedRaft bool) {
		t.Helper()
		began := time.Now()
		waitUntil(t, what+": the refusals logged on both sides", 20*time.Second, func() bool {
			for _, n := range rest {
				if !logged(n, undecryptable(idC)) {
					return false
				}
				// The leader replicates to it, so it has connections to
				// close (a follower may have none).
				if closedRaft && n.Name == leader && !logged(n, "raft: closed the connections of a peer whose certificate is of a removed key", "peer="+victim.Name) {
					return false
				}
			}
			return logged(victim, undecryptable(id))
		})
		refused := time.Since(began)
		waitUntil(t, what+": "+victim.Name+" without quorum, seen by none", 30*time.Second, func() bool {
			st, err := victim.Status(context.Background())
			if err != nil || st.Quorum.Have || st.Self.Acting || !slices.Equal(st.Self.Keys, []string{id}) {
				return false
			}
			for _, o := range st.Nodes {
				if o.Name != victim.Name && (o.Gossip == "alive" || o.Gossip == "suspect") {
					return false
				}
			}
			for _, n := range rest {
				st, err := n.Status(context.Background())
				if err != nil {
					return false
				}
				for _, o := range st.Nodes {
					if o.Name == victim.Name && (o.Gossip == "alive" || o.Gossip == "suspect") {
						return false
					}
				}
			}
			return true
		})
		t.Logf("%s: refusals logged on both sides after %s, %s out of gossip and quorum after %s", what,
			refused.Round(time.Millisecond), victim.Name, time.Since(began).Round(time.Millisecond))
		// Long enough for several joins and elections of its own.
		time.Sleep(3 * time.Second)
		if st, err := victim.Status(context.Background()); err != nil || st.Quorum.Have {
			t.Fatalf("%s: %s has quorum again (%v)", what, victim.Name, err)
		}
		unchanged(what, rest)
	}
	shutOut("left with B", idB, true)
	t.Logf("%s, running, left with B while the others moved to C: shut out of gossip and raft, no election (%s)", victim.Name, time.Since(left).Round(time.Millisecond))

	// Started again with B alone, it stays out.
	shut := time.Now()
	mark()
	restart()
	shutOut("started with B", idB, false)
	var raftRefused bool
	for _, n := range rest {
		raftRefused = raftRefused || logged(n, "TLS handshake refused")
	}
	t.Logf("%s started with the removed key B alone: shut out (%s; raft's refusals logged: %v); total %s",
		victim.Name, time.Since(shut).Round(time.Millisecond), raftRefused, time.Since(start).Round(time.Millisecond))
}
