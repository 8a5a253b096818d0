package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/storage/tokenstore"
	"github.com/fenced/fenced/harness/devcluster"
)

var fencedBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fenced-bin-")
	if err != nil {
		panic(err)
	}
	fencedBin = filepath.Join(dir, "fenced")
	out, err := exec.Command("go", "build", "-tags", "faultinject", "-o", fencedBin, "../cmd/fenced").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building fenced: %v\n%s", err, out)
		os.Exit(1)
	}
	// The storage writer the nodes' hooks run (devcluster finds it beside
	// fenced).
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "fenced-lab"), "../cmd/fenced-lab").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building fenced-lab: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func ms(n int) config.Duration { return config.Duration(time.Duration(n) * time.Millisecond) }

// testTiming keeps tests fast while tolerating a loaded 2-core CI machine.
var testTiming = config.Timing{Heartbeat: ms(150), Lease: ms(1500), Margin: ms(150), Grace: ms(1000), FenceTimeout: ms(5000)}

// startCluster starts a cluster of real fenced processes (Dir, Bin and
// Timing default to the test's), and on cleanup kills it, checks that no
// BMC password reached a log and that the storage log is safe, and shows
// the logs of a failed test.
func startCluster(t *testing.T, o devcluster.Options) *devcluster.Cluster {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Bin == "" {
		o.Bin = fencedBin
	}
	if o.Timing == (config.Timing{}) {
		o.Timing = testTiming
	}
	c, err := devcluster.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if leaks := c.LeakedSecrets(); len(leaks) > 0 {
			t.Errorf("BMC password found in logs: %v", leaks)
		}
		var entries []tokenstore.Entry
		if o.Store {
			entries, _ = c.StoreEntries()
			if err := tokenstore.Check(entries); err != nil {
				t.Errorf("STORAGE SAFETY: %v", err)
			}
		}
		if t.Failed() {
			for _, nd := range c.Nodes {
				b, _ := os.ReadFile(nd.Log)
				t.Logf("---- %s log (last 3000 bytes) ----\n%s", nd.Name, tail(string(b), 3000))
			}
			for _, tn := range tokenstore.Tenures(entries) {
				t.Logf("tenure %+v", tn)
			}
		}
	})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func newCluster(t *testing.T, n int, configure func(*config.Config)) *devcluster.Cluster {
	return startCluster(t, devcluster.Options{Nodes: n, Configure: configure})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// safety watches every running node's status and fails the test if two
// nodes act as primary under the same epoch, or if a node acts under an
// epoch lower than one that already acted (a stale primary).
type safety struct {
	t      *testing.T
	c      *devcluster.Cluster
	mu     sync.Mutex
	max    uint64
	byEpoc map[uint64]string
	skip   map[string]bool
	stop   chan struct{}
	done   chan struct{}
}

func watchSafety(t *testing.T, c *devcluster.Cluster) *safety {
	s := &safety{t: t, c: c, byEpoc: map[uint64]string{}, skip: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	t.Cleanup(s.Stop)
	return s
}

func (s *safety) Stop() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *safety) loop() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(15 * time.Millisecond):
		}
		for _, n := range s.c.Nodes {
			if !n.Running() {
				continue
			}
			st, err := n.Status(context.Background())
			if err != nil || !st.Self.Acting {
				continue
			}
			s.mu.Lock()
			e := st.Self.Epoch
			if owner, ok := s.byEpoc[e]; ok && owner != n.Name {
				s.t.Errorf("SAFETY: %s and %s both acted as primary with epoch %d", owner, n.Name, e)
			}
			if e < s.max {
				s.t.Errorf("SAFETY: %s acted as primary with stale epoch %d after epoch %d acted", n.Name, e, s.max)
			}
			s.byEpoc[e] = n.Name
			if e > s.max {
				s.max = e
			}
			s.mu.Unlock()
		}
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestFailover3(t *testing.T) { testFailover(t, 3) }
func TestFailover5(t *testing.T) { testFailover(t, 5) }

