package quorum

import (
	"testing"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
)

// A fence's progress is queued without waiting (ApplyQueued) and its final
// record committed after it with Apply: the final record must win, every
// time, on every node — a progress record landing after it would show the
// fence pending again, and the unfence rule reads only finished fences.
func TestApplyQueuedKeepsOrder(t *testing.T) {
	nodes, _ := inmemCluster(t, 3, 300*time.Millisecond)
	l := waitLeader(t, nodes, []string{"a", "b", "c"}, "")
	q := nodes[l]
	res, err := q.Apply(Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Target: "b", Action: fencing.ActionOff,
		Outcome: fencing.OutcomePending, Executor: l}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	id := res.(uint64)
	var waits []func() (any, error)
	for i := range 50 {
		r := fencing.Record{ID: id, Kind: fencing.KindFence, Target: "b", Action: fencing.ActionOff, Outcome: fencing.OutcomePending, Executor: l,
			Attempts: make([]fencing.Attempt, i+1)}
		waits = append(waits, q.ApplyQueued(Command{Op: OpRecord, Record: &r}, time.Second))
	}
	final := fencing.Record{ID: id, Kind: fencing.KindFence, Target: "b", Action: fencing.ActionOff, Outcome: fencing.OutcomeSuccess, Executor: l,
		Attempts: make([]fencing.Attempt, 51)}
	if _, err := q.Apply(Command{Op: OpRecord, Record: &final}, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, w := range waits {
		if _, err := w(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for name, n := range nodes {
		for {
			var got *fencing.Record
			for _, r := range n.FSM().State().History {
				if r.ID == id {
					got = &r
				}
			}
			if got != nil && got.Outcome == fencing.OutcomeSuccess && len(got.Attempts) == 51 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the fence record is %+v, want the final one (success, 51 attempts)", name, got)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
