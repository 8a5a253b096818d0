package daemon_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/storage/tokenstore"
	"github.com/fenced/fenced/daemon/watchdog"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// The takeover paths that need no fence: storage that checks tokens, and
// the watchdog level.

// waitBlocked waits until n reports the takeover blocked.
func waitBlocked(t *testing.T, n *devcluster.Node) daemon.Status {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := n.Status(ctxT(t, 5*time.Second))
		if err == nil && st.Primary.Blocked {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("takeover never blocked: %+v %v", st.Primary, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tokenCluster: three nodes without fence devices whose storage (the
// token-checking store) is declared to check tokens.
func tokenCluster(t *testing.T, checks bool) *devcluster.Cluster {
	return startCluster(t, devcluster.Options{Nodes: 3, Store: true, Configure: func(c *config.Config) {
		c.Storage.ChecksTokens = checks
	}})
}

// recordOf returns the history's record of kind for target, if any.
func recordOf(t *testing.T, n *devcluster.Node, target, kind string) (fencing.Record, bool) {
	for _, r := range history(t, n, target) {
		if r.Kind == kind && r.Outcome == fencing.OutcomeSuccess {
			return r, true
		}
	}
	return fencing.Record{}, false
}

// TestTokenStorageKillTakeover: no fence devices, storage that checks
// tokens: a killed primary is taken over once its lease has certainly
// ended, and its stop deadline with it — never earlier — and the history
// says how.
func TestTokenStorageKillTakeover(t *testing.T) {
	c := tokenCluster(t, true)
	p, e1 := primaryWriting(t, c)
	p.Kill()
	killed := time.Now()
	q, e2 := successorWriting(t, c, p, e1)
	at, err := c.WaitWrite(ctxT(t, time.Second), q.Name, e2)
	if err != nil {
		t.Fatal(err)
	}
	// Its last renewal started at most a heartbeat before the kill, so its
	// lease ran until then + lease − margin and its stop until grace after
	// that; the successor waits until then + lease + margin + grace on its
	// own clock (issue 21, item 2: it waited lease + margin).
	if least := testTiming.Lease.D() + testTiming.Margin.D() + testTiming.Grace.D() - testTiming.Heartbeat.D(); at.Sub(killed) < least {
		t.Fatalf("storage started %s after the kill, before the old lease and its stop had certainly ended (%s)", at.Sub(killed), least)
	}
	r, ok := recordOf(t, q, p.Name, fencing.KindExpiry)
	if !ok || !strings.Contains(r.Reason, "lease expiry") || r.Executor != q.Name || r.Epoch != e2 {
		t.Fatalf("history lacks the expiry of %s by %s at %d: %+v", p.Name, q.Name, e2, history(t, q, p.Name))
	}
	t.Logf("kill → storage started on the successor: %s", at.Sub(killed).Round(time.Millisecond))
}

// TestTokenStoragePauseTakeover: the paused primary's lease ends, the
// successor takes over without a fence, and the paused node's writes,
// when it resumes, are refused by the store (startCluster's cleanup checks
// that none with a stale epoch was accepted).
func TestTokenStoragePauseTakeover(t *testing.T) {
	c := tokenCluster(t, true)
	p, e1 := primaryWriting(t, c)
	p.Signal(syscall.SIGSTOP)
	q, e2 := successorWriting(t, c, p, e1)
	resumed := time.Now()
	p.Signal(syscall.SIGCONT)
	time.Sleep(2 * time.Second)
	late := 0
	entries, _ := c.StoreEntries()
	for _, e := range entries {
		if e.Node == p.Name && e.Time.After(resumed) {
			if e.Result == tokenstore.Accepted {
				t.Errorf("a late write of %s was accepted: %+v", p.Name, e)
			}
			late++
		}
	}
	t.Logf("%d late writes of the resumed old primary, all refused", late)
	if st, _ := p.Status(ctxT(t, 5*time.Second)); st.Self.Acting {
		t.Errorf("%s acts again after resuming", p.Name)
	}
	if _, ok := recordOf(t, q, p.Name, fencing.KindExpiry); !ok {
		t.Errorf("no expiry of %s recorded at %d", p.Name, e2)
	}
}

// TestTokensWithUncheckedResourceBlocks (issue 21, item 2): the storage
// checks tokens, but the group also runs a resource that checks none (an
// OCF agent standing for a floating address). A killed holder leaves that
// resource running, and nothing tells a successor that its stop ran: with
// no fence devices, the takeover blocks until an admin confirms, and is
// never taken by lease expiry.
func TestTokensWithUncheckedResourceBlocks(t *testing.T) {
	needOCF(t, "Dummy")
	dir := t.TempDir()
	c := startCluster(t, devcluster.Options{Nodes: 3, Store: true, Dir: dir, Configure: func(cfg *config.Config) {
		h := cfg.Storage.Hooks
		cfg.Storage = config.Storage{ChecksTokens: true, MonitorInterval: cfg.Storage.MonitorInterval}
		cfg.Resources = []config.Resource{{Name: "data", Hooks: &h}, {Name: "vip", OCF: "heartbeat:Dummy"}}
	}, NodeConfig: func(_ int, cfg *config.Config) {
		cfg.Resources = slices.Clone(cfg.Resources)
		cfg.Resources[1].NodeParams = map[string]string{"state": filepath.Join(dir, cfg.Node+"-vip.state")}
	}})
	p, _ := primaryWriting(t, c)
	p.Kill()
	other := c.Other(p)
	waitBlocked(t, other)
	time.Sleep(2 * (testTiming.Lease.D() + testTiming.Grace.D())) // long past every lease and stop
	if w := writers(c, time.Now().Add(-time.Hour)); len(w) != 1 {
		t.Fatalf("taken over beside a resource that checks no tokens: %v", w)
	}
	for _, r := range history(t, other, p.Name) {
		if r.Kind == fencing.KindExpiry {
			t.Fatalf("expiry recorded with a resource that checks no tokens: %+v", r)
		}
	}
}

// TestNoTokensNoDevicesBlocks: the same without checks_tokens blocks, as
// before: nobody mounts until an admin confirms.
func TestNoTokensNoDevicesBlocks(t *testing.T) {
	c := tokenCluster(t, false)
	p, _ := primaryWriting(t, c)
	p.Kill()
	other := c.Other(p)
	if st := waitBlocked(t, other); !strings.Contains(st.Primary.Reason, "no fence devices") {
		t.Errorf("blocked reason: %q", st.Primary.Reason)
	}
	time.Sleep(2 * testTiming.Lease.D()) // long past every lease
	if w := writers(c, time.Now().Add(-time.Hour)); len(w) != 1 {
		t.Fatalf("someone else mounted without tokens, devices or a confirmation: %v", w)
	}
	for _, r := range history(t, other, p.Name) {
		if r.Kind == fencing.KindExpiry {
			t.Fatalf("expiry recorded without checks_tokens: %+v", r)
		}
	}
}

// watchdogCluster: three nodes fenced through a BMC, then the watchdog
// level; each node's watchdog.device is a stand-in that kills the node's
// processes when not fed in time. closing is what the stand-in says it
// does at close ("magicclose" or "none": see watchdog.FaultOptionsEnv);
// "" leaves the watchdog unconfigured (so nothing is advertised).
func watchdogCluster(t *testing.T, timeout time.Duration, closing string) (*devcluster.Cluster, []*devcluster.StandInWatchdog) {
	withDevice := closing != ""
	t.Setenv(watchdog.FaultOptionsEnv, closing)
	dogs := make([]*devcluster.StandInWatchdog, 3)
	var c *devcluster.Cluster
	dir := t.TempDir()
	c = startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Store: true, Dir: dir,
		Configure: func(cfg *config.Config) {
			for i := range cfg.Nodes {
				cfg.Nodes[i].Fence = append(cfg.Nodes[i].Fence, config.Level{Watchdog: true})
			}
		},
		NodeConfig: func(i int, nc *config.Config) {
			if !withDevice {
				return
			}
			w, err := devcluster.NewStandInWatchdog(filepath.Join(dir, fmt.Sprintf("watchdog%d", i)), timeout, func() { c.Nodes[i].Kill() })
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			dogs[i] = w
			nc.Watchdog = config.Watchdog{Device: w.Path, Timeout: config.Duration(timeout)}
		}})
	return c, dogs
}

// TestWatchdogLevel: the primary's BMC is dead and the primary paused: no
// fence can succeed, so the successor waits out the lease plus the
// watchdog timeout the primary advertised. The stand-in watchdog, no
// longer fed, kills the old primary first; the successor then takes over,
// and the history says "confirmed by watchdog timeout".
func TestWatchdogLevel(t *testing.T) {
	const wd = 2 * time.Second
	c, dogs := watchdogCluster(t, wd, "magicclose")
	p, e1 := primaryWriting(t, c)
	if !dogs[p.Index].Armed() {
		t.Fatal("the primary's watchdog is not armed")
	}
	c.BMCs[p.Index].Close() // its BMC dies with it
	p.Signal(syscall.SIGSTOP)
	paused := time.Now()
	q, e2 := successorWriting(t, c, p, e1)
	at, _ := c.WaitWrite(ctxT(t, time.Second), q.Name, e2)
	fired := dogs[p.Index].Fired()
	switch {
	case fired.IsZero():
		t.Fatal("the old primary's watchdog never fired")
	case !fired.Before(at):
		t.Fatalf("storage started on %s at %s, before the old primary's watchdog fired at %s", q.Name, at, fired)
	}
	if least := testTiming.Lease.D() + testTiming.Margin.D() + wd - testTiming.Heartbeat.D(); at.Sub(paused) < least {
		t.Fatalf("taken over %s after the pause, before lease + margin + watchdog (%s)", at.Sub(paused), least)
	}
	r, ok := recordOf(t, q, p.Name, fencing.KindWatchdog)
	if !ok || !strings.Contains(r.Reason, "watchdog timeout") {
		t.Fatalf("history lacks the watchdog confirmation: %+v", history(t, q, p.Name))
	}
	if dogs[q.Index] == nil || !dogs[q.Index].Armed() {
		t.Error("the new primary's watchdog is not armed")
	}
	t.Logf("pause → watchdog fired %s, → storage started %s", fired.Sub(paused).Round(time.Millisecond), at.Sub(paused).Round(time.Millisecond))
}

// TestWatchdogDisarmedAfterHandover: a clean handover disarms the old
// primary's watchdog (magic close), so it never resets a node that stopped
// in time.
func TestWatchdogDisarmedAfterHandover(t *testing.T) {
	c, dogs := watchdogCluster(t, 2*time.Second, "magicclose")
	p, e1 := primaryWriting(t, c)
	p.Signal(syscall.SIGTERM)
	successorWriting(t, c, p, e1)
	time.Sleep(3 * time.Second)
	if !dogs[p.Index].Fired().IsZero() {
		t.Fatal("the watchdog of a node that handed over cleanly fired")
	}
	if dogs[p.Index].Armed() {
		t.Fatal("still armed after a clean handover")
	}
}

// TestWatchdogLevelNeedsAdvertisement: the same topology on nodes without
// a watchdog device: nothing was advertised, so the level never passes and
// the takeover blocks.
func TestWatchdogLevelNeedsAdvertisement(t *testing.T) {
	c, _ := watchdogCluster(t, 0, "")
	p, _ := primaryWriting(t, c)
	c.BMCs[p.Index].Close()
	p.Signal(syscall.SIGSTOP)
	waitBlocked(t, c.Other(p))
	time.Sleep(2 * testTiming.Lease.D()) // long past every lease and watchdog
	if w := writers(c, time.Now().Add(-time.Hour)); len(w) != 1 {
		t.Fatalf("mounted past a watchdog level with no watchdog advertised: %v", w)
	}
}

// TestWatchdogWithoutMagicCloseNotAdvertised: a driver without magic
// close (and no nowayout) stops its timer when the daemon's file closes:
// a killed daemon would leave the node running. Such a watchdog is armed
// but never advertised, status says why, and a takeover from a killed
// primary whose BMC is dead blocks instead of trusting it.
func TestWatchdogWithoutMagicCloseNotAdvertised(t *testing.T) {
	c, dogs := watchdogCluster(t, 2*time.Second, "none")
	p, _ := primaryWriting(t, c)
	if !dogs[p.Index].Armed() {
		t.Fatal("the primary's watchdog is not armed")
	}
	st, err := p.Status(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if wd := st.Self.Watchdog; wd == nil || !wd.Armed || wd.Advertised || !strings.Contains(wd.Note, "no magic close") {
		t.Fatalf("status: watchdog %+v", st.Self.Watchdog)
	}
	c.BMCs[p.Index].Close()
	p.Kill()
	waitBlocked(t, c.Other(p))
	time.Sleep(2 * testTiming.Lease.D())
	if r, ok := recordOf(t, c.Other(p), p.Name, fencing.KindWatchdog); ok {
		t.Fatalf("taken over through a watchdog that stops at close: %+v", r)
	}
}
