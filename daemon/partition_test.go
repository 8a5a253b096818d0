package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/devcluster"
	"github.com/fenced/fenced/quorum"
)

// inproc is a cluster of daemons in this process whose raft links run over
// raft.InmemTransport, so a test can cut them: a fault-injecting network.
type inproc struct {
	t      *testing.T
	nodes  []*daemon.Daemon
	trans  map[string]*raft.InmemTransport
	cancel []context.CancelFunc
	done   []chan struct{}
}

func newInproc(t *testing.T, n int) *inproc {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Version = 1
	cfg.Cluster.Name = "inproc"
	cfg.Timing = testTiming
	for i := range n {
		p, err := devcluster.FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Nodes = append(cfg.Nodes, config.Node{Name: fmt.Sprintf("n%d", i+1),
			Gossip: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), Raft: fmt.Sprintf("127.0.0.1:%d", 1+i)})
	}
	if ps := cfg.Validate(nil); ps != nil {
		t.Fatal(ps)
	}
	ip := &inproc{t: t, trans: map[string]*raft.InmemTransport{}}
	for _, nd := range cfg.Nodes {
		_, tr := raft.NewInmemTransport(raft.ServerAddress(nd.Name))
		ip.trans[nd.Name] = tr
	}
	ip.heal()
	for _, nd := range cfg.Nodes {
		nc := *cfg
		nc.Node = nd.Name
		nc.API.Socket = filepath.Join(dir, nd.Name+".sock")
		nc.DataDir = filepath.Join(dir, nd.Name)
		d, err := daemon.New(&nc, daemon.Options{
			Logger: slog.New(slog.DiscardHandler),
			Raft:   quorum.RaftOptions{Transport: ip.trans[nd.Name], InMemory: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); d.Run(ctx) }()
		ip.nodes = append(ip.nodes, d)
		ip.cancel = append(ip.cancel, cancel)
		ip.done = append(ip.done, done)
	}
	t.Cleanup(ip.close)
	return ip
}

func (ip *inproc) close() {
	for i, d := range ip.nodes {
		ip.cancel[i]()
		select {
		case <-ip.done[i]:
		case <-time.After(10 * time.Second):
			d.Close()
		}
	}
}

// cut isolates the named nodes from every other node (both directions).
func (ip *inproc) cut(minority ...string) {
	in := map[string]bool{}
	for _, m := range minority {
		in[m] = true
	}
	for a, ta := range ip.trans {
		for b := range ip.trans {
			if a != b && in[a] != in[b] {
				ta.Disconnect(raft.ServerAddress(b))
			}
		}
	}
}

func (ip *inproc) heal() {
	for a, ta := range ip.trans {
		for b, tb := range ip.trans {
			if a != b {
				ta.Connect(raft.ServerAddress(b), tb)
			}
		}
	}
}

// acting returns the nodes acting as primary and their epochs.
func (ip *inproc) acting() map[string]uint64 {
	m := map[string]uint64{}
	for _, d := range ip.nodes {
		if d.Acting() {
			m[d.Name()] = d.Epoch()
		}
	}
	return m
}

func (ip *inproc) waitPrimary(d time.Duration, among ...string) (string, uint64) {
	ip.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		a := ip.acting()
		for n, e := range a {
			if len(among) == 0 || contains(among, n) {
				if len(a) == 1 {
					return n, e
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	ip.t.Fatalf("no single primary among %v within %s (acting: %v)", among, d, ip.acting())
	return "", 0
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// monitor checks the safety invariant every millisecond: no two nodes act
// with the same epoch, and no node acts with an epoch below one that acted.
func (ip *inproc) monitor() (stop func()) {
	var (
		mu   sync.Mutex
		max  uint64
		seen = map[uint64]string{}
		quit = make(chan struct{})
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(time.Millisecond):
			}
			mu.Lock()
			for n, e := range ip.acting() {
				if o, ok := seen[e]; ok && o != n {
					ip.t.Errorf("SAFETY: %s and %s acted with epoch %d", o, n, e)
				}
				if e < max {
					ip.t.Errorf("SAFETY: %s acted with stale epoch %d after %d", n, e, max)
				}
				seen[e] = n
				if e > max {
					max = e
				}
			}
			mu.Unlock()
		}
	}()
	return func() { close(quit); <-done }
}

// TestPartitionInProcess: the old primary cut off into a minority stops
// acting by lease − margin without learning anything; the majority elects
// exactly one new primary with a higher epoch; the minority never has one;
// after healing, one primary and the epochs are still monotonic.
func TestPartitionInProcess(t *testing.T) {
	ip := newInproc(t, 3)
	stop := ip.monitor()
	defer stop()
	old, e1 := ip.waitPrimary(20 * time.Second)
	var majority []string
	for _, d := range ip.nodes {
		if d.Name() != old {
			majority = append(majority, d.Name())
		}
	}
	cutAt := time.Now()
	ip.cut(old)

	// Fail-safe: the isolated primary stops acting within lease − margin
	// of its last renewal (which is at or before the cut), plus the check
	// interval.
	tm := testTiming
	bound := tm.Lease.D() - tm.Margin.D() + 100*time.Millisecond
	for ip.acting()[old] != 0 {
		if time.Since(cutAt) > bound {
			t.Fatalf("isolated primary %s still acting %s after the cut (bound %s)", old, time.Since(cutAt), bound)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("isolated primary stopped acting %s after the cut", time.Since(cutAt).Round(time.Millisecond))

	nw, e2 := ip.waitPrimary(20*time.Second, majority...)
	if e2 <= e1 {
		t.Fatalf("new epoch %d not above %d", e2, e1)
	}
	t.Logf("majority elected %s epoch %d %s after the cut", nw, e2, time.Since(cutAt).Round(time.Millisecond))
	// The minority never has a primary while cut off.
	for range 100 {
		if e, ok := ip.acting()[old]; ok {
			t.Fatalf("minority node %s acting with epoch %d", old, e)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ip.heal()
	time.Sleep(2 * tm.Lease.D())
	p, e3 := ip.waitPrimary(20 * time.Second)
	if e3 < e2 {
		t.Fatalf("after heal primary %s epoch %d < %d", p, e3, e2)
	}
	// Isolate a follower instead: it must never become primary.
	var follower string
	for _, d := range ip.nodes {
		if d.Name() != p {
			follower = d.Name()
			break
		}
	}
	ip.cut(follower)
	for range 3 * int(tm.Lease.D()/(10*time.Millisecond)) {
		if _, ok := ip.acting()[follower]; ok {
			t.Fatalf("isolated follower %s became primary", follower)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, e := ip.waitPrimary(5*time.Second, p); e != e3 {
		t.Errorf("primary %s changed epoch %d→%d when a follower was cut", p, e3, e)
	}
}
