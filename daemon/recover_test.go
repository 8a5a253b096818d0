package daemon

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/quorum"
)

func recoverConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Cluster.Name = "rec"
	cfg.Node = "node1"
	cfg.DataDir = t.TempDir()
	for i := 1; i <= 3; i++ {
		gp, err := devcluster.FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Nodes = append(cfg.Nodes, config.Node{Name: "node" + strconv.Itoa(i),
			Gossip: net.JoinHostPort("127.0.0.1", strconv.Itoa(gp)), Raft: net.JoinHostPort("127.0.0.1", strconv.Itoa(gp+1))})
	}
	return cfg
}

// TestRecoverRefusals: without the admin's statement, and while another
// configured node answers in gossip (a real memberlist on loopback), a
// recovery is refused with an error naming why, and nothing is written.
func TestRecoverRefusals(t *testing.T) {
	cfg := recoverConfig(t)
	if _, _, err := Recover(cfg, RecoverRequest{}); !errors.Is(err, ErrNotDeclared) || !strings.Contains(err.Error(), "--yes-i-have-fenced-the-others") {
		t.Fatalf("without the flag: %v", err)
	}
	var peers []quorum.Peer
	for _, n := range cfg.Nodes {
		peers = append(peers, quorum.Peer{Name: n.Name, Raft: n.Raft, Gossip: n.Gossip})
	}
	m, err := quorum.JoinMembership(quorum.MembershipOptions{Self: "node3", Peers: peers}, quorum.Meta{Role: RoleSecondary})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	_, _, err = Recover(cfg, RecoverRequest{Fenced: true, GossipWait: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "node3 ("+cfg.Nodes[2].Gossip+") alive in gossip") {
		t.Fatalf("with node3 alive: %v", err)
	}
	m.Shutdown()
	// node3 gone: the refusal is now that there is nothing to recover.
	_, _, err = Recover(cfg, RecoverRequest{Fenced: true, GossipWait: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "no raft log to recover from") {
		t.Fatalf("empty data_dir: %v", err)
	}
}
