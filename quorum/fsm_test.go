package quorum

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
	"github.com/hashicorp/raft"
)

func apply(t *testing.T, f *FSM, c Command) any {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(&raft.Log{Data: b})
}

func TestEpochsAndTakeoverGate(t *testing.T) {
	f := NewFSM(10)
	g := apply(t, f, Command{Op: OpAcquire, Node: "a"}).(Grant)
	if g.Epoch != 1 || g.LeaseOf != "" || len(g.Unconfirmed) != 0 {
		t.Fatalf("first grant %+v", g)
	}
	if err := apply(t, f, Command{Op: OpState, Node: "a", Epoch: 1, State: HolderMounting}); err != nil {
		t.Fatal(err)
	}
	apply(t, f, Command{Op: OpState, Node: "a", Epoch: 1, State: HolderMounted})

	// b takes over: a may still run the storage and its lease may run.
	g = apply(t, f, Command{Op: OpAcquire, Node: "b"}).(Grant)
	if g.Epoch != 2 || g.LeaseOf != "a" || g.Unconfirmed["a"] != 1 || g.Previous != "a" {
		t.Fatalf("second grant %+v", g)
	}
	// The deposed holder can no longer move the state.
	err, _ := apply(t, f, Command{Op: OpState, Node: "a", Epoch: 1, State: HolderMounted}).(error)
	if !errors.Is(err, ErrStale) {
		t.Fatalf("stale state change: %v", err)
	}
	// b may not commit a mount intent while a is unconfirmed.
	if err, _ := apply(t, f, Command{Op: OpState, Node: "b", Epoch: 2, State: HolderMounting}).(error); err == nil {
		t.Fatal("mount intent accepted while a is unconfirmed")
	}
	// A failed fence changes nothing; a confirmed one clears a.
	apply(t, f, Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Target: "a", Action: "off", Executor: "b", Outcome: fencing.OutcomeFailed}})
	if f.State().Unconfirmed["a"] == 0 {
		t.Fatal("failed fence cleared a")
	}
	apply(t, f, Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Target: "a", Action: "off", Executor: "b", Outcome: fencing.OutcomeSuccess}})
	s := f.State()
	if _, ok := s.Unconfirmed["a"]; ok || s.LeaseOf != "" {
		t.Fatalf("confirmed fence did not clear a: %+v", s)
	}
	if err := apply(t, f, Command{Op: OpState, Node: "b", Epoch: 2, State: HolderMounting}); err != nil {
		t.Fatalf("mount intent after fence: %v", err)
	}
	// b releases cleanly: c takes over without anything to wait for.
	apply(t, f, Command{Op: OpRelease, Node: "b", Epoch: 2})
	g = apply(t, f, Command{Op: OpAcquire, Node: "c"}).(Grant)
	if g.Epoch != 3 || g.LeaseOf != "" || len(g.Unconfirmed) != 0 {
		t.Fatalf("grant after release %+v", g)
	}
	// Manual confirmation clears like a fence.
	apply(t, f, Command{Op: OpState, Node: "c", Epoch: 3, State: HolderMounting})
	apply(t, f, Command{Op: OpAcquire, Node: "a"})
	apply(t, f, Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindConfirm, Target: "c", Outcome: fencing.OutcomeSuccess}})
	if len(f.State().Unconfirmed) != 0 {
		t.Fatalf("confirm did not clear: %v", f.State().Unconfirmed)
	}
}

func TestStandbyRefusesAcquire(t *testing.T) {
	f := NewFSM(10)
	apply(t, f, Command{Op: OpStandby, Node: "a", Flag: true})
	if _, ok := apply(t, f, Command{Op: OpAcquire, Node: "a"}).(error); !ok {
		t.Fatal("standby node acquired")
	}
	apply(t, f, Command{Op: OpStandby, Node: "a", Flag: false})
	if _, ok := apply(t, f, Command{Op: OpAcquire, Node: "a"}).(Grant); !ok {
		t.Fatal("node out of standby refused")
	}
}

func TestHistoryBoundedAndSnapshot(t *testing.T) {
	f := NewFSM(3)
	for i := range 5 {
		id := apply(t, f, Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Target: "x", Reason: string(rune('a' + i))}}).(uint64)
		if id != uint64(i+1) {
			t.Fatalf("id %d", id)
		}
	}
	// Update in place by ID.
	apply(t, f, Command{Op: OpRecord, Record: &fencing.Record{ID: 5, Kind: fencing.KindFence, Target: "x", Outcome: fencing.OutcomeSuccess}})
	s := f.State()
	if len(s.History) != 3 || s.History[0].ID != 3 || s.History[2].Outcome != fencing.OutcomeSuccess {
		t.Fatalf("history %+v", s.History)
	}
	apply(t, f, Command{Op: OpAcquire, Node: "a"})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM(3)
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := g.State(); got.Epoch != 1 || got.NextID != 6 || len(got.History) != 3 {
		t.Fatalf("restored %+v", got)
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader([]byte("{garbage")))); err == nil {
		t.Fatal("garbage snapshot restored")
	}
	if err, _ := g.Apply(&raft.Log{Data: []byte("not json")}).(error); err == nil {
		t.Fatal("undecodable command applied")
	}
}

type memSink struct{ bytes.Buffer }

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { return nil }
func (m *memSink) Close() error  { return nil }

