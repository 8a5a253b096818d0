package daemon_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// Two data nodes and a witness (node3): the most common bare-metal HA
// cluster, a pair sharing a disk plus a tie-breaker.

const witness = 2 // node3

func witnessConfig(c *config.Config) {
	c.Nodes[witness].Role = config.RoleWitness
	c.Nodes[witness].Fence = nil
}

func witnessCluster(t *testing.T, o devcluster.Options) *devcluster.Cluster {
	o.Nodes, o.BMC = 3, true
	prev := o.Configure
	o.Configure = func(c *config.Config) {
		witnessConfig(c)
		if prev != nil {
			prev(c)
		}
	}
	c := startCluster(t, o)
	watchSafety(t, c)
	watchWitness(t, c.Nodes[witness])
	return c
}

// watchWitness fails the test if the witness ever holds an epoch, acts,
// or runs storage.
func watchWitness(t *testing.T, w *devcluster.Node) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			if !w.Running() {
				continue
			}
			st, err := w.Status(context.Background())
			if err != nil {
				continue
			}
			if st.Self.Acting || st.Self.Epoch != 0 || st.Self.Storage != "" && st.Self.Storage != "stopped" {
				t.Errorf("WITNESS %s: role %s, epoch %d, acting %v, storage %s", w.Name, st.Self.Role, st.Self.Epoch, st.Self.Acting, st.Self.Storage)
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// TestWitnessKillFailover: SIGKILL the primary of a 2+1 cluster: the other
// data node fences it and takes over; the witness is never primary.
func TestWitnessKillFailover(t *testing.T) {
	c := witnessCluster(t, devcluster.Options{Store: true})
	p, e1 := primaryWriting(t, c)
	if p.Index == witness {
		t.Fatal("the witness is primary")
	}
	// A witness checks no fence device: it fences nobody and holds no
	// device secrets.
	if st, err := c.Nodes[witness].Status(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	} else {
		for _, fp := range st.FencePaths {
			for _, dv := range fp.Devices {
				if dv.State == "ok" || dv.State == "failing" {
					t.Errorf("the witness checked %s: %s", dv.Device, dv.State)
				}
			}
		}
	}
	p.Kill()
	q, e2 := successorWriting(t, c, p, e1)
	if q.Index == witness {
		t.Fatal("the witness took over")
	}
	fenced := false
	for _, r := range history(t, q, p.Name) {
		fenced = fenced || r.Kind == fencing.KindFence && r.Outcome == fencing.OutcomeSuccess && r.Epoch == e2
	}
	if !fenced {
		t.Errorf("%s was not fenced before %s took over at %d", p.Name, q.Name, e2)
	}
}

// TestWitnessDown: the witness dies: the primary keeps serving (same
// epoch, no failover), and status on it says the witness is lost.
func TestWitnessDown(t *testing.T) {
	c := witnessCluster(t, devcluster.Options{Store: true})
	p, e1 := primaryWriting(t, c)
	c.Nodes[witness].Kill()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := p.Status(ctxT(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if !st.Self.Acting || st.Self.Epoch != e1 {
			t.Fatalf("primary %s stopped or changed epoch (acting %v, epoch %d) when the witness died", p.Name, st.Self.Acting, st.Self.Epoch)
		}
		n := st.Nodes[witness]
		if n.Kind == "witness" && n.Gossip != "alive" && n.Gossip != "suspect" {
			t.Logf("status on %s: witness %s is %s", p.Name, n.Name, n.Gossip)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the witness lost: %+v", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	since := time.Now()
	time.Sleep(3 * testTiming.Lease.D())
	if w := writers(c, since); len(w) != 1 || w[p.Name] != e1 {
		t.Fatalf("writers with the witness down: %v (want only %s@%d)", w, p.Name, e1)
	}
}

// TestWitnessAndPrimaryDown: with the witness and the primary gone, the
// remaining data node has no majority and must not act: the price of
// safety (it cannot tell a dead pair from a partition).
func TestWitnessAndPrimaryDown(t *testing.T) {
	c := witnessCluster(t, devcluster.Options{Store: true})
	p, _ := primaryWriting(t, c)
	c.Nodes[witness].Kill()
	p.Kill()
	other := c.Other(p, c.Nodes[witness])
	since := time.Now()
	// Status says what the survivor reaches (issue 24): once it says no
	// quorum, the primary it names is only the last known, never
	// current; and the log says "quorum lost" then, with what was lost.
	var noQuorum time.Time
	logged := false
	lostLine := regexp.MustCompile(`msg="quorum lost" .*needed=2 .*leader_heard=false`)
	tooFew := regexp.MustCompile(`msg="quorum lost" .*why="too few votes reachable" reachable=1 needed=2 .*leader_heard=false`)
	for time.Since(since) < 4*testTiming.Lease.D() {
		st, err := other.Status(ctxT(t, 5*time.Second))
		if err == nil && (st.Self.Acting || st.Self.Epoch != 0) {
			t.Fatalf("%s acts without a majority: %+v", other.Name, st.Self)
		}
		if err == nil && !st.Quorum.Have {
			if noQuorum.IsZero() {
				noQuorum = time.Now()
				t.Logf("%s says no quorum %v after the kills: %+v", other.Name, noQuorum.Sub(since).Round(time.Millisecond), st.Quorum)
			}
			if !st.Primary.LastKnown {
				t.Fatalf("%s has no quorum and shows primary %s, epoch %d, %s as current", other.Name, st.Primary.Node, st.Primary.Epoch, st.Primary.State)
			}
		}
		if !logged && !noQuorum.IsZero() {
			b, _ := os.ReadFile(other.Log)
			if logged = lostLine.Match(b); logged {
				t.Logf("quorum lost logged %v after status said so", time.Since(noQuorum).Round(time.Millisecond))
			} else if time.Since(noQuorum) > 1500*time.Millisecond {
				t.Fatalf("status said no quorum %v ago; the log has no %q", time.Since(noQuorum).Round(time.Millisecond), lostLine)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if noQuorum.IsZero() || !logged {
		t.Fatalf("%s never said no quorum (%v) or never logged it (%v)", other.Name, noQuorum, logged)
	}
	// Once gossip gives them up, the log says what is lost: votes.
	waitUntil(t, "the log to say too few votes reachable", 20*time.Second, func() bool {
		b, _ := os.ReadFile(other.Log)
		return tooFew.Match(b)
	})
	if st, err := other.Status(ctxT(t, 5*time.Second)); err != nil || st.Quorum.Reachable != 1 || st.Quorum.Have || !st.Primary.LastKnown {
		t.Fatalf("%s with the witness and %s dead: %+v, primary %+v (%v)", other.Name, p.Name, st.Quorum, st.Primary, err)
	}
	if w := writers(c, since); len(w) != 0 {
		t.Fatalf("writes without a majority: %v", w)
	}
}

// TestWitnessPartitionNetns: the two data nodes lose each other while the
// witness sees both. Exactly one keeps or gets primacy; if the one that
// loses it was primary, it stops by lease − margin and is fenced.
func TestWitnessPartitionNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("needs root")
		}
		t.Fatal("needs root for network namespaces (run as root, or -short)")
	}
	subnet := (os.Getpid() + 37) % 250
	ns, err := devcluster.NewNetns(fmt.Sprintf("fw%d", os.Getpid()%10000), 3, subnet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	// No storage stand-in here: its store listens on the host's loopback,
	// out of the namespaces' reach; acting is what matters.
	c := witnessCluster(t, devcluster.Options{Hosts: ns.Hosts, Wrap: ns.Wrap})
	// The simulated BMCs run on this host's loopback: reachable from the
	// namespaces through a relay (needed only once a fence runs).
	var bmcs []*net.UDPAddr
	for _, b := range c.BMCs {
		bmcs = append(bmcs, b.Addr())
	}
	relay, err := ns.RelayUDP(bmcs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relay.Close)
	p, e1, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	q := c.Other(p, c.Nodes[witness])
	var both atomic.Int32
	cut := time.Now()
	if err := ns.Cut(p.Index, q.Index); err != nil {
		t.Fatal(err)
	}
	// Sample who acts for a few leases.
	stoppedAt := time.Duration(0)
	for time.Since(cut) < 4*testTiming.Lease.D() {
		sp, errp := p.Status(ctxT(t, 5*time.Second))
		sq, errq := q.Status(ctxT(t, 5*time.Second))
		pActs := errp == nil && sp.Self.Acting
		qActs := errq == nil && sq.Self.Acting
		if pActs && qActs {
			both.Add(1)
		}
		if !pActs && stoppedAt == 0 && p.Running() {
			stoppedAt = time.Since(cut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if both.Load() > 0 {
		t.Fatalf("both data nodes acted at once in %d samples", both.Load())
	}
	now, e, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case now == p && e == e1:
		t.Logf("%s kept primacy at epoch %d through the cut (the witness kept following it)", p.Name, e1)
	case now == q:
		if stoppedAt == 0 || stoppedAt > testTiming.Lease.D()-testTiming.Margin.D()+300*time.Millisecond {
			t.Errorf("%s lost primacy but stopped acting only %s after the cut", p.Name, stoppedAt)
		}
		if c.BMCs[p.Index].PoweredOn() {
			t.Errorf("%s lost primacy to %s but was not fenced", p.Name, q.Name)
		}
		t.Logf("%s took over at epoch %d; %s stopped %s after the cut and was fenced", q.Name, e, p.Name, stoppedAt)
	default:
		t.Fatalf("primary %s at %d after the cut", now.Name, e)
	}
}