// testFailover: exactly one primary; SIGKILL it; a new one with a higher
// epoch; the killed node restarted rejoins as a secondary and never acts.
func testFailover(t *testing.T, n int) {
	c := newCluster(t, n, nil)
	watchSafety(t, c)
	p, e1, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("primary %s epoch %d", p.Name, e1)
	p.Kill()
	killed := time.Now()
	q, e2, err := c.Primary(ctxT(t, 20*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new primary %s epoch %d after %s", q.Name, e2, time.Since(killed).Round(time.Millisecond))
	if q == p || e2 <= e1 {
		t.Fatalf("new primary %s epoch %d, old %s epoch %d", q.Name, e2, p.Name, e1)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	// Watch the restarted node from its first answer on.
	deadline := time.Now().Add(4 * time.Second)
	answered := false
	for time.Now().Before(deadline) {
		st, err := p.Status(context.Background())
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		answered = true
		if st.Self.Acting || st.Self.Role == "primary" || st.Self.Epoch != 0 {
			t.Fatalf("restarted %s believes it is primary: role %s epoch %d", p.Name, st.Self.Role, st.Self.Epoch)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !answered {
		t.Fatalf("restarted %s never answered", p.Name)
	}
	st, err := p.Status(context.Background())
	if err != nil || st.Self.KnownEpoch < e2 || st.Primary.Node != q.Name {
		t.Fatalf("restarted %s did not learn the epoch: %+v %v", p.Name, st.Primary, err)
	}
	if r, _, err := c.Primary(ctxT(t, 5*time.Second)); err != nil || r != q {
		t.Fatalf("after rejoin: primary %v, %v (want %s)", r, err, q.Name)
	}
	// READY (the "joined the cluster" line) came only once the state was
	// loaded: it names the cluster's epoch, not 0.
	if e := joinedEpoch(t, p); e < e2 {
		t.Fatalf("restarted %s said it joined the cluster at epoch %d, the cluster is at %d", p.Name, e, e2)
	}
}

// joinedEpoch returns the epoch of n's last "joined the cluster" line.
func joinedEpoch(t *testing.T, n *devcluster.Node) uint64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(n.Log)
		lines := strings.Split(string(b), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if !strings.Contains(lines[i], "joined the cluster") {
				continue
			}
			for _, f := range strings.Fields(lines[i]) {
				if v, ok := strings.CutPrefix(f, "epoch="); ok {
					e, _ := strconv.ParseUint(v, 10, 64)
					return e
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never logged that it joined the cluster", n.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplacedDisk: a follower whose data directory is lost (a replaced
// disk) starts empty, bootstraps with the configured voters like any
// first start, and rejoins from the leader's log: it learns the current
// epoch, and a later failover still grants a higher one.
func TestReplacedDisk(t *testing.T) {
	c := newCluster(t, 3, nil)
	watchSafety(t, c)
	p, e1, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Other(p)
	f.Kill()
	data := filepath.Join(c.Opts.Dir, f.Name+"-data")
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := f.Status(context.Background())
		if err == nil && st.Self.KnownEpoch >= e1 && st.Primary.Node == p.Name {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s with a new disk never caught up: %+v %v", f.Name, st.Primary, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if entries, err := os.ReadDir(data); err != nil || len(entries) == 0 {
		t.Fatalf("%s kept no state on its new disk: %v %v", f.Name, entries, err)
	}
	p.Kill()
	q, e2, err := c.Primary(ctxT(t, 20*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	if e2 <= e1 {
		t.Fatalf("after the failover: %s epoch %d, not above %d", q.Name, e2, e1)
	}
}

// TestPause: SIGSTOP the primary past its lease; the others elect a new
// primary; the resumed node never acts again without re-confirming.
func TestPause(t *testing.T) {
	c := newCluster(t, 3, nil)
	watchSafety(t, c)
	p, e1, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	q, e2, err := c.Primary(ctxT(t, 20*time.Second), p)
	if err != nil {
		t.Fatal(err)
	}
	if e2 <= e1 {
		t.Fatalf("new epoch %d not above %d", e2, e1)
	}
	time.Sleep(testTiming.Lease.D())
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// From its first answer after resuming, the old primary must not act.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		st, err := p.Status(context.Background())
		if err == nil && st.Self.Acting {
			t.Fatalf("resumed %s acts as primary with epoch %d (new primary %s has %d)", p.Name, st.Self.Epoch, q.Name, e2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	logb, _ := os.ReadFile(p.Log)
	if !strings.Contains(string(logb), "demoting") {
		t.Errorf("resumed %s did not log its demotion", p.Name)
	}
}

// TestFullRestart: every node killed and restarted; the epoch continues
// above every epoch used before.
func TestFullRestart(t *testing.T) {
	c := newCluster(t, 3, nil)
	_, e1, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var maxKnown uint64
	for _, n := range c.Nodes {
		if st, err := n.Status(context.Background()); err == nil && st.Self.KnownEpoch > maxKnown {
			maxKnown = st.Self.KnownEpoch
		}
	}
	c.Close()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	_, e2, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if e2 <= e1 || e2 <= maxKnown {
		t.Fatalf("after full restart epoch %d, before %d (max known %d)", e2, e1, maxKnown)
	}
}

// TestGracefulHandover: SIGTERM on the primary hands over at once (no lease
// wait: the release is committed) and the process exits 0.
func TestGracefulHandover(t *testing.T) {
	c := newCluster(t, 3, nil)
	watchSafety(t, c)
	p, e1, err := c.Primary(ctxT(t, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.Wait(10 * time.Second) {
		t.Fatal("did not exit after SIGTERM")
	}
	if err := p.ExitErr(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	q, e2, err := c.Primary(ctxT(t, 10*time.Second), p)
	if err != nil || e2 <= e1 {
		t.Fatalf("handover: %v epoch %d", err, e2)
	}
	st, _ := q.Status(context.Background())
	if st.Primary.Previous != p.Name {
		t.Errorf("previous holder %q, want %s", st.Primary.Previous, p.Name)
	}
}
