package quorum

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fenced/fenced/stonith/fencing"
	"github.com/hashicorp/raft"
)

// applyGroup applies c as the state machine does once the cluster runs
// GroupsVersion, whatever its committed version: past Apply's gates.
func applyGroup(t *testing.T, f *FSM, c Command) any {
	t.Helper()
	if err := c.check(&f.state); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apply(&c)
}

// mountIn grants group g to node and commits its mount intent.
func mountIn(t *testing.T, f *FSM, g, node string) uint64 {
	t.Helper()
	gr, ok := applyGroup(t, f, Command{Op: OpAcquire, Group: g, Node: node}).(Grant)
	if !ok {
		t.Fatalf("acquire %s by %s refused", g, node)
	}
	if err, _ := applyGroup(t, f, Command{Op: OpState, Group: g, Node: node, Epoch: gr.Epoch, State: HolderMounting}).(error); err != nil {
		t.Fatalf("mount intent of %s by %s: %v", g, node, err)
	}
	return gr.Epoch
}

// TestGroupsHaveTheirOwnEpochs: each group's epoch is its own sequence,
// its mount intent waits only for its own unconfirmed nodes, and a grant
// of one group changes nothing of another.
func TestGroupsHaveTheirOwnEpochs(t *testing.T) {
	f := NewFSM(100)
	if e := mountIn(t, f, "", "a"); e != 1 {
		t.Fatalf("default group's first epoch %d", e)
	}
	if e := mountIn(t, f, "nfs-b", "b"); e != 1 {
		t.Fatalf("nfs-b's first epoch %d, want its own sequence", e)
	}
	gr := applyGroup(t, f, Command{Op: OpAcquire, Group: "nfs-b", Node: "c"}).(Grant)
	if gr.Epoch != 2 || gr.Unconfirmed["b"] != 1 || len(gr.Unconfirmed) != 1 || gr.LeaseOf != "b" {
		t.Fatalf("nfs-b's second grant %+v: want epoch 2, b unconfirmed (not a, which runs the default group)", gr)
	}
	s := f.State()
	if s.Epoch != 1 || s.Holder != "a" || s.HolderState != HolderMounting || s.Unconfirmed["a"] != 1 {
		t.Fatalf("the default group moved with nfs-b: %+v", s.Group(""))
	}
	if g := s.Group("nfs-b"); g.Epoch != 2 || g.Holder != "c" || g.HolderState != HolderAcquiring {
		t.Fatalf("nfs-b %+v", g)
	}
	if got := strings.Join(s.GroupNames(), ","); got != "default,nfs-b" {
		t.Fatalf("groups %s", got)
	}
	if s.MaxEpoch() != 2 {
		t.Fatalf("highest epoch %d", s.MaxEpoch())
	}
	// A stale command of a group that was never granted leaves none.
	if err, _ := applyGroup(t, f, Command{Op: OpState, Group: "ghost", Node: "a", Epoch: 7, State: HolderMounted}).(error); !errors.Is(err, ErrStale) {
		t.Fatalf("state of a group never granted: %v", err)
	}
	if _, ok := f.State().Groups["ghost"]; ok {
		t.Fatal("a refused command created a group")
	}
	if err, _ := applyGroup(t, f, Command{Op: OpAcquire, Group: "9 bad", Node: "a"}).(error); err == nil || !strings.Contains(err.Error(), "group name") {
		t.Fatalf("a malformed group name: %v", err)
	}
}

// TestPowerFenceClearsEveryGroup: a node fenced off (or confirmed by an
// admin) is stopped for every group it may run; a lease expiry or a fence
// of one group's storage clears it in that group alone.
func TestPowerFenceClearsEveryGroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		record  fencing.Record
		group   string
		cleared []string // groups in which a is cleared
	}{
		{"power fence", fencing.Record{Kind: fencing.KindFence, Action: fencing.ActionOff, Outcome: fencing.OutcomeSuccess}, "g2", []string{"default", "g2"}},
		{"confirmation", fencing.Record{Kind: fencing.KindConfirm, Outcome: fencing.OutcomeSuccess}, "", []string{"default", "g2"}},
		{"storage fence", fencing.Record{Kind: fencing.KindFence, Action: fencing.ActionOff, Scope: fencing.ScopeStorage, Outcome: fencing.OutcomeSuccess}, "g2", []string{"g2"}},
		{"failed fence", fencing.Record{Kind: fencing.KindFence, Action: fencing.ActionOff, Outcome: fencing.OutcomeFailed}, "g2", nil},
		{"lease expiry", fencing.Record{Kind: fencing.KindExpiry, Outcome: fencing.OutcomeSuccess}, "g2", []string{"g2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFSM(100)
			mountIn(t, f, "", "a")
			mountIn(t, f, "g2", "a")
			// b takes over both; a is unconfirmed in each.
			applyGroup(t, f, Command{Op: OpAcquire, Node: "b"})
			gr := applyGroup(t, f, Command{Op: OpAcquire, Group: "g2", Node: "b"}).(Grant)
			r := tc.record
			r.Target, r.Executor, r.Epoch = "a", "b", gr.Epoch
			if res, _ := applyGroup(t, f, Command{Op: OpRecord, Group: tc.group, Record: &r}).(error); res != nil {
				t.Fatal(res)
			}
			s := f.State()
			for _, name := range s.GroupNames() {
				_, still := s.Group(name).Unconfirmed["a"]
				want := !strings.Contains(strings.Join(tc.cleared, ","), name)
				if still != want {
					t.Errorf("group %s: a unconfirmed %v, want %v", name, still, want)
				}
			}
			if got := s.History[len(s.History)-1].Group; got != namedGroup(tc.group) {
				t.Errorf("the record names group %q, want %q", got, namedGroup(tc.group))
			}
		})
	}
}

