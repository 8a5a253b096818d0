package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/agents"
	_ "github.com/fenced/fenced/agents/ipmi"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/quorum"
)

// inproc is a cluster of daemons in this process whose raft links run over
// raft.InmemTransport, so a test can cut them: a fault-injecting network.
type inproc struct {
	t      *testing.T
	nodes  []*daemon.Daemon
	trans  map[string]*raft.InmemTransport
	gossip map[string]*cuttableTransport
	cancel []context.CancelFunc
	done   []chan struct{}
	closed []atomic.Bool
	// Set by inprocOptions.
	res  []*recordingResource
	bmcs []*ipmisim.BMC
	log  *eventLog
}

type inprocOptions struct {
	storage bool // a recordingResource per node
	bmc     bool // a simulated BMC per node whose power-off closes the daemon
	files   bool // each node's configuration loaded from a file of its own (so it can reload)
}

func newInproc(t *testing.T, n int) *inproc { return newInprocWith(t, n, inprocOptions{}) }

func newInprocWith(t *testing.T, n int, o inprocOptions) *inproc {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Gossip.Plaintext = true // in-process: nothing but these nodes on this gossip
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
	ip := &inproc{t: t, trans: map[string]*raft.InmemTransport{}, gossip: map[string]*cuttableTransport{}, log: &eventLog{}}
	ip.closed = make([]atomic.Bool, n)
	if o.bmc {
		pw := filepath.Join(dir, "bmc-password")
		os.WriteFile(pw, []byte("secret\n"), 0o600)
		cfg.Devices = map[string]config.Device{}
		for i := range cfg.Nodes {
			b, err := ipmisim.StartBMC(ipmisim.BMCConfig{Password: "secret", PoweredOn: true,
				OnPowerOff: func() error { ip.powerOff(i); return nil }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			ip.bmcs = append(ip.bmcs, b)
			dev := cfg.Nodes[i].Name + "-bmc"
			cfg.Devices[dev] = config.Device{Agent: "ipmi", Params: map[string]string{"ip": b.Host(), "ipport": strconv.Itoa(b.Port()),
				"username": "admin", "password_file": pw, "cipher": "17", "power_timeout": "5", "login_timeout": "2", "command_timeout": "1"}}
			cfg.Nodes[i].Fence = []config.Level{{Devices: []config.DeviceRef{{Device: dev}}}}
		}
	}
	if ps := cfg.Validate(agents.Default); ps != nil {
		t.Fatal(ps)
	}
	for _, nd := range cfg.Nodes {
		_, tr := raft.NewInmemTransport(raft.ServerAddress(nd.Name))
		ip.trans[nd.Name] = tr
		host, port, _ := net.SplitHostPort(nd.Gossip)
		pn, _ := strconv.Atoi(port)
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: pn})
		if err != nil {
			t.Fatal(err)
		}
		ip.gossip[nd.Name] = newCuttable(nt)
	}
	ip.heal()
	for i, nd := range cfg.Nodes {
		nc := *cfg
		nc.Node = nd.Name
		nc.API.Socket = filepath.Join(dir, nd.Name+".sock")
		nc.DataDir = filepath.Join(dir, nd.Name)
		opts := daemon.Options{
			Logger:          testLogger(),
			Raft:            quorum.RaftOptions{Transport: ip.trans[nd.Name], InMemory: true},
			GossipTransport: ip.gossip[nd.Name],
		}
		if o.storage {
			r := &recordingResource{node: nd.Name, log: ip.log}
			ip.res = append(ip.res, r)
			opts.Resource = r
		}
		run := &nc
		if o.files {
			run = writeAndLoad(t, filepath.Join(dir, nd.Name+".yaml"), &nc)
		}
		d, err := daemon.New(run, opts)
		if err != nil {
			t.Fatal(err)
		}
		_ = i
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
		if ip.closed[i].Load() {
			continue
		}
		ip.cancel[i]()
		select {
		case <-ip.done[i]:
		case <-time.After(10 * time.Second):
			d.Close()
		}
	}
}

