package driver

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
)

// fenceOnce runs one power-off of target on w's node, a leader of four
// nodes (a, b, c, d), and returns its record.
func fenceOnce(t *testing.T, w *world, target string) fencing.Record {
	t.Helper()
	var got []fencing.Record
	w.drv.Fence(NewScope(context.Background()), FenceRequest{Target: target, Action: fencing.ActionOff, Reason: "test", RequestedBy: "a (takeover)", Epoch: 1},
		func(r fencing.Record) { got = append(got, r) })
	w.run(5 * time.Second)
	if len(got) != 1 {
		t.Fatalf("fence of %s: %d records, want 1", target, len(got))
	}
	return got[0]
}

func delegWorld(t *testing.T) *world {
	w := newWorld(t, Config{Nodes: []string{"a", "b", "c", "d"}, Majority: 3})
	w.isLeader = true
	return w
}

// A path that works here, or was never checked, is taken at once: nobody
// is asked.
func TestFenceFastPathAsksNobody(t *testing.T) {
	for _, path := range []string{PathWorking, "unknown", ""} {
		w := delegWorld(t)
		w.paths["a/b"], w.paths["c/b"] = path, PathWorking
		rec := fenceOnce(t, w, "b")
		if len(w.asked) != 0 || len(w.handed) != 0 || len(w.fences) != 1 || rec.Executor != "a" || rec.Outcome != fencing.OutcomeSuccess {
			t.Errorf("own path %q: asked %v, handed %v, ran here %d, record %+v", path, w.asked, w.handed, len(w.fences), rec)
		}
	}
}

// With no working path here, the fence runs on the first node in rank
// order whose own checks find one, never on the target; the leader commits
// the peer's record, executor the peer, once.
func TestFenceHandedToFirstHealthyPeer(t *testing.T) {
	w := delegWorld(t)
	w.paths["a/b"], w.paths["c/b"], w.paths["d/b"], w.paths["b/b"] = PathFailing, "unknown", PathWorking, PathWorking
	rec := fenceOnce(t, w, "b")
	if len(w.fences) != 0 || len(w.handed) != 1 || w.handed[0].Executor != "d" {
		t.Fatalf("ran here %d, handed %+v; want handed to d", len(w.fences), w.handed)
	}
	if slices.Contains(w.asked, "b") {
		t.Errorf("the target was asked whether it can fence itself: %v", w.asked)
	}
	h := w.fsm.State().History
	if rec.Outcome != fencing.OutcomeSuccess || rec.Executor != "d" || len(h) != 1 || h[0].Executor != "d" ||
		h[0].Outcome != fencing.OutcomeSuccess || len(h[0].Attempts) != 1 || h[0].RequestedBy != "a (takeover)" {
		t.Fatalf("record %+v, history %+v", rec, h)
	}
	if req := w.handed[0]; req.ID != h[0].ID || req.Epoch != 1 || req.Target != "b" || req.Reason != "test" {
		t.Fatalf("handed %+v, not the recorded request %+v", req, h[0])
	}
}

// The first-ranked healthy node wins even when a lower-ranked one answers
// first; with none healthy, the fence runs here.
func TestFenceExecutorRankAndFallback(t *testing.T) {
	w := delegWorld(t)
	w.paths["a/d"], w.paths["b/d"], w.paths["c/d"] = PathFailing, PathWorking, PathWorking
	if rec := fenceOnce(t, w, "d"); rec.Executor != "b" {
		t.Errorf("executor %s, want b (first in rank order)", rec.Executor)
	}
	w = delegWorld(t)
	w.paths["a/d"], w.paths["b/d"], w.paths["c/d"] = PathFailing, PathFailing, "unknown"
	if rec := fenceOnce(t, w, "d"); rec.Executor != "a" || len(w.fences) != 1 {
		t.Errorf("no healthy peer: executor %s, ran here %d; want here", rec.Executor, len(w.fences))
	}
}

// A fence that reached no device here (refused credentials) sends the
// retry to a healthy peer although the checks here never failed; one
// whose device answered (reads back on) does not.
func TestFenceRetryAfterUnreachedGoesToPeer(t *testing.T) {
	for _, tc := range []struct {
		readBack, want string
	}{{"", "c"}, {"on", "a"}} {
		w := delegWorld(t)
		w.paths["c/b"] = PathWorking
		w.localFence = func(req FenceRequest) fencing.Record {
			return fencing.Record{ID: req.ID, Kind: fencing.KindFence, Target: req.Target, Action: req.Action, Epoch: req.Epoch, Executor: req.Executor,
				Outcome: fencing.OutcomeFailed, Error: "auth", Attempts: []fencing.Attempt{{Level: 1, Device: "bmc", Result: fencing.ResultFailed, ReadBack: tc.readBack}}}
		}
		if rec := fenceOnce(t, w, "b"); rec.Executor != "a" || rec.Outcome != fencing.OutcomeFailed {
			t.Fatalf("first run %+v", rec)
		}
		if rec := fenceOnce(t, w, "b"); rec.Executor != tc.want {
			t.Errorf("local read-back %q: retry ran on %s, want %s", tc.readBack, rec.Executor, tc.want)
		}
	}
}

// A peer that dies mid-fence, or answers with a record of something else,
// leaves the fence unknown (committed so), never a success.
func TestFenceHandedPeerFailureIsUnknown(t *testing.T) {
	for name, answer := range map[string]func(FenceRequest) (fencing.Record, error){
		"no answer": func(FenceRequest) (fencing.Record, error) {
			return fencing.Record{}, errors.New("forward to c: context deadline exceeded")
		},
		"other record": func(req FenceRequest) (fencing.Record, error) {
			return fencing.Record{ID: req.ID, Kind: fencing.KindFence, Target: "d", Action: req.Action, Epoch: req.Epoch, Executor: req.Executor,
				Outcome: fencing.OutcomeSuccess}, nil
		},
		"older epoch": func(req FenceRequest) (fencing.Record, error) {
			return fencing.Record{ID: req.ID, Kind: fencing.KindFence, Target: req.Target, Action: req.Action, Epoch: req.Epoch - 1, Executor: req.Executor,
				Outcome: fencing.OutcomeSuccess}, nil
		},
	} {
		w := delegWorld(t)
		w.paths["a/b"], w.paths["c/b"] = PathFailing, PathWorking
		w.peerFence = answer
		rec := fenceOnce(t, w, "b")
		h := w.fsm.State().History
		if rec.Outcome != fencing.OutcomeUnknown || rec.Executor != "c" || len(h) != 1 || h[0].Outcome != fencing.OutcomeUnknown {
			t.Errorf("%s: record %+v, history %+v; want unknown, by c", name, rec, h)
		}
	}
}

// Only power-offs are handed on.
func TestUnfenceNeverHandedOn(t *testing.T) {
	w := delegWorld(t)
	w.paths["a/b"], w.paths["c/b"] = PathFailing, PathWorking
	var got []fencing.Record
	w.drv.Fence(NewScope(context.Background()), FenceRequest{Target: "b", Action: fencing.ActionOn}, func(r fencing.Record) { got = append(got, r) })
	w.run(time.Second)
	if len(w.asked) != 0 || len(w.handed) != 0 || len(got) != 1 || got[0].Executor != "a" {
		t.Fatalf("unfence: asked %v, handed %v, records %+v", w.asked, w.handed, got)
	}
}
