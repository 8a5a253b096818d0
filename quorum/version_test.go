package quorum

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/stonith/fencing"
)

// TestClusterVersionGate: at cluster version 1 nothing of version 2 may
// be proposed but the entry that raises the version; once it is
// committed, it may; the version never goes down.
func TestClusterVersionGate(t *testing.T) {
	f := NewFSM(10)
	v2 := []Command{
		{Op: OpRecover, Epoch: 5, Incarnation: "x", Record: &fencing.Record{Kind: fencing.KindRecover}},
		{Op: OpAcquire, Node: "a", Incarnation: "x"},
		{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindRecover, Target: "a"}},
	}
	v1 := []Command{
		{Op: OpAcquire, Node: "a"}, {Op: OpState, Node: "a", Epoch: 1, State: HolderMounting},
		{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Target: "b"}}, {Op: OpStandby, Node: "b", Flag: true},
		{Op: OpRelease, Node: "a", Epoch: 1}, {Op: OpUnclean, Node: "b"}, {Op: OpConfig},
	}
	if f.ClusterVersion() != 1 {
		t.Fatalf("new FSM at cluster version %d", f.ClusterVersion())
	}
	for _, c := range v2 {
		if err := f.Allows(&c); !errors.Is(err, ErrClusterVersion) {
			t.Errorf("%s %+v allowed at version 1: %v", c.Op, c, err)
		}
	}
	for _, c := range v1 {
		if err := f.Allows(&c); err != nil || c.Needs() != 1 {
			t.Errorf("%s refused at version 1 (%v) or needs %d", c.Op, err, c.Needs())
		}
		// What a version-1 node decodes: no field it does not know.
		b, _ := json.Marshal(c)
		if bytes.Contains(b, []byte(`"version"`)) || bytes.Contains(b, []byte(`"clusterVersion"`)) {
			t.Errorf("%s carries a version-2 field: %s", c.Op, b)
		}
	}
	if err := f.Allows(&Command{Op: OpClusterVersion, ClusterVersion: ClusterVersionMax + 1}); err == nil {
		t.Errorf("cluster version %d allowed by a build that supports %d", ClusterVersionMax+1, ClusterVersionMax)
	}
	if err := f.Allows(&Command{Op: OpClusterVersion, ClusterVersion: 2}); err != nil {
		t.Fatalf("raising to 2: %v", err)
	}
	if res := apply(t, f, Command{Op: OpClusterVersion, ClusterVersion: 2, Version: 2}); res != nil {
		t.Fatalf("raising to 2: %v", res)
	}
	if f.ClusterVersion() != 2 || f.State().ClusterVersion != 2 {
		t.Fatalf("cluster version %d after raising to 2", f.ClusterVersion())
	}
	for _, c := range v2 {
		if err := f.Allows(&c); err != nil {
			t.Errorf("%s refused at version 2: %v", c.Op, err)
		}
	}
	for _, v := range []int{1, 2} {
		if _, ok := apply(t, f, Command{Op: OpClusterVersion, ClusterVersion: v, Version: 2}).(error); !ok || f.ClusterVersion() != 2 {
			t.Errorf("cluster version set to %d from 2: now %d", v, f.ClusterVersion())
		}
	}
	if f.Halted() != nil {
		t.Fatalf("halted: %v", f.Halted())
	}
}

// TestFSMHaltsOnNewerEntry: an entry of a newer fenced (an op it does not
// know, a version above its own, undecodable) is not skipped: the FSM
// halts with a clear error, applies nothing more, takes no snapshot and
// refuses proposals. A snapshot of a newer version halts it too.
func TestFSMHaltsOnNewerEntry(t *testing.T) {
	next := ClusterVersionMax + 1
	needs := fmt.Sprintf("replicated entry 7 needs fenced cluster version %d; this fenced supports up to %d: upgrade this node", next, ClusterVersionMax)
	for _, tc := range []struct {
		name, data, want string
	}{
		{"version", fmt.Sprintf(`{"op":"acquire","node":"a","version":%d}`, next), needs},
		{"cluster version", fmt.Sprintf(`{"op":"cluster-version","clusterVersion":%d,"version":%d}`, next, next), needs},
		{"unknown op", `{"op":"lease-v3","node":"a"}`, `replicated entry 7 is a "lease-v3" command, unknown to this fenced`},
		{"undecodable", `{"op":"acquire","epoch":"three"}`, "replicated entry 7 cannot be decoded by this fenced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFSM(10)
			apply(t, f, Command{Op: OpAcquire, Node: "a"})
			before := stateJSON(t, f)
			changed := f.Changed()
			res := f.Apply(&raft.Log{Index: 7, Data: []byte(tc.data)})
			var h *HaltError
			if err, _ := res.(error); !errors.As(err, &h) || !strings.Contains(h.Error(), tc.want) {
				t.Fatalf("applied %s: %v, want a halt: %s", tc.data, res, tc.want)
			}
			select {
			case <-changed:
			default:
				t.Fatal("a halt woke no watcher")
			}
			if f.Halted() == nil || f.Halted().Index != 7 {
				t.Fatalf("Halted() = %v", f.Halted())
			}
			// Nothing after it is applied (the state stays at entry 6).
			if _, ok := apply(t, f, Command{Op: OpAcquire, Node: "b"}).(*HaltError); !ok || stateJSON(t, f) != before {
				t.Fatalf("applied an entry after the halt:\n%s\n→\n%s", before, stateJSON(t, f))
			}
			if _, err := f.Snapshot(); err == nil {
				t.Fatal("halted FSM took a snapshot")
			}
			if err := f.Allows(&Command{Op: OpAcquire, Node: "a"}); err == nil {
				t.Fatal("halted FSM allows proposals")
			}
			if err := f.Allows(&Command{Op: OpRelease, Node: "a", Epoch: 1}); err != nil {
				t.Fatalf("halted FSM refuses its release: %v", err)
			}
		})
	}
	t.Run("snapshot", func(t *testing.T) {
		f := NewFSM(10)
		err := f.Restore(io.NopCloser(strings.NewReader(fmt.Sprintf(`{"epoch":9,"holder":"a","clusterVersion":%d}`, next))))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the replicated snapshot needs fenced cluster version %d", next)) || f.Halted() == nil {
			t.Fatalf("restored a version-%d snapshot: %v", next, err)
		}
		if f.State().Epoch != 0 {
			t.Fatalf("state taken from a version-%d snapshot: %+v", next, f.State())
		}
	})
}