// TestDefaultGroupKeepsItsFormat: a state with the default group alone is
// written as before groups existed (no "groups", no record "group"), and a
// state with groups survives a snapshot and a restore.
func TestDefaultGroupKeepsItsFormat(t *testing.T) {
	f := NewFSM(100)
	mountIn(t, f, "", "a")
	applyGroup(t, f, Command{Op: OpRelease, Node: "a", Epoch: 1})
	data := snapshotBytes(t, f)
	if bytes.Contains(data, []byte(`"groups"`)) || bytes.Contains(data, []byte(`"group"`)) {
		t.Fatalf("a default-only state names groups: %s", data)
	}
	mountIn(t, f, "g2", "b")
	applyGroup(t, f, Command{Op: OpRelease, Group: "g2", Node: "b", Epoch: 1})
	data = snapshotBytes(t, f)
	g := NewFSM(100)
	if err := g.Restore(nopCloser{bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	s := g.State()
	if got := s.Group("g2"); got.Epoch != 1 || got.Holder != "b" || got.HolderState != HolderReleased {
		t.Fatalf("g2 after a restore %+v", got)
	}
	if r := s.History[len(s.History)-1]; r.Kind != fencing.KindRelease || r.Group != "g2" {
		t.Fatalf("g2's release record %+v", r)
	}
	if s.Epoch != 1 || s.Holder != "a" {
		t.Fatalf("default group after a restore %+v", s.Group(""))
	}
}

// TestGroupsNeedTheirVersion: a command naming a group other than the
// default needs GroupsVersion: it is refused at proposal at the version
// before, and a node of a build before it halts rather than apply it
// (Apply's gate, at a version above this build's).
func TestGroupsNeedTheirVersion(t *testing.T) {
	for _, c := range []Command{
		{Op: OpAcquire, Group: "g2", Node: "a"},
		{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Group: "g2", Target: "a"}},
	} {
		if n := c.Needs(); n != GroupsVersion {
			t.Errorf("%s needs version %d, want %d", c.Op, n, GroupsVersion)
		}
		if err := allows(&c, GroupsVersion-1); !errors.Is(err, ErrClusterVersion) {
			t.Errorf("%s proposed at version %d: %v", c.Op, GroupsVersion-1, err)
		}
		if err := allows(&c, GroupsVersion); err != nil {
			t.Errorf("%s refused at version %d: %v", c.Op, GroupsVersion, err)
		}
	}
	for _, c := range []Command{{Op: OpAcquire, Node: "a"}, {Op: OpAcquire, Group: DefaultGroup, Node: "a"}} {
		if n := c.Needs(); n != 1 {
			t.Errorf("the default group's acquire (group %q) needs version %d", c.Group, n)
		}
	}
	f := NewFSM(10)
	data, _ := json.Marshal(Command{Op: OpAcquire, Group: "g2", Node: "a", Version: ClusterVersionMax + 1})
	if res := f.Apply(&raft.Log{Index: 5, Data: data}); f.Halted() == nil {
		t.Fatalf("applied %v; want a halt", res)
	}
}

// TestRecoverRaisesEveryGroup: a recovery's epoch is above every group's,
// and every group continues from it.
func TestRecoverRaisesEveryGroup(t *testing.T) {
	f := NewFSM(10)
	mountIn(t, f, "", "a")
	for range 3 {
		applyGroup(t, f, Command{Op: OpAcquire, Group: "g2", Node: "b"})
	}
	rec := &fencing.Record{Kind: KindRecover, Target: "a", Outcome: fencing.OutcomeSuccess}
	if err, _ := applyGroup(t, f, Command{Op: OpRecover, Node: "a", Epoch: 3, Incarnation: "1.x", Record: rec}).(error); err == nil {
		t.Fatal("a recovery at g2's epoch accepted")
	}
	if err, _ := applyGroup(t, f, Command{Op: OpRecover, Node: "a", Epoch: 4, Gone: []string{"b"}, Incarnation: "1.x", Record: rec}).(error); err != nil {
		t.Fatal(err)
	}
	s := f.State()
	if s.Epoch != 4 || s.Group("g2").Epoch != 4 || s.Group("g2").HolderState != HolderReleased {
		t.Fatalf("after recovery: default %+v, g2 %+v", s.Group(""), s.Group("g2"))
	}
}

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return []byte(snap.(snapshot))
}