// TestFormersKeptUntilAGatePasses: a holder granted and superseded before
// it passed its gate leaves the holder before it a former too.
func TestFormersKeptUntilAGatePasses(t *testing.T) {
	f := NewFSM(10)
	apply := func(c Command) any {
		data, _ := json.Marshal(c)
		return f.Apply(&raft.Log{Data: data})
	}
	apply(Command{Op: OpAcquire, Node: "a"})
	apply(Command{Op: OpState, Node: "a", Epoch: 1, State: HolderMounted})
	apply(Command{Op: OpAcquire, Node: "b"}) // a still acting, maybe
	g := apply(Command{Op: OpAcquire, Node: "c"}).(Grant)
	if g.LeaseOf != "b" || g.Formers["a"] != 1 || g.Formers["b"] != 2 {
		t.Fatalf("grant %+v: want formers a@1 and b@2", g)
	}
	// b releases: only a is left.
	apply(Command{Op: OpRelease, Node: "b", Epoch: 2})
	if v := f.Holders(); v.Formers["b"] != 0 || v.Formers["a"] != 1 {
		t.Fatalf("after b's release: %+v", v.Formers)
	}
	// c passes its gate: it waited them all out.
	apply(Command{Op: OpState, Node: "c", Epoch: 3, State: HolderMounted})
	if v := f.Holders(); len(v.Formers) != 0 || v.LeaseOf != "" {
		t.Fatalf("after c's gate: %+v %q", v.Formers, v.LeaseOf)
	}
}

// A holder's advertised timing is kept while it may hold the storage (as
// holder, former or unconfirmed), and dropped once it cannot; a timing no
// fenced writes is refused.
func TestAdvertisedTimings(t *testing.T) {
	f := NewFSM(10)
	long := &HolderTiming{Lease: 8 * time.Second, Margin: time.Second, Grace: 3 * time.Second}
	apply(t, f, Command{Op: OpAcquire, Node: "a", Timing: long})
	apply(t, f, Command{Op: OpState, Node: "a", Epoch: 1, State: HolderMounting, Timing: long})
	short := &HolderTiming{Lease: 3 * time.Second, Margin: 500 * time.Millisecond, Grace: 2 * time.Second}
	apply(t, f, Command{Op: OpAcquire, Node: "b", Timing: short})
	v := f.Holders()
	if v.Timings["a"] != *long || v.Timings["b"] != *short {
		t.Fatalf("timings %+v", v.Timings)
	}
	// a is fenced: nothing of its may run any more.
	apply(t, f, Command{Op: OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Target: "a", Action: "off", Executor: "b", Outcome: fencing.OutcomeSuccess}})
	if _, ok := f.Holders().Timings["a"]; ok {
		t.Fatalf("a's timing kept after its fence: %+v", f.Holders().Timings)
	}
	// An older version's acquire advertises none: the entry goes.
	apply(t, f, Command{Op: OpAcquire, Node: "b"})
	if _, ok := f.Holders().Timings["b"]; ok {
		t.Fatal("a stale timing survived an acquire without one")
	}
	for _, bad := range []HolderTiming{{}, {Lease: -1, Margin: 1, Grace: 1}, {Lease: 2 * time.Hour, Margin: 1, Grace: 1}} {
		if err, _ := apply(t, f, Command{Op: OpAcquire, Node: "c", Timing: &bad}).(error); err == nil {
			t.Errorf("timing %+v accepted", bad)
		}
	}
}

// A blocked takeover retrying its fence leaves one history record with
// the count of runs, the first run's start and the newest run's result,
// not one record a run; any other record of the target in between, or
// another epoch, starts a record of its own.
func TestFenceRetriesFold(t *testing.T) {
	f := NewFSM(100)
	t0 := time.Unix(1000, 0)
	run := func(i int, epoch uint64, outcome, msg string) uint64 {
		t.Helper()
		pending := fencing.Record{Kind: fencing.KindFence, Target: "a", Action: "off", Executor: "b", RequestedBy: "b", Epoch: epoch,
			Started: t0.Add(time.Duration(i) * time.Second), Outcome: fencing.OutcomePending}
		id := apply(t, f, Command{Op: OpRecord, Record: &pending}).(uint64)
		res := pending
		res.ID, res.Outcome, res.Error, res.Finished = id, outcome, msg, pending.Started.Add(500*time.Millisecond)
		apply(t, f, Command{Op: OpRecord, Record: &res})
		return id
	}
	first := run(0, 2, fencing.OutcomeFailed, "try 0")
	for i := 1; i < 5; i++ {
		if id := run(i, 2, fencing.OutcomeFailed, fmt.Sprintf("try %d", i)); id != first {
			t.Fatalf("run %d got record %d, want %d", i, id, first)
		}
	}
	h := f.State().History
	if len(h) != 1 || h[0].Runs != 5 || h[0].Error != "try 4" || !h[0].Started.Equal(t0) || h[0].Outcome != fencing.OutcomeFailed {
		t.Fatalf("history after 5 failed runs: %+v", h)
	}
	// The run that works ends the same record, and confirms a stopped.
	apply(t, f, Command{Op: OpAcquire, Node: "b"})
	run(5, 2, fencing.OutcomeSuccess, "")
	h = f.State().History
	if h[0].Runs != 6 || h[0].Outcome != fencing.OutcomeSuccess {
		t.Fatalf("after the run that worked: %+v", h[0])
	}
	// A success is not retried into; another epoch is a record of its own.
	if id := run(6, 2, fencing.OutcomeFailed, "again"); id == first {
		t.Fatal("a fence after a success folded into it")
	}
	n := len(f.State().History)
	run(7, 3, fencing.OutcomeFailed, "x")
	if len(f.State().History) != n+1 {
		t.Fatal("a fence of another epoch folded into the last")
	}
}