// TestRaftApplyGates: Raft.Apply, which every proposal passes, refuses a
// version-2 command at cluster version 1 (nothing is committed) and
// stamps one at version 2 with the version it needs; a halted node
// renews no lease.
func TestRaftApplyGates(t *testing.T) {
	nodes, _ := tcpCluster(t, prod, prod, prod)
	l := waitLeader(t, nodes, []string{"a", "b", "c"}, "")
	q := nodes[l]
	idx := q.AppliedIndex()
	if _, err := q.Apply(Command{Op: OpAcquire, Node: l, Incarnation: "x"}, time.Second); !errors.Is(err, ErrClusterVersion) {
		t.Fatalf("version-2 field committed at version 1: %v", err)
	}
	if q.AppliedIndex() != idx || q.FSM().State().Epoch != 0 {
		t.Fatal("a refused proposal reached the log")
	}
	if _, err := q.Apply(Command{Op: OpClusterVersion, ClusterVersion: 2}, time.Second); err != nil {
		t.Fatal(err)
	}
	// The newest command in the log (barriers follow it).
	var c Command
	for i := q.r.LastIndex(); i > 0; i-- {
		var e raft.Log
		if err := q.logs.GetLog(i, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == raft.LogCommand {
			if json.Unmarshal(e.Data, &c) != nil || c.Op != OpClusterVersion || c.Version != 2 {
				t.Fatalf("committed %s", e.Data)
			}
			break
		}
	}
	if c.Op == "" {
		t.Fatal("no command in the log")
	}
	if _, err := q.Apply(Command{Op: OpAcquire, Node: l, Incarnation: "x"}, time.Second); err != nil {
		t.Fatalf("version-2 field refused at version 2: %v", err)
	}
	// A follower that halts stops renewing at once.
	var f string
	for n := range nodes {
		if n != l {
			f = n
		}
	}
	nodes[f].FSM().Apply(&raft.Log{Index: 99, Data: []byte(`{"op":"lease-v3"}`)})
	if err := nodes[f].Confirm(time.Second); err == nil {
		t.Fatal("a halted node confirmed its lease")
	}
}

// TestRaftRefusesOlderPeer: once the cluster version is 2, a node whose
// fenced supports only 1 (its certificate says so) cannot rejoin raft: its
// votes are refused and it is sent no entry, while the others go on; the
// same node restarted with a fenced that supports 2 catches up.
func TestRaftRefusesOlderPeer(t *testing.T) {
	nodes, peers := tcpCluster(t, prod, prod, prod)
	l := waitLeader(t, nodes, []string{"a", "b", "c"}, "")
	// The node to downgrade is a follower.
	old := "c"
	if l == old {
		old = "b"
	}
	if _, err := nodes[l].Apply(Command{Op: OpClusterVersion, ClusterVersion: 2}, time.Second); err != nil {
		t.Fatal(err)
	}
	nodes[old].Shutdown()
	reopen := func(supports int) *Raft {
		var q *Raft
		var err error
		for range 50 { // its port may take a moment to be free again
			if q, err = OpenRaft(RaftOptions{Self: old, Peers: peers, HeartbeatTimeout: 200 * time.Millisecond, InMemory: true,
				Key: keyA, Cluster: "prod", supports: supports}); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	q := reopen(1)
	var live []string
	for _, n := range []string{"a", "b", "c"} {
		if n != old {
			live = append(live, n)
		}
	}
	l = waitLeader(t, nodes, live, "")
	if _, err := nodes[l].Apply(Command{Op: OpAcquire, Node: l}, time.Second); err != nil {
		t.Fatalf("the upgraded majority stopped working: %v", err)
	}
	time.Sleep(time.Second) // five heartbeat timeouts: time to be sent the log, or to win a vote
	if st := q.FSM().State(); st.Epoch != 0 || st.Version() != 1 || q.Leader() != "" && q.Leader() != old {
		t.Fatalf("an older node was let in: epoch %d, version %d, leader %q", st.Epoch, st.Version(), q.Leader())
	}
	if nodes[l].Leader() != l {
		t.Fatalf("leadership moved to %s", nodes[l].Leader())
	}
	q.Shutdown()
	// The control: the same node, supporting 2, is let in and catches up.
	q = reopen(2)
	defer q.Shutdown()
	deadline := time.Now().Add(5 * time.Second)
	for q.FSM().State().Epoch != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("a node supporting version 2 did not catch up: %+v", q.FSM().State())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if q.FSM().ClusterVersion() != 2 {
		t.Fatalf("caught up at cluster version %d", q.FSM().ClusterVersion())
	}
}