// TestPlacementGatesTheGrant: once a group is placed, only its node is
// granted it; OpPlace needs GroupsVersion, even for the default group.
func TestPlacementGatesTheGrant(t *testing.T) {
	f := NewFSM(10)
	applyGroup(t, f, Command{Op: OpPlace, Group: "g2", Node: "c"})
	if err, _ := applyGroup(t, f, Command{Op: OpAcquire, Group: "g2", Node: "b"}).(error); err == nil || !strings.Contains(err.Error(), "placed on c") {
		t.Fatalf("acquire off the placement: %v", err)
	}
	if g, ok := applyGroup(t, f, Command{Op: OpAcquire, Group: "g2", Node: "c"}).(Grant); !ok || g.Epoch != 1 {
		t.Fatalf("acquire on the placement: %+v", g)
	}
	// The default group is not placed: any node is granted it.
	if _, ok := applyGroup(t, f, Command{Op: OpAcquire, Node: "b"}).(Grant); !ok {
		t.Fatal("the default group's acquire refused")
	}
	applyGroup(t, f, Command{Op: OpPlace, Group: "g2"})
	if _, ok := applyGroup(t, f, Command{Op: OpAcquire, Group: "g2", Node: "b"}).(Grant); !ok {
		t.Fatal("acquire refused once the placement was lifted")
	}
	if n := (&Command{Op: OpPlace, Node: "a"}).Needs(); n != GroupsVersion {
		t.Fatalf("OpPlace needs version %d", n)
	}
}

// TestRenewOnlyTheCurrentHolder: OpRenew commits only for the holder of
// its group at its epoch, not released, where the group is placed; so no
// renewal commits after a successor's grant.
func TestRenewOnlyTheCurrentHolder(t *testing.T) {
	f := NewFSM(10)
	applyGroup(t, f, Command{Op: OpPlace, Group: "g2", Node: "b"})
	applyGroup(t, f, Command{Op: OpAcquire, Group: "g2", Node: "b"})
	before := snapshotBytes(t, f)
	if res := applyGroup(t, f, Command{Op: OpRenew, Group: "g2", Node: "b", Epoch: 1}); res != nil {
		t.Fatalf("the holder's renewal refused: %v", res)
	}
	if after := snapshotBytes(t, f); string(after) != string(before) {
		t.Fatalf("a renewal changed the state:\n%s\n→\n%s", before, after)
	}
	for _, tc := range []struct {
		name string
		c    Command
	}{
		{"another node", Command{Op: OpRenew, Group: "g2", Node: "c", Epoch: 1}},
		{"another epoch", Command{Op: OpRenew, Group: "g2", Node: "b", Epoch: 2}},
		{"another group", Command{Op: OpRenew, Group: "g3", Node: "b", Epoch: 1}},
		{"the default group", Command{Op: OpRenew, Node: "b", Epoch: 1}},
	} {
		if err, _ := applyGroup(t, f, tc.c).(error); !errors.Is(err, ErrStale) {
			t.Errorf("%s: %v, want ErrStale", tc.name, err)
		}
	}
	// Placed elsewhere: b's renewals stop committing at once.
	applyGroup(t, f, Command{Op: OpPlace, Group: "g2", Node: "c"})
	if err, _ := applyGroup(t, f, Command{Op: OpRenew, Group: "g2", Node: "b", Epoch: 1}).(error); !errors.Is(err, ErrStale) {
		t.Fatalf("renewal off the placement: %v", err)
	}
	// The successor's grant: the former's renewal is refused from then on.
	applyGroup(t, f, Command{Op: OpAcquire, Group: "g2", Node: "c"})
	applyGroup(t, f, Command{Op: OpPlace, Group: "g2", Node: "b"})
	if err, _ := applyGroup(t, f, Command{Op: OpRenew, Group: "g2", Node: "b", Epoch: 1}).(error); !errors.Is(err, ErrStale) {
		t.Fatalf("renewal of a superseded epoch: %v", err)
	}
	applyGroup(t, f, Command{Op: OpRelease, Group: "g2", Node: "c", Epoch: 2})
	if err, _ := applyGroup(t, f, Command{Op: OpRenew, Group: "g2", Node: "c", Epoch: 2}).(error); !errors.Is(err, ErrStale) {
		t.Fatalf("renewal after the release: %v", err)
	}
	if n := (&Command{Op: OpRenew, Node: "b"}).Needs(); n != GroupsVersion {
		t.Fatalf("OpRenew needs version %d", n)
	}
}
