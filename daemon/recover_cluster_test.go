package daemon_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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

	// The two declared gone come back on their old data, together: a
	// majority of the old voting set. Each learns of the newer one from
	// gossip as it starts, marks its data and stops before acting.
	var gone []*devcluster.Node
	for _, n := range c.Nodes {
		if n != s {
			gone = append(gone, n)
		}
	}
	before, _ := c.StoreEntries()
	for _, n := range gone {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range gone {
		if !n.Wait(15 * time.Second) {
			t.Fatalf("%s, started on the data of the voting set declared gone, still runs", n.Name)
		}
		if n.ExitErr() == nil {
			t.Fatalf("%s stopped with no error", n.Name)
		}
		if log, _ := os.ReadFile(n.Log); !strings.Contains(string(log), "declared gone") {
			t.Fatalf("%s's log does not say why it stopped", n.Name)
		}
	}
	after, _ := c.StoreEntries()
	for _, en := range after[len(before):] {
		if en.Node != s.Name {
			t.Fatalf("%s wrote while the recovered set ran: %+v", en.Node, en)
		}
	}
	// Started again on that data, it refuses at once.
	out, err = exec.CommandContext(ctx, fencedBin, "run", "--config", p.Config).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "belongs to a voting set that was replaced") {
		t.Fatalf("%s restarted on superseded data: %v\n%s", p.Name, err, out)
	}
	if st, err := s.Status(ctx); err != nil || st.Primary.Node != s.Name || st.Primary.Epoch != got || !st.Quorum.Have || st.Quorum.Configured != 1 {
		t.Fatalf("recovered node's status after the old nodes came back: %+v %+v (%v)", st.Primary, st.Quorum, err)
	}

	// Wiped, they join the recovered set as new members; the next
	// takeover (the survivor killed, its BMC fences it) continues the
	// epochs above the recovery's.
	for _, n := range gone {
		dir := filepath.Join(c.Opts.Dir, n.Name+"-data")
		if err := os.Rename(dir, dir+".declared-gone"); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	// The leader adds them one at a time; the set is whole once every
	// node's own log names three voters (the survivor's latest
	// configuration may name one whose addition is not replicated yet:
	// killed then, the other two could not elect).
	for _, n := range c.Nodes {
		for {
			st, err := n.Status(ctx)
			if err == nil && st.Quorum.Configured == 3 && st.Quorum.Reachable == 3 && st.Quorum.Have {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s: the wiped nodes did not join the recovered voting set: %+v (%v)", n.Name, st.Quorum, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	s.Kill()
	np, ne, err := c.Primary(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if ne <= got {
		t.Fatalf("takeover after the join at epoch %d, not above the recovery's %d", ne, got)
	}
	if _, err := c.WaitWrite(ctx, np.Name, ne); err != nil {
		t.Fatal(err)
	}
	t.Logf("joined, then took over from the survivor: %s at epoch %d", np.Name, ne)
}
