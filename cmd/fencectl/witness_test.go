package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fenced/fenced/daemon/api"
)

// TestStatusShowsKindsAndLostWitness: the table names each node's kind and
// calls out a witness that gossip no longer sees.
func TestStatusShowsKindsAndLostWitness(t *testing.T) {
	st := &api.Status{Cluster: "c", Node: "node1", Nodes: []api.NodeStatus{
		{Name: "node1", Kind: "data", Gossip: "alive", Role: "primary"},
		{Name: "node2", Kind: "data", Gossip: "alive", Role: "secondary"},
		{Name: "node3", Kind: "witness", Gossip: "dead"},
	}}
	var b bytes.Buffer
	printStatus(&b, st)
	out := b.String()
	if !strings.Contains(out, "KIND") || !strings.Contains(out, "witness") {
		t.Errorf("no kind column:\n%s", out)
	}
	if !strings.Contains(out, "Witness node3 is lost") {
		t.Errorf("lost witness not called out:\n%s", out)
	}
	st.Nodes[2].Gossip = "alive"
	b.Reset()
	printStatus(&b, st)
	if strings.Contains(b.String(), "is lost") {
		t.Errorf("a live witness called lost:\n%s", b.String())
	}
}
