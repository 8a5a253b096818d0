package driver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/stonith"
)

// A node that unfences itself at start is ineligible from Start on, runs
// nothing before it knows a cluster leader, then unfences, becomes
// eligible and records the success through the leader.
func TestStartUnfencesOnceJoined(t *testing.T) {
	w := newWorld(t, Config{Unfence: &UnfencePlan{Devices: []string{"scsi"}}})
	w.drv.Start()
	if got := w.inel[SourceUnfence]; !strings.Contains(got, "waiting for a cluster leader") || !strings.Contains(got, "scsi") {
		t.Fatalf("after Start: ineligible %q", got)
	}
	w.run(time.Second)
	if w.tries != 0 {
		t.Fatalf("%d unfences before a leader was known", w.tries)
	}
	w.leader = "b"
	w.run(time.Second)
	if w.tries != 1 || w.inel[SourceUnfence] != "" {
		t.Fatalf("after the leader: %d tries, ineligible %q", w.tries, w.inel[SourceUnfence])
	}
	h := w.fsm.State().History
	if len(h) != 1 || h[0].Kind != stonith.KindUnfence || h[0].Outcome != stonith.OutcomeSuccess || h[0].Target != "a" {
		t.Fatalf("history %+v", h)
	}
}

// A failing unfence keeps the node ineligible with the error, retries with
// backoff up to its cap, and the node becomes eligible once it succeeds.
// Only the first failure and the success are recorded.
func TestStartUnfenceRetries(t *testing.T) {
	w := newWorld(t, Config{Unfence: &UnfencePlan{Devices: []string{"scsi"}}})
	w.leader = "b"
	fails := 7
	w.unfence = func() (stonith.Record, bool) {
		rec := stonith.Record{Kind: stonith.KindUnfence, Target: "a", Action: stonith.ActionOn, Executor: "a", Outcome: stonith.OutcomeSuccess}
		if fails > 0 {
			fails--
			rec.Outcome, rec.Error = stonith.OutcomeFailed, "level 2: device scsi: try 1: failed: reservation conflict"
			return rec, false
		}
		return rec, true
	}
	w.drv.Start()
	w.run(2 * time.Second)
	if got := w.inel[SourceUnfence]; !strings.Contains(got, "reservation conflict") {
		t.Fatalf("ineligible %q", got)
	}
	w.run(5 * time.Minute)
	if w.tries != 8 || w.inel[SourceUnfence] != "" {
		t.Fatalf("%d tries, ineligible %q", w.tries, w.inel[SourceUnfence])
	}
	var capped bool
	for _, r := range w.reasons {
		capped = capped || strings.Contains(r, "next in 30s")
	}
	if !capped {
		t.Errorf("backoff never reached its cap: %q", w.reasons)
	}
	h := w.fsm.State().History
	if len(h) != 2 || h[0].Outcome != stonith.OutcomeFailed || h[1].Outcome != stonith.OutcomeSuccess {
		t.Errorf("history %+v", h)
	}
}

// The probe keeps the node ineligible until nothing of the group runs
// here, retrying with backoff.
func TestStartProbes(t *testing.T) {
	w := newWorld(t, Config{Probe: true})
	w.probes = []error{errors.New("resource vip runs here and could not be stopped"), errors.New("still")}
	w.drv.Start()
	if got := w.inel[SourceProbe]; got != "probing for resources left running here" {
		t.Fatalf("after Start: %q", got)
	}
	w.run(500 * time.Millisecond)
	if got := w.inel[SourceProbe]; !strings.Contains(got, "could not be stopped") {
		t.Fatalf("after a failed probe: %q", got)
	}
	w.run(5 * time.Second)
	if w.probed != 3 || w.inel[SourceProbe] != "" {
		t.Fatalf("%d probes, ineligible %q", w.probed, w.inel[SourceProbe])
	}
}
