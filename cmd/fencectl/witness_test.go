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

// TestStatusShowsUncleanAndWatchdog: a node that may still run the group
// and could not reset itself is called out with what clears it; a watchdog
// armed but not advertised says why.
func TestStatusShowsUncleanAndWatchdog(t *testing.T) {
	st := &api.Status{Cluster: "c", Node: "node1",
		Primary: api.PrimaryInfo{Node: "node2", Epoch: 4, State: "mounted", Unconfirmed: map[string]uint64{"node3": 3, "node2": 4},
			Unclean: map[string]string{"node3": "its stop failed and it could not reset itself: umount: target is busy"}},
		Self: api.SelfStatus{Role: "secondary", Watchdog: &api.WatchdogStatus{Device: "/dev/watchdog", Armed: true,
			Note: "the driver has no magic close and nowayout is off"}}}
	var b bytes.Buffer
	printStatus(&b, st)
	out := b.String()
	for _, want := range []string{"UNCLEAN:  node3 may still run the group (its stop failed", "`fencectl confirm node3 --yes`",
		"watchdog /dev/watchdog armed, NOT ADVERTISED for the watchdog level: the driver has no magic close"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
