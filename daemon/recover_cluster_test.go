package daemon_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/storage/tokenstore"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/quorum"
)

// TestRecoverLostMajority: 3 real nodes, the primary and one more killed
// with their BMCs dead (they cannot be fenced); `fenced recover` on the
// survivor makes it primary alone at an epoch RecoverEpochGap above, the
// storage accepts it, and a write from the old primary's epoch is refused.
func TestRecoverLostMajority(t *testing.T) {
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Store: true})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	p, e, err := c.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitWrite(ctx, p.Name, e); err != nil {
		t.Fatal(err)
	}
	s := c.Other(p)
	for _, n := range c.Nodes {
		if n != s {
			c.BMCs[n.Index].Close()
			n.Kill()
		}
	}
	s.Kill()
	out, err := exec.CommandContext(ctx, fencedBin, "recover", "--config", s.Config, "--yes-i-have-fenced-the-others", "--gossip-wait", "1s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "recovered: "+s.Name+" is the only voter") {
		t.Fatalf("fenced recover: %v\n%s", err, out)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	var got uint64
	for got == 0 {
		entries, _ := c.StoreEntries()
		for _, en := range entries {
			if en.Node == s.Name && en.Result == tokenstore.Accepted && en.Epoch > e+quorum.RecoverEpochGap {
				got = en.Epoch
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no write accepted from %s above epoch %d", s.Name, e+quorum.RecoverEpochGap)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The old primary, resurrected on its old epoch, is refused by the store.
	if en, _ := c.Store.Store.Write(tokenstore.WriteRequest{Node: p.Name, Epoch: e, Seq: 1 << 30}); en.Result == tokenstore.Accepted {
		t.Fatalf("write from %s at old epoch %d accepted after recovery at %d", p.Name, e, got)
	}
	t.Logf("recovered: epoch %d → %d on %s", e, got, s.Name)
}
