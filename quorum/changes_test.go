package quorum

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
)

// Election and primacy records are history only: they confirm nobody
// stopped, never fold into a retried fence, take IDs in order like any
// record, count against the limit, and are updated by ID (a tenure's
// record as its takeover moves on).
func TestChangeRecordsAreHistoryOnly(t *testing.T) {
	f := NewFSM(4)
	apply(t, f, Command{Op: OpAcquire, Node: "a"})
	apply(t, f, Command{Op: OpState, Node: "a", Epoch: 1, State: HolderMounting})
	apply(t, f, Command{Op: OpAcquire, Node: "b"})
	fence := fencing.Record{Kind: fencing.KindFence, Target: "a", Action: "off", Executor: "b", RequestedBy: "b (takeover)", Epoch: 2, Outcome: fencing.OutcomeFailed}
	if id := apply(t, f, Command{Op: OpRecord, Record: &fence}); id != uint64(1) {
		t.Fatalf("fence id %v", id)
	}
	now := time.Now()
	for _, r := range []fencing.Record{
		{Kind: fencing.KindElection, Target: "a", Term: 7, Previous: "b", LastContact: now, Started: now, Finished: now, Outcome: fencing.OutcomeSuccess},
		{Kind: fencing.KindPrimacy, Target: "a", Epoch: 2, Previous: "a", Started: now, Outcome: fencing.OutcomeSuccess},
	} {
		apply(t, f, Command{Op: OpRecord, Record: &r})
	}
	if s := f.State(); s.Unconfirmed["a"] != 1 || s.NextID != 4 {
		t.Fatalf("after the election and primacy records of a: unconfirmed %v, next id %d", s.Unconfirmed, s.NextID)
	}
	// The fold looks at the target's newest record only: here a's own
	// primacy record, so a fence of a run again is a record of its own.
	// (In a cluster a node elected or granted primacy is not being
	// fenced by a leader retrying: that leader no longer leads.)
	fence.Outcome = fencing.OutcomePending
	if id := apply(t, f, Command{Op: OpRecord, Record: &fence}); id != uint64(4) {
		t.Fatalf("retry after a change record: id %v, want a record of its own (4)", id)
	}
	// Updated by ID, with its steps.
	upd := fencing.Record{ID: 3, Kind: fencing.KindPrimacy, Target: "a", Epoch: 2, Started: now, Finished: now.Add(time.Second), Outcome: fencing.OutcomeSuccess,
		Steps: []fencing.Step{{Phase: "serving", At: now.Add(time.Second)}}}
	if id := apply(t, f, Command{Op: OpRecord, Record: &upd}); id != uint64(3) {
		t.Fatalf("update: id %v", id)
	}
	s := f.State()
	if len(s.History) != 4 || s.History[2].ID != 3 || len(s.History[2].Steps) != 1 {
		t.Fatalf("history %+v", s.History)
	}
	// A copy of the state does not share the steps.
	s.History[2].Steps[0].Phase = "changed"
	if f.State().History[2].Steps[0].Phase != "serving" {
		t.Fatal("State shares a record's steps with the state machine")
	}
	// The limit counts every kind.
	apply(t, f, Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindElection, Target: "b", Term: 8, Outcome: fencing.OutcomeSuccess}})
	if s := f.State(); len(s.History) != 4 || s.History[0].ID != 2 {
		t.Fatalf("limit 4: %d records, the oldest %d", len(s.History), s.History[0].ID)
	}
}

// A snapshot of an older version (records without term, previous, last
// contact or steps) restores, and its records read as before.
func TestRestoreOlderHistory(t *testing.T) {
	old := `{"epoch":3,"holder":"b","holderState":"mounted","unconfirmed":{"b":3},"nextID":3,"history":[` +
		`{"id":1,"kind":"fence","target":"a","action":"off","executor":"b","epoch":3,"started":"2026-11-30T10:00:00.123456789Z","finished":"2026-11-30T10:00:01Z","outcome":"success"},` +
		`{"id":2,"kind":"release","target":"c","epoch":2,"started":"2026-11-30T09:00:00Z","finished":"2026-11-30T09:00:00Z","outcome":"success"}]}`
	f := NewFSM(10)
	if err := f.Restore(io.NopCloser(bytes.NewReader([]byte(old)))); err != nil {
		t.Fatal(err)
	}
	s := f.State()
	if len(s.History) != 2 || s.History[0].Term != 0 || s.History[0].Previous != "" || !s.History[0].LastContact.IsZero() || s.History[0].Steps != nil {
		t.Fatalf("restored %+v", s.History)
	}
	if got := s.History[0].Started.Nanosecond(); got != 123456789 {
		t.Errorf("start restored with %d ns, want the full precision", got)
	}
	if id := apply(t, f, Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindElection, Target: "b", Term: 9, Outcome: fencing.OutcomeSuccess}}); id != uint64(3) {
		t.Fatalf("next id %v, want 3", id)
	}
}
