package driver

import (
	"slices"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
)

// TestOffLeaderGroup: the driver of a group other than the default takes
// it where it is placed, not where raft leads: it acquires only once the
// group is placed here and the node caught up, writes through the leader
// (Propose) with every command naming the group, renews with OpRenew,
// and hands the group on with Move (a stale handover is not an error).
func TestOffLeaderGroup(t *testing.T) {
	w := newWorld(t, Config{Group: "g2", Machine: tenure.Config{Self: "a", OffLeader: true}})
	w.leader = "b" // this node follows
	// drive is the daemon's loop: a step at least every 10ms.
	drive := func(d time.Duration) {
		for end := w.now.Add(d); w.now < end; {
			w.drv.Step()
			w.run(10 * time.Millisecond)
		}
	}
	ops := func() []string {
		var out []string
		for _, c := range w.applied {
			if c.Group != "g2" {
				t.Fatalf("%s names group %q", c.Op, c.Group)
			}
			out = append(out, c.Op)
		}
		return out
	}
	drive(3 * time.Second)
	if len(w.applied) != 0 {
		t.Fatalf("not placed here, yet it wrote %v", ops())
	}
	if _, err := w.commit(quorum.Command{Op: quorum.OpPlace, Group: "g2", Node: "a"}); err != nil {
		t.Fatal(err)
	}
	w.behind = true
	drive(time.Second)
	if len(w.applied) != 0 {
		t.Fatalf("placed here but not caught up with the leader, yet it wrote %v", ops())
	}
	w.behind = false
	drive(5 * time.Second)
	if got := ops(); len(got) < 3 || got[0] != quorum.OpAcquire || !slices.Contains(got, quorum.OpRenew) {
		t.Fatalf("wrote %v; want an acquire, then renewals", got)
	}
	m := w.drv.Machine()
	if m.Phase() != tenure.Serving || !m.Acting(w.now) || w.fsm.HoldersOf("g2").Holder != "a" || w.fsm.Holders().Holder != "" {
		t.Fatalf("phase %s, g2 %+v, default %+v", m.Phase(), w.fsm.HoldersOf("g2"), w.fsm.Holders())
	}
	w.drv.HandOff("")
	drive(3 * time.Second)
	if !slices.Equal(w.moves, []string{"g2→"}) || m.Phase() != tenure.Secondary {
		t.Fatalf("handover: moves %v, phase %s", w.moves, m.Phase())
	}
	if got := ops(); got[len(got)-1] != quorum.OpRelease {
		t.Fatalf("no release before the handover: %v", got)
	}
	if v := w.fsm.HoldersOf("g2"); v.Placement != "c" || v.HolderState != quorum.HolderReleased {
		t.Fatalf("after the handover: %+v", v)
	}
}
