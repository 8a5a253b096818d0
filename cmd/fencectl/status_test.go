package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/api"
)

// incidentStatus is what the surviving data node of a 2 + witness cluster
// answers once the witness and the primary died (issue 24), with a fence
// of the dead primary running and every field the status may carry set.
func incidentStatus() *api.Status {
	granted := time.Now().Add(-2 * time.Minute).UTC()
	started := time.Now().Add(-4 * time.Second).UTC()
	return &api.Status{SchemaVersion: api.SchemaVersion, Cluster: "c", Node: "node2",
		Quorum: api.QuorumStatus{Configured: 3, Seen: 2, Reachable: 1, Needed: 2, Leader: "node1", LeaderSilentSec: 4.2},
		Primary: api.PrimaryInfo{Node: "node1", Epoch: 7, State: "mounted", LastKnown: true, Since: &granted,
			Change: "took over from node2, fenced by node1 (off, read back)"},
		Self: api.SelfStatus{Role: "secondary", Raft: "candidate", Term: 9, KnownEpoch: 7, Keys: []string{"4f2067cb", "6fa8e2b2"}},
		Nodes: []api.NodeStatus{
			{Name: "node1", Kind: "data", Gossip: "suspect", Role: "primary", Epoch: 7, Stale: true, Version: "x", Keys: []string{"6fa8e2b2", "4f2067cb"}},
			{Name: "node2", Kind: "data", Gossip: "alive", Role: "secondary", Epoch: 7, Standby: true, Version: "x", Keys: []string{"4f2067cb", "6fa8e2b2"}},
			{Name: "node3", Kind: "witness", Gossip: "dead", Version: "x"},
		},
		PendingFences: []api.PendingFence{{ID: 4, Kind: "fence", Target: "node1", Action: "off", Executor: "node2", Epoch: 8, Runs: 3,
			Started: &started, ElapsedSec: 4.2, LastAttempt: &api.FenceAttempt{Level: 1, Device: "node1-bmc", Try: 1, Result: "failed", ReadBack: "on"},
			Steps: []api.FenceStep{{Level: 1, Device: "node1-bmc", Try: 2, Step: "read-back", ForSec: 0.3}}}},
		Resources: []api.ResourcePlace{
			{Name: "ip", Kind: "ocf:heartbeat:IPaddr2", On: []api.ResourceOn{{Node: "node1", State: "running", Stale: true}}},
			{Name: "db", Kind: "mount", On: []api.ResourceOn{{Node: "node1", State: "unknown"}}},
			{Name: "app", On: []api.ResourceOn{}},
		},
	}
}

// Without quorum the Primary line is last known, never current; the
// quorum line says what is reached and that no leader is heard; running
// fences, the last change of primacy, standby and where each resource
// runs are shown (issue 24).
func TestStatusIncident(t *testing.T) {
	st := incidentStatus()
	var b bytes.Buffer
	printStatus(&b, st)
	out := b.String()
	for _, want := range []string{
		"Quorum:   NO — 1 of 3 votes reachable, 2 needed, NO LEADER HEARD (node1 silent for 4s); gossip lists 2 alive or suspect\n",
		"Primary:  LAST KNOWN, UNCONFIRMED (this node has no quorum): node1, epoch 7, mounted\n",
		"epoch 7 granted to node1 at ",
		"(2m ago): took over from node2, fenced by node1 (off, read back)",
		"Fencing:  fence of node1 (off) by node2, epoch 8: RUNNING for 4.2s, run 3; device node1-bmc (level 1), try 2: read-back for 300ms\n",
		"secondary (standby)",
		"ip (ocf:heartbeat:IPaddr2): running on node1?\n",
		"db (mount): MAY STILL RUN (node gone, not confirmed stopped) on node1\n",
		"app: stopped everywhere\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Primary:  node1, epoch 7, mounted") {
		t.Errorf("a dead primary shown as current without quorum:\n%s", out)
	}

	// With quorum: the primary as it is, the leader named.
	st.Quorum = api.QuorumStatus{Configured: 3, Seen: 3, Reachable: 3, Needed: 2, Leader: "node2", LeaderHeard: true, Have: true}
	st.Primary.LastKnown = false
	st.PendingFences[0].Steps = nil
	b.Reset()
	printStatus(&b, st)
	out = b.String()
	for _, want := range []string{"Quorum:   yes — 3 of 3 votes reachable, 2 needed, leader node2\n", "Primary:  node1, epoch 7, mounted\n",
		"RUNNING for 4.2s, run 3; last: device node1-bmc (level 1), try 1 failed\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	// --watch's change lines carry no times (they change every poll).
	_, lines := statusLines(incidentStatus())
	if l := lines["quorum"]; l != "quorum: NO — 1 of 3 votes reachable, 2 needed, NO LEADER HEARD (node1 silent); gossip lists 2 alive or suspect" {
		t.Errorf("watch quorum line %q", l)
	}
	if l := lines["fence fence of node1 (off) by node2, epoch 8"]; !strings.HasSuffix(l, "RUNNING, run 3; device node1-bmc (level 1), try 2: read-back") {
		t.Errorf("watch fence line %q (lines %v)", l, lines)
	}
}

// Every field of the status, set, is in docs/schema/status.json.
func TestStatusSchemaAllFields(t *testing.T) {
	b, err := json.Marshal(incidentStatus())
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "status.json", string(b))
}

// TestClusterVersionLine: the status says the cluster version, and while
// it waits, who holds it back.
func TestClusterVersionLine(t *testing.T) {
	for _, tc := range []struct {
		v    *api.ClusterVersion
		want string
	}{
		{nil, ""},
		{&api.ClusterVersion{Committed: 2, Supported: 2}, "cluster version: 2"},
		{&api.ClusterVersion{Committed: 1, Supported: 2, HeldBy: []string{"node3 runs an older fenced"}},
			"cluster version: 1 (node3 runs an older fenced; 2 once every voter advertises it)"},
		{&api.ClusterVersion{Committed: 2, Supported: 2, Halted: "replicated entry 9 needs fenced cluster version 3"},
			"cluster version: 2; THIS NODE HALTED: replicated entry 9 needs fenced cluster version 3"},
	} {
		if got := clusterVersionLine(tc.v); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.v, got, tc.want)
		}
	}
}

// The KEYS column shows each node's key IDs, the primary first; a node
// whose primary another node in gossip lacks is named (a rotation step
// begun before the one before it ended everywhere).
func TestStatusKeys(t *testing.T) {
	st := incidentStatus()
	var b bytes.Buffer
	printStatus(&b, st)
	out := b.String()
	if !strings.Contains(out, "KEYS") || !strings.Contains(out, "6fa8e2b2,4f2067cb") || !strings.Contains(out, "4f2067cb,6fa8e2b2") {
		t.Errorf("status lacks the keys:\n%s", out)
	}
	if strings.Contains(out, "does not hold") {
		t.Errorf("a warning while every node holds every primary:\n%s", out)
	}
	st.Nodes[1].Keys = []string{"4f2067cb"} // node2 dropped node1's primary
	b.Reset()
	printStatus(&b, st)
	if want := "! node1 encrypts with key 6fa8e2b2, which node2 does not hold: add it there before making it first\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status lacks %q:\n%s", want, b.String())
	}
	// A node gossip does not see is no part of it.
	st.Nodes[0].Gossip = "dead"
	b.Reset()
	printStatus(&b, st)
	if strings.Contains(b.String(), "does not hold") {
		t.Errorf("a warning about a dead node:\n%s", b.String())
	}
}
