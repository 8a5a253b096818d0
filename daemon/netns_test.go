package daemon_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fenced/fenced/harness/devcluster"
)

// TestPartitionNetns runs real fenced processes in network namespaces and
// partitions them with nftables: the isolated primary stops acting, the
// majority elects one new primary with a higher epoch, the minority never
// has one, and after healing there is one primary with monotonic epochs.
// Needs root (CI runs as root).
func TestPartitionNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("needs root")
		}
		t.Fatal("needs root for network namespaces (run as root, or -short)")
	}
	ns, err := devcluster.NewNetns(fmt.Sprintf("fdt%d", os.Getpid()%10000), 3, os.Getpid()%250)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	c := startCluster(t, devcluster.Options{Nodes: 3, Hosts: ns.Hosts, Wrap: ns.Wrap})
	watchSafety(t, c)
	old, e1, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	if err := ns.Isolate(old.Index); err != nil {
		t.Fatal(err)
	}
	bound := testTiming.Lease.D() - testTiming.Margin.D() + 300*time.Millisecond
	for {
		st, err := old.Status(context.Background())
		if err == nil && !st.Self.Acting {
			break
		}
		if time.Since(cut) > bound {
			t.Fatalf("isolated primary %s still acting after %s", old.Name, time.Since(cut))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("isolated primary stopped acting %s after the cut", time.Since(cut).Round(time.Millisecond))
	nw, e2, err := c.Primary(ctxT(t, 30*time.Second), old)
	if err != nil {
		t.Fatal(err)
	}
	if e2 <= e1 {
		t.Fatalf("epoch %d not above %d", e2, e1)
	}
	t.Logf("majority elected %s epoch %d, %s after the cut", nw.Name, e2, time.Since(cut).Round(time.Millisecond))
	for range 50 {
		if st, err := old.Status(context.Background()); err == nil && st.Self.Acting {
			t.Fatalf("minority node acting with epoch %d", st.Self.Epoch)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := ns.Heal(old.Index); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * testTiming.Lease.D())
	_, e3, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if e3 < e2 {
		t.Fatalf("after heal epoch %d < %d", e3, e2)
	}
	st, err := old.Status(context.Background())
	if err != nil || st.Self.KnownEpoch < e3 {
		t.Fatalf("healed node knows epoch %d, want ≥ %d (%v)", st.Self.KnownEpoch, e3, err)
	}
}
