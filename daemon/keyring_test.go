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
// node shows every other's keys. Then a node restarted with A alone is shut
// out: it is not a member, it has no quorum, and both sides log the refusal
// naming their key IDs. Needs root.
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

	for _, step := range []struct {
		name string
		keys [][]byte
	}{
		{"add B", [][]byte{keyA, keyB}},
		{"make B first", [][]byte{keyB, keyA}},
		{"remove A", [][]byte{keyB}},
	} {
		began := time.Now()
		ids := quorum.KeyIDs(step.keys)
		for i, n := range c.Nodes {
			writeKeys(i, step.keys...)
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
			for _, n := range c.Nodes {
				st, err := n.Status(context.Background())
				if err != nil {
					return false
				}
				for _, o := range st.Nodes {
					if !slices.Equal(o.Keys, ids) {
						return false
					}
				}
			}
			return true
		})
		// Some renewals and probes under the loss with the new keys.
		time.Sleep(3 * time.Second)
		unchanged(step.name, c.Nodes)
		t.Logf("%s: keys %v on every node, no election, failover or fence (%s)", step.name, ids, time.Since(began).Round(time.Millisecond))
	}

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

	// It restarts with A alone: it is shut out.
	writeKeys(victim.Index, keyA)
	shut := time.Now()
	restart()
	refusedB := "could not be decrypted with any of this node's keys (ids " + idB + "): the sender's key was removed or never added"
	refusedA := "could not be decrypted with any of this node's keys (ids " + idA + ")"
	logged := func(n *devcluster.Node, s string) bool {
		b, _ := os.ReadFile(n.Log)
		return strings.Contains(string(b), s)
	}
	waitUntil(t, "the members log the refusal of "+victim.Name+"'s gossip", 20*time.Second, func() bool {
		for _, n := range rest {
			if !logged(n, refusedB) {
				return false
			}
		}
		return logged(victim, refusedA)
	})
	// Long enough for several joins and elections of its own.
	time.Sleep(5 * time.Second)
	for _, n := range rest {
		st, err := n.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range st.Nodes {
			if o.Name == victim.Name && (o.Gossip == "alive" || o.Gossip == "suspect") {
				t.Fatalf("%s sees %s, of the removed key alone, as %s", n.Name, victim.Name, o.Gossip)
			}
		}
	}
	st, err := victim.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Quorum.Have || st.Self.Acting || !slices.Equal(st.Self.Keys, []string{idA}) {
		t.Fatalf("%s, of the removed key alone: quorum %v, acting %v, keys %v", victim.Name, st.Quorum.Have, st.Self.Acting, st.Self.Keys)
	}
	for _, o := range st.Nodes {
		if o.Name != victim.Name && o.Gossip == "alive" {
			t.Fatalf("%s, of the removed key alone, sees %s alive", victim.Name, o.Name)
		}
	}
	unchanged("shut out", rest)
	var raftRefused bool
	for _, n := range rest {
		raftRefused = raftRefused || logged(n, "TLS handshake refused")
	}
	t.Logf("%s shut out with key %s alone (%s): not a member, no quorum, refusals logged (raft's too: %v); total %s",
		victim.Name, idA, time.Since(shut).Round(time.Millisecond), raftRefused, time.Since(start).Round(time.Millisecond))
}
