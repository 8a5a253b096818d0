package driver

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fenced/fenced/quorum"
)

// failLog is the world's Log whose Apply fails while fail is set.
type failLog struct {
	wlog
	fail *bool
}

func (l failLog) Apply(c quorum.Command, done func(any, error)) {
	if *l.fail {
		l.w.applied = append(l.w.applied, c)
		l.w.after(time.Millisecond, func() { done(nil, errors.New("not the leader")) })
		return
	}
	l.wlog.Apply(c, done)
}

// TestPlacer: the leader places each group on its preferred node, one
// commit at a time; a group whose node is no longer eligible moves; a node
// that handed a group on is not given it again for a lease; a commit that
// fails is tried again after a heartbeat, not at once; a follower, or a
// cluster below the groups version, places nothing.
func TestPlacer(t *testing.T) {
	w := newWorld(t, Config{})
	fail := false
	timing := w.drv.cfg.Machine.Timing
	p := NewPlacer(PlacerConfig{Groups: []quorum.GroupSpec{{Name: "g2", Prefer: []string{"b"}}, {Name: "g3", Prefer: []string{"c"}}},
		Log: failLog{wlog{w}, &fail}, Clock: wclock{w}, Timing: timing})
	all := func(unreached ...string) []Candidate {
		var out []Candidate
		for _, n := range []string{"a", "b", "c"} {
			out = append(out, Candidate{Name: n, Eligible: !slices.Contains(unreached, n)})
		}
		return out
	}
	placed := func(g string) string { return w.fsm.HoldersOf(g).Placement }
	step := func(leader bool, version int, nodes []Candidate) int {
		before := len(w.applied)
		p.Step(leader, version, nodes)
		w.run(10 * time.Millisecond)
		return len(w.applied) - before
	}

	if n := step(false, quorum.GroupsVersion, all()) + step(true, quorum.GroupsVersion-1, all()); n != 0 {
		t.Fatalf("a follower, or a cluster below version %d, committed %d placements", quorum.GroupsVersion, n)
	}
	for range 3 {
		step(true, quorum.GroupsVersion, all())
	}
	if placed("g2") != "b" || placed("g3") != "c" || len(w.applied) != 2 {
		t.Fatalf("placed g2 on %q, g3 on %q in %d commits; want b and c, one each", placed("g2"), placed("g3"), len(w.applied))
	}
	for _, c := range w.applied {
		if c.Op != quorum.OpPlace || c.From != "" {
			t.Fatalf("committed %+v; want an unconditional place", c)
		}
	}

	// b is not reached: g2 goes to the node without a group; g3 stays.
	step(true, quorum.GroupsVersion, all("b"))
	if placed("g2") != "a" || placed("g3") != "c" {
		t.Fatalf("with b unreached: g2 on %q, g3 on %q; want a and c", placed("g2"), placed("g3"))
	}

	// c hands g3 on: not placed on c again for a lease, even though c is
	// its preferred node and reached.
	h := quorum.Command{Op: quorum.OpPlace, Group: "g3", From: "c"}
	if _, err := w.commit(h); err != nil {
		t.Fatal(err)
	}
	p.HandedOn(h, w.now)
	step(true, quorum.GroupsVersion, all())
	if got := placed("g3"); got == "c" || got == "" {
		t.Fatalf("g3 handed on by c is placed on %q", got)
	}
	w.run(timing.Lease)

	// A failed commit: none again within a heartbeat, one after it.
	if _, err := w.commit(quorum.Command{Op: quorum.OpPlace, Group: "g2", Node: "c"}); err != nil {
		t.Fatal(err)
	}
	fail = true
	if n := step(true, quorum.GroupsVersion, all("c")); n != 1 {
		t.Fatalf("g2 on an unreached node: %d commits; want 1", n)
	}
	if n := step(true, quorum.GroupsVersion, all("c")); n != 0 {
		t.Fatalf("retried at once after a failed commit (%d)", n)
	}
	w.run(timing.Heartbeat)
	fail = false
	if n := step(true, quorum.GroupsVersion, all("c")); n != 1 || placed("g2") == "c" {
		t.Fatalf("after a heartbeat: %d commits, g2 on %q", n, placed("g2"))
	}
}
