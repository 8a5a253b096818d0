package daemon_test

import (
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// Right after a kill (issue 24 §2), status must not look like a split
// brain: on every poll at most one node is shown as primary without being
// marked stale, and once the dead primary is fenced it is shown as off,
// fenced by whom, not as a node of epoch 0.
func TestStatusAfterKillIsTrue(t *testing.T) {
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true, Store: true, Configure: func(cfg *config.Config) {}})
	p, _, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Let the primary's gossip (role primary) reach everyone.
	time.Sleep(2 * time.Second)
	p.Kill()
	var next string
	fencedShown := false
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, n := range c.Nodes {
			if n == p {
				continue
			}
			st, err := n.Status(ctxT(t, 5*time.Second))
			if err != nil {
				continue
			}
			var primaries []string
			for _, ns := range st.Nodes {
				if (ns.Role == "primary" || ns.Role == "primary-elect") && !ns.Stale {
					primaries = append(primaries, ns.Name)
				}
				if ns.Name == p.Name && ns.Down == "fenced" && ns.FencedBy != "" && ns.FencedAt != nil {
					fencedShown, next = true, ns.FencedBy
				}
			}
			if len(primaries) > 1 {
				t.Fatalf("%s's status shows %v as primary at once", n.Name, primaries)
			}
		}
	}
	if !fencedShown {
		t.Fatalf("the dead primary %s was never shown as fenced", p.Name)
	}
	t.Logf("%s shown off, fenced by %s", p.Name, next)
}
