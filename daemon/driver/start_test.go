package driver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith/fencing"
)

// A node that unfences itself at start is ineligible from Start on, runs
// nothing before it knows a cluster leader, then unfences, becomes
// eligible and records the success through the leader.
func TestStartUnfencesOnceJoined(t *testing.T) {
	w := newWorld(t, Config{Unfence: &UnfencePlan{Devices: []string{"scsi"}}})
	w.drv.Start()
	if got := w.inel[SourceUnfence]; !strings.Contains(got, "a cluster leader") || !strings.Contains(got, "scsi") {
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
	if len(h) != 1 || h[0].Kind != fencing.KindUnfence || h[0].Outcome != fencing.OutcomeSuccess || h[0].Target != "a" {
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
	w.unfence = func() (fencing.Record, bool) {
		rec := fencing.Record{Kind: fencing.KindUnfence, Target: "a", Action: fencing.ActionOn, Executor: "a", Outcome: fencing.OutcomeSuccess}
		if fails > 0 {
			fails--
			rec.Outcome, rec.Error = fencing.OutcomeFailed, "level 2: device scsi: try 1: failed: reservation conflict"
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
	if len(h) != 2 || h[0].Outcome != fencing.OutcomeFailed || h[1].Outcome != fencing.OutcomeSuccess {
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

// The unfence rule: a node fenced during this boot does not unfence
// itself; from another boot, or with an admin's unfence after the fence,
// it does; a fence of unknown boot counts as this boot's.
func TestUnfenceRule(t *testing.T) {
	fence := func(boot string) fencing.Record {
		return fencing.Record{Kind: fencing.KindFence, Target: "a", Action: fencing.ActionOff, Outcome: fencing.OutcomeSuccess,
			Executor: "b", Reason: "takeover by b at epoch 3", TargetBoot: boot}
	}
	own := fencing.Record{Kind: fencing.KindUnfence, Target: "a", Action: fencing.ActionOn, Outcome: fencing.OutcomeSuccess, RequestedBy: "a (start)"}
	admin := fencing.Record{Kind: fencing.KindUnfence, Target: "a", Action: fencing.ActionOn, Outcome: fencing.OutcomeFailed, RequestedBy: "root@b"}
	other := fencing.Record{Kind: fencing.KindFence, Target: "c", Action: fencing.ActionOff, Outcome: fencing.OutcomeSuccess, TargetBoot: "B1"}
	failed := fence("B1")
	failed.Outcome = fencing.OutcomeFailed
	for _, c := range []struct {
		name    string
		history []fencing.Record
		ok      bool
		why     string
	}{
		{"never fenced", []fencing.Record{other, own}, true, ""},
		{"fenced in another boot", []fencing.Record{fence("B0")}, true, ""},
		{"fenced during this boot", []fencing.Record{own, fence("B1"), other}, false, "during this boot"},
		{"its own unfence is no consent", []fencing.Record{fence("B1"), own}, false, "during this boot"},
		{"an admin's unfence after the fence", []fencing.Record{fence("B1"), admin}, true, ""},
		{"an admin's unfence before the fence", []fencing.Record{admin, fence("B1")}, false, "during this boot"},
		{"boot not known", []fencing.Record{fence("")}, false, "not known"},
		{"a failed fence cut nothing", []fencing.Record{fence("B0"), failed}, true, ""},
	} {
		ok, why := unfenceRule(c.history, "a", "B1")
		if ok != c.ok || !strings.Contains(why, c.why) || !ok && !strings.Contains(why, "fencectl unfence a") {
			t.Errorf("%s: %v, %q", c.name, ok, why)
		}
	}
}

// The unfence waits for the probe: a node whose probe cannot stop a
// leftover never unfences itself, and it asks the cluster to fence it
// (marked unclean: power levels only). Once the probe passes, the listing
// stays for a fence or an admin to clear, and the node does not unfence
// while it lasts (listedThisBoot): its leftovers may include what the
// probe cannot see. An admin's confirmation clears it; then it unfences.
func TestStartProbeFirstThenEscalates(t *testing.T) {
	w := newWorld(t, Config{Probe: true, Unfence: &UnfencePlan{Devices: []string{"scsi"}}, Boot: "B1"})
	w.leader = "b"
	w.commit(quorum.Command{Op: quorum.OpAcquire, Node: "a"})
	w.commit(quorum.Command{Op: quorum.OpState, Node: "a", Epoch: 1, State: quorum.HolderMounting, Boot: "B1"})
	w.probes = []error{errors.New("resource data runs here and could not be stopped")}
	w.drv.Start()
	w.run(500 * time.Millisecond)
	if w.tries != 0 {
		t.Fatalf("unfenced (%d) before the probe passed", w.tries)
	}
	v := w.fsm.Holders()
	if _, ok := v.Unclean["a"]; !ok || v.Unconfirmed["a"] != 1 {
		t.Fatalf("not marked unclean: %+v", v)
	}
	w.run(5 * time.Second)
	v = w.fsm.Holders()
	if _, ok := v.Unclean["a"]; !ok || v.Unconfirmed["a"] != 1 {
		t.Fatalf("the listing changed after the probe passed: %+v", v)
	}
	if w.tries != 0 || !strings.Contains(w.inel[SourceUnfence], "in this boot") || w.inel[SourceProbe] != "" {
		t.Fatalf("after the probe: %d unfences, ineligible %q", w.tries, w.ineligible())
	}
	w.commit(quorum.Command{Op: quorum.OpRecord, Record: &fencing.Record{Kind: fencing.KindConfirm, Target: "a",
		Outcome: fencing.OutcomeSuccess, RequestedBy: "root@b"}})
	w.run(2 * time.Second)
	if _, ok := w.fsm.Holders().Unconfirmed["a"]; ok {
		t.Fatal("the confirmation did not clear the listing")
	}
	if w.tries != 1 || w.inel[SourceUnfence] != "" {
		t.Fatalf("after the confirmation: %d unfences, ineligible %q", w.tries, w.ineligible())
	}
}

// A node listed as maybe running the group from a boot before this one
// unfences at once: that boot, and whatever it ran, is gone. Listed from
// this boot, it waits for the takeover's fence (found by the simulator: a
// restarted node began its unfence before the fence that cut it off was
// committed, and undid it while its successor ran the group).
func TestUnfenceListedFromAnEarlierBoot(t *testing.T) {
	for _, tc := range []struct {
		listedIn string
		unfences int
	}{{"B0", 1}, {"B1", 0}, {"", 0}} {
		w := newWorld(t, Config{Probe: true, Unfence: &UnfencePlan{Devices: []string{"scsi"}}, Boot: "B1"})
		w.leader = "b"
		w.commit(quorum.Command{Op: quorum.OpAcquire, Node: "a"})
		w.commit(quorum.Command{Op: quorum.OpState, Node: "a", Epoch: 1, State: quorum.HolderMounting, Boot: tc.listedIn})
		w.drv.Start()
		w.run(5 * time.Second)
		if w.tries != tc.unfences {
			t.Errorf("listed in boot %q, now B1: %d unfences, want %d (ineligible %q)", tc.listedIn, w.tries, tc.unfences, w.ineligible())
		}
	}
}

// A node fenced at the storage level during this boot stays ineligible
// and does not unfence, until an admin's fencectl unfence.
func TestStartUnfenceWaitsForConsent(t *testing.T) {
	w := newWorld(t, Config{Probe: true, Unfence: &UnfencePlan{Devices: []string{"scsi"}}, Boot: "B1"})
	w.leader = "b"
	w.commit(quorum.Command{Op: quorum.OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Target: "a", Action: fencing.ActionOff,
		Outcome: fencing.OutcomeSuccess, Executor: "b", TargetBoot: "B1", Scope: fencing.ScopeStorage}})
	w.drv.Start()
	w.run(10 * time.Second)
	if w.tries != 0 || !strings.Contains(w.inel[SourceUnfence], "during this boot") {
		t.Fatalf("%d unfences, ineligible %q", w.tries, w.inel[SourceUnfence])
	}
	w.commit(quorum.Command{Op: quorum.OpRecord, Record: &fencing.Record{Kind: fencing.KindUnfence, Target: "a", Action: fencing.ActionOn,
		Outcome: fencing.OutcomeSuccess, RequestedBy: "root@b"}})
	w.run(2 * time.Second)
	if w.tries != 1 || w.inel[SourceUnfence] != "" {
		t.Fatalf("after consent: %d unfences, ineligible %q", w.tries, w.inel[SourceUnfence])
	}
}

// A node that restarted knows the leader from a heartbeat before it has
// the leader's log: the fence that cut it off, committed after it stopped,
// is not in its history yet. It does not unfence until it has caught up
// (Log.Joined), and then sees that fence (found by the daemon suite's
// TestUnfenceWaitsForRebootOrConsent under load: a node unfenced itself in
// the boot it was fenced in).
func TestUnfenceWaitsUntilCaughtUp(t *testing.T) {
	w := newWorld(t, Config{Probe: true, Unfence: &UnfencePlan{Devices: []string{"scsi"}}, Boot: "B1"})
	w.leader, w.behind = "b", true
	w.drv.Start()
	w.run(5 * time.Second)
	if w.tries != 0 {
		t.Fatalf("%d unfences while behind the leader's log", w.tries)
	}
	// It catches up: the fence of this boot is there.
	w.commit(quorum.Command{Op: quorum.OpRecord, Record: &fencing.Record{Kind: fencing.KindFence, Target: "a", Action: fencing.ActionOff,
		Outcome: fencing.OutcomeSuccess, Executor: "b", TargetBoot: "B1", Scope: fencing.ScopeStorage}})
	w.behind = false
	w.run(5 * time.Second)
	if w.tries != 0 || !strings.Contains(w.inel[SourceUnfence], "during this boot") {
		t.Fatalf("after catching up: %d unfences, ineligible %q", w.tries, w.inel[SourceUnfence])
	}
}

// A self-fence that cannot reset the machine leaves the node listed as
// maybe running the group, marks it unclean, then exits.
func TestSelfFenceWithoutReset(t *testing.T) {
	w := newWorld(t, Config{Machine: tenure.Config{Storage: true}})
	w.leader = "b"
	w.commit(quorum.Command{Op: quorum.OpAcquire, Node: "a"})
	w.commit(quorum.Command{Op: quorum.OpState, Node: "a", Epoch: 1, State: quorum.HolderMounting})
	w.drv.act(tenure.SelfFence{Reason: "storage did not stop within 2s: umount: target is busy"})
	if w.drv.Done() {
		t.Fatal("done before the node was marked")
	}
	w.run(time.Second)
	v := w.fsm.Holders()
	if !strings.Contains(v.Unclean["a"], "could not reset itself") || v.Unconfirmed["a"] != 1 {
		t.Fatalf("not marked: %+v", v)
	}
	if len(w.exits) != 1 || len(w.resets) != 1 {
		t.Fatalf("resets %q, exits %q", w.resets, w.exits)
	}
	// With a reset under way, nothing of that.
	w2 := newWorld(t, Config{})
	w2.canReset = true
	w2.drv.act(tenure.SelfFence{Reason: "x"})
	w2.run(time.Second)
	if len(w2.exits) != 0 || len(w2.fsm.Holders().Unclean) != 0 {
		t.Fatalf("a resetting node exited or was marked: %q %+v", w2.exits, w2.fsm.Holders())
	}
}

// A fence records the boot its target may run the storage in (its mount
// intent's, else what it last advertised), and a node marked unclean is
// fenced through power levels only.
func TestFenceRecordsBootAndPowerOnlyForUnclean(t *testing.T) {
	w := newWorld(t, Config{})
	w.isLeader = true
	w.boots["b"], w.boots["c"] = "B-gossip", "C-gossip"
	w.commit(quorum.Command{Op: quorum.OpAcquire, Node: "b"})
	w.commit(quorum.Command{Op: quorum.OpState, Node: "b", Epoch: 1, State: quorum.HolderMounting, Boot: "B-intent"})
	w.commit(quorum.Command{Op: quorum.OpUnclean, Node: "b", Epoch: 1, Reason: "stop failed"})
	var recs []fencing.Record
	for _, n := range []string{"b", "c"} {
		w.drv.Fence(NewScope(context.Background()), FenceRequest{Target: n, Action: fencing.ActionOff}, func(r fencing.Record) { recs = append(recs, r) })
	}
	w.run(time.Second)
	if len(w.fences) != 2 || !w.fences[0].PowerOnly || w.fences[1].PowerOnly {
		t.Fatalf("requests %+v", w.fences)
	}
	if w.fences[0].TargetBoot != "B-intent" || w.fences[1].TargetBoot != "C-gossip" {
		t.Fatalf("boots %q %q", w.fences[0].TargetBoot, w.fences[1].TargetBoot)
	}
	h := w.fsm.State().History
	if len(recs) != 2 || h[0].TargetBoot != "B-intent" {
		t.Fatalf("records %+v, history %+v", recs, h)
	}
}
