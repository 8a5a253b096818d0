package main

import (
	"os/exec"
	"strings"
	"testing"
)

// fencectl is a small client of the API: it must not link the daemon's
// engines (raft, gossip, the bolt store, the agents' protocol libraries,
// metrics) nor the daemon itself.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{
		"github.com/hashicorp/raft", "github.com/hashicorp/memberlist", "go.etcd.io/bbolt", "github.com/boltdb/bolt",
		"github.com/stmcginnis/gofish", "github.com/bougou/go-ipmi", "github.com/gosnmp/gosnmp",
		"github.com/prometheus/client_golang",
		"github.com/fenced/fenced/daemon", "github.com/fenced/fenced/quorum", "github.com/fenced/fenced/daemon/config",
	}
	deps := strings.Fields(string(out))
	if len(deps) < 20 {
		t.Fatalf("go list -deps gave %d packages:\n%s", len(deps), out)
	}
	for _, dep := range deps {
		for _, bad := range forbidden {
			if dep == bad || strings.HasPrefix(dep, bad+"/") && !strings.HasPrefix(bad, "github.com/fenced/") {
				t.Errorf("fencectl links %s", dep)
			}
		}
	}
}