// cut isolates the named nodes from every other node (both directions),
// for raft and gossip alike.
func (ip *inproc) cut(minority ...string) {
	in := map[string]bool{}
	for _, m := range minority {
		in[m] = true
	}
	for a, ta := range ip.trans {
		for b := range ip.trans {
			if a != b && in[a] != in[b] {
				ta.Disconnect(raft.ServerAddress(b))
				ip.gossip[a].block(ip.gossipAddr(b))
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
		ip.gossip[a].unblockAll()
	}
}

func (ip *inproc) gossipAddr(name string) string { return ip.gossip[name].addr }

// powerOff is a BMC power-off of node i: the daemon stops at once, as if
// the machine lost power, and its storage with it.
func (ip *inproc) powerOff(i int) {
	if !ip.closed[i].CompareAndSwap(false, true) {
		return
	}
	ip.nodes[i].Close()
	if ip.res != nil {
		ip.res[i].powerLost()
	}
}

// acting returns the nodes acting as primary and their epochs.
func (ip *inproc) acting() map[string]uint64 {
	m := map[string]uint64{}
	for i, d := range ip.nodes {
		if !ip.closed[i].Load() && d.Acting() {
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

// TestPartitionStorageInProcess (takeover acceptance 7): the primary cut
// off into a minority (raft and gossip) stops its storage by lease −
// margin on its own; the majority fences it through its BMC, and only then
// starts the storage; the two never overlap.
func TestPartitionStorageInProcess(t *testing.T) {
	ip := newInprocWith(t, 3, inprocOptions{storage: true, bmc: true})
	stop := ip.monitor()
	defer stop()
	old, e1 := ip.waitPrimary(20 * time.Second)
	oldIdx := 0
	for i, d := range ip.nodes {
		if d.Name() == old {
			oldIdx = i
		}
	}
	time.Sleep(300 * time.Millisecond)
	// The majority notices the silence in a quarter of the lease and would
	// fence the isolated primary before its lease runs out; its BMC
	// ignores the first power-offs, so that the primary's own stop, by
	// lease − margin, is seen first (the takeover blocks meanwhile).
	ip.bmcs[oldIdx].SetIgnorePowerOff(true)
	cut := quorum.Now()
	ip.cut(old)
	go func() {
		time.Sleep(testTiming.Lease.D())
		ip.bmcs[oldIdx].SetIgnorePowerOff(false)
	}()

	var majority []string
	for _, d := range ip.nodes {
		if d.Name() != old {
			majority = append(majority, d.Name())
		}
	}
	nw, e2 := ip.waitPrimary(20*time.Second, majority...)
	if e2 <= e1 {
		t.Fatalf("epoch %d not above %d", e2, e1)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ip.bmcs[oldIdx].PoweredOn() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ip.bmcs[oldIdx].PoweredOn() {
		t.Fatal("the majority did not fence the isolated primary")
	}
	events := ip.log.all()
	if err := overlaps(events); err != nil {
		t.Fatal(err)
	}
	var oldStop, newStart quorum.Mono
	for _, e := range events {
		if e.node == old && e.epoch == e1 && e.kind == "stop" && oldStop == 0 {
			oldStop = e.at
		}
		if e.node == nw && e.epoch == e2 && e.kind == "start" {
			newStart = e.at
		}
	}
	tm := testTiming
	if oldStop == 0 {
		t.Fatalf("the isolated primary never stopped its storage itself: %+v", events)
	}
	if d := oldStop.Sub(cut); d > tm.Lease.D()-tm.Margin.D()+100*time.Millisecond {
		t.Errorf("isolated primary stopped its storage %s after the cut (bound lease − margin = %s)", d, tm.Lease.D()-tm.Margin.D())
	}
	if newStart == 0 || newStart < oldStop {
		t.Fatalf("new primary started at %v, old stopped at %v", newStart, oldStop)
	}
	t.Logf("old stopped its storage %s after the cut; new started it %s after the cut",
		oldStop.Sub(cut).Round(time.Millisecond), newStart.Sub(cut).Round(time.Millisecond))
}

// testLogger discards daemon logs unless FENCED_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("FENCED_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}
