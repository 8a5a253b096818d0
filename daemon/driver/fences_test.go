package driver

import (
	"context"
	"testing"
	"time"

	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// TestFencedOnceForEveryGroup: the machines of two groups on one node take
// over from the same former holder at once; the node is fenced once, both
// get the record, and its commit clears the node in both groups. A later
// takeover fences again (the join ends with the fence).
func TestFencedOnceForEveryGroup(t *testing.T) {
	w := newWorld(t, Config{})
	w.isLeader, w.leader = true, "a"
	for _, g := range []string{"", "g2"} {
		for _, c := range []quorum.Command{{Op: quorum.OpAcquire, Node: "b"}, {Op: quorum.OpState, Node: "b", Epoch: 1, State: quorum.HolderMounting},
			{Op: quorum.OpAcquire, Node: "a"}} {
			c.Group = g
			if _, err := w.commit(c); err != nil {
				t.Fatalf("group %q: %s: %v", g, c.Op, err)
			}
		}
		if _, listed := w.fsm.HoldersOf(g).Unconfirmed["b"]; !listed {
			t.Fatalf("group %q: b not unconfirmed: %+v", g, w.fsm.HoldersOf(g))
		}
	}
	d2 := New(Config{Group: "g2", Machine: w.drv.cfg.Machine, Nodes: w.drv.cfg.Nodes, Majority: w.drv.cfg.Majority},
		Env{Log: wlog{w}, Peers: wpeers{w}, Clock: wclock{w}, Effects: weffects{w}, Observer: wobs{w}, Fences: w.drv.env.Fences})
	var got []fencing.Record
	for _, d := range []*Driver{w.drv, d2} {
		d.fenceOnce(NewScope(context.Background()), FenceRequest{Target: "b", Action: fencing.ActionOff, Reason: "takeover",
			RequestedBy: "a (takeover)", Epoch: 2, Group: d.Group()}, func(r fencing.Record) { got = append(got, r) })
	}
	if !w.drv.env.Fences.Running("b") {
		t.Fatal("no fence of b under way")
	}
	w.run(time.Second)
	if len(w.fences) != 1 || w.drv.env.Fences.Joins() != 1 {
		t.Fatalf("the engine ran %d fences (%+v), %d joined; want 1 and 1", len(w.fences), w.fences, w.drv.env.Fences.Joins())
	}
	if len(got) != 2 || got[0].Outcome != fencing.OutcomeSuccess || got[1].ID != got[0].ID {
		t.Fatalf("records handed back: %+v", got)
	}
	for _, g := range []string{"", "g2"} {
		if _, listed := w.fsm.HoldersOf(g).Unconfirmed["b"]; listed {
			t.Errorf("group %q: b still unconfirmed after its power fence", g)
		}
	}
	if h := w.fsm.State().History; len(h) != 1 || h[0].Group != "" {
		t.Fatalf("history %+v: want one fence record, of the default group (the first to ask)", h)
	}
	// The next takeover from b fences it again, and says its group.
	d2.fenceOnce(NewScope(context.Background()), FenceRequest{Target: "b", Action: fencing.ActionOff, Reason: "takeover",
		RequestedBy: "a (takeover)", Epoch: 2, Group: "g2"}, func(r fencing.Record) { got = append(got, r) })
	w.run(time.Second)
	if len(w.fences) != 2 || len(got) != 3 || got[2].Group != "g2" || w.fsm.State().History[1].Group != "g2" {
		t.Fatalf("second fence: engine ran %d, records %+v", len(w.fences), got)
	}
}
