package tenure

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var testTiming = Timing{Heartbeat: time.Second, Lease: 3 * time.Second, Margin: 500 * time.Millisecond, Grace: 2 * time.Second, FenceTimeout: 20 * time.Second}

const sec = Time(time.Second)

// rig drives one machine by hand: tests set the time, leadership and view,
// then step with an event and look at the actions.
type rig struct {
	t      *testing.T
	m      *Machine
	now    Time
	leader bool
	view   Committed
	// renew answers every Confirm at once with success, and leaves it out
	// of the actions step returns (for tests not about renewals).
	renew bool
}

func newRig(t *testing.T, mod func(*Config)) *rig {
	cfg := Config{Self: "a", Timing: testTiming, MonitorInterval: 2 * time.Second,
		Fenceable: map[string]bool{"a": true, "b": true, "c": true}}
	if mod != nil {
		mod(&cfg)
	}
	return &rig{t: t, m: New(cfg), now: 100 * sec, view: Committed{Unconfirmed: map[string]uint64{}}, renew: true}
}

func (r *rig) step(ev Event) []Action {
	r.t.Helper()
	acts := r.m.Step(Input{Now: r.now, Leader: r.leader, Committed: r.view, Event: ev})
	if w := r.m.Wake(r.now); w <= r.now {
		r.t.Fatalf("Wake(%v) = %v: not after now", r.now, w)
	}
	if !r.renew {
		return acts
	}
	var out []Action
	for _, a := range acts {
		if c, ok := a.(Confirm); ok {
			out = append(out, r.step(ConfirmDone{Epoch: c.Epoch, T0: c.T0})...)
			continue
		}
		out = append(out, a)
	}
	return out
}

func (r *rig) advance(d time.Duration) { r.now = r.now.Add(d) }

// want checks the phase and that acts holds exactly the given action types
// (in order).
func (r *rig) want(acts []Action, phase Phase, kinds ...Action) {
	r.t.Helper()
	if r.m.Phase() != phase {
		r.t.Fatalf("phase %s, want %s (actions %s)", r.m.Phase(), phase, names(acts))
	}
	var got, exp []string
	for _, a := range acts {
		got = append(got, fmt.Sprintf("%T", a))
	}
	for _, k := range kinds {
		exp = append(exp, fmt.Sprintf("%T", k))
	}
	if !reflect.DeepEqual(got, exp) {
		r.t.Fatalf("actions %v, want %v", names(acts), exp)
	}
}

// neverExpires steps through up to n of the machine's wake-ups (every
// fence failing) and fails the test on an Expire of what.
func (r *rig) neverExpires(n int, what string) {
	r.t.Helper()
	for range n {
		w := r.m.Wake(r.now)
		if w == Never {
			return
		}
		r.now = w
		for _, a := range r.step(nil) {
			switch a := a.(type) {
			case Expire:
				r.t.Fatalf("expired %s", what)
			case Fence:
				r.step(FenceDone{Epoch: a.Epoch, Failed: map[string]string{"b": "dead"}})
			}
		}
	}
}

func names(acts []Action) string {
	var s []string
	for _, a := range acts {
		s = append(s, fmt.Sprintf("%T%+v", a, a))
	}
	return "[" + strings.Join(s, " ") + "]"
}

func find[T Action](t *testing.T, acts []Action) T {
	t.Helper()
	for _, a := range acts {
		if v, ok := a.(T); ok {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T in %s", zero, names(acts))
	return zero
}

// grant runs the machine through an acquire of epoch e; the view then
// names this node as holder at e.
func (r *rig) grant(e uint64, g Grant) []Action {
	r.t.Helper()
	r.leader = true
	r.want(r.step(nil), Acquiring, Acquire{})
	r.view.Epoch, r.view.Holder, r.view.LeaseOf = e, "a", g.LeaseOf
	g.Epoch = e
	return r.step(AcquireDone{Grant: g})
}

// waitsFromGrant: a machine just granted (now) stays in the gate until
// lease + margin after it, then serves.
func (r *rig) waitsFromGrant() {
	r.t.Helper()
	until := r.now.Add(testTiming.Lease + testTiming.Margin)
	for r.now < until {
		acts := r.step(nil)
		if r.m.Phase() != Waiting {
			r.t.Fatalf("left the gate %s before lease + margin: %s", until.Sub(r.now), names(acts))
		}
		r.now = r.m.Wake(r.now)
	}
	r.want(r.step(nil), Serving, Record{})
}

// serve brings a machine with storage to Serving at epoch e.
func (r *rig) serve(e uint64) {
	r.t.Helper()
	r.want(r.grant(e, Grant{}), Mounting, MountIntent{})
	r.view.Unconfirmed["a"] = e
	r.want(r.step(MountIntentDone{Epoch: e}), Mounting, Start{})
	r.want(r.step(StartDone{Epoch: e}), Serving, Record{})
	if !r.m.Acting(r.now) {
		r.t.Fatal("serving but not acting")
	}
}

func TestSecondaryNotLeaderDoesNothing(t *testing.T) {
	r := newRig(t, nil)
	r.want(r.step(nil), Secondary)
	if r.m.Wake(r.now) != Never {
		t.Fatal("a follower with nothing to do wants a wake-up")
	}
	if r.m.Role() != RoleSecondary || r.m.Epoch() != 0 {
		t.Fatal(r.m.Role(), r.m.Epoch())
	}
}

func TestAcquireNoStorageNoFormer(t *testing.T) {
	r := newRig(t, nil)
	r.want(r.grant(1, Grant{}), Serving, Record{})
	if !r.m.Acting(r.now) || r.m.Epoch() != 1 || r.m.Role() != RolePrimary {
		t.Fatal("not acting after an uncontested grant")
	}
}

func TestAcquireFailureRetriesAfterHeartbeat(t *testing.T) {
	r := newRig(t, nil)
	r.leader = true
	r.want(r.step(nil), Acquiring, Acquire{})
	r.want(r.step(AcquireDone{Err: errors.New("leadership lost")}), Secondary)
	r.want(r.step(nil), Secondary)
	r.advance(testTiming.Heartbeat)
	r.want(r.step(nil), Acquiring, Acquire{})
}

func TestStorageStartsOnlyAfterMountIntent(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.serve(1)
	if r.m.Storage() != StorageRunning {
		t.Fatal(r.m.Storage())
	}
}

func TestMountIntentRefusedReleasesWithoutStop(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.want(r.grant(1, Grant{}), Mounting, MountIntent{})
	r.want(r.step(MountIntentDone{Epoch: 1, Err: errors.New("mount intent refused: b is not confirmed stopped")}), Releasing, Cancel{}, Release{})
	if r.m.Demotion().Reason != ReasonMountRefused {
		t.Fatal(r.m.Demotion())
	}
}

func TestLeaseExpiredBeforeStartDoesNotStart(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.want(r.grant(1, Grant{}), Mounting, MountIntent{})
	r.advance(testTiming.Lease - testTiming.Margin)
	acts := r.step(MountIntentDone{Epoch: 1})
	r.want(acts, Releasing, Cancel{}, Release{})
	if r.m.Demotion().Reason != ReasonLeaseExpired {
		t.Fatal(r.m.Demotion())
	}
}

func TestFormerLeaseWaitedOut(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Fenceable = map[string]bool{} })
	acts := r.grant(2, Grant{Previous: "b", LeaseOf: "b"})
	r.want(acts, Waiting, AskBound{})
	if ab := find[AskBound](t, acts); ab.Former != "b" || ab.Epoch != 2 {
		t.Fatal(ab)
	}
	r.waitsFromGrant()
}

func TestBoundShortensTheWait(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Fenceable = map[string]bool{} })
	r.want(r.grant(2, Grant{LeaseOf: "b"}), Waiting, AskBound{})
	bound := r.now.Add(-2 * time.Second) // the majority last heard from b 2s ago
	r.want(r.step(BoundDone{Epoch: 2, Bound: bound, OK: true}), Waiting)
	if w := r.m.formerEnd("b", r.m.lastCommitted); w != bound.Add(testTiming.Lease+testTiming.Margin) {
		t.Fatalf("wait ends %v, want bound + lease + margin %v", w, bound.Add(testTiming.Lease+testTiming.Margin))
	}
	r.now = bound.Add(testTiming.Lease + testTiming.Margin)
	r.want(r.step(nil), Serving, Record{})
	// A bound for another epoch, or not OK, is ignored.
	r2 := newRig(t, func(c *Config) { c.Fenceable = map[string]bool{} })
	r2.grant(2, Grant{LeaseOf: "b"})
	r2.step(BoundDone{Epoch: 1, Bound: 0, OK: true})
	r2.step(BoundDone{Epoch: 2, Bound: 0, OK: false})
	if w := r2.m.formerEnd("b", r2.m.lastCommitted); w != r2.now.Add(testTiming.Lease+testTiming.Margin) {
		t.Fatalf("ignored bound moved the wait: %v", w)
	}
}

func TestVanishedFormerIsFencedOnceAndFailureDoesNotBlock(t *testing.T) {
	r := newRig(t, nil)
	r.want(r.grant(2, Grant{LeaseOf: "b"}), Waiting, AskBound{})
	// It is given a moment to release (it may merely have lost
	// leadership); then it is fenced.
	r.now = r.m.vanishAt - 1
	r.want(r.step(nil), Waiting)
	r.now = r.m.vanishAt
	acts := r.step(nil)
	r.want(acts, Fencing, Record{}, Fence{})
	if f := find[Fence](t, acts); !reflect.DeepEqual(f.Targets, []string{"b"}) {
		t.Fatal(f.Targets)
	}
	// The fence failed: b was not running the storage, so its lease still
	// running out is enough.
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "BMC unreachable"}}), Waiting)
	r.advance(testTiming.Heartbeat / 2)
	r.want(r.step(nil), Waiting) // not fenced again
}

func TestFormerThatReleasesIsNotFenced(t *testing.T) {
	r := newRig(t, nil)
	r.want(r.grant(2, Grant{LeaseOf: "b"}), Waiting, AskBound{})
	// b lost leadership but is alive: its release arrives within the
	// moment it is given.
	r.advance(100 * time.Millisecond)
	r.view.LeaseOf = ""
	r.want(r.step(nil), Serving, Record{})
}

func TestConfirmedFenceOfFormerEndsTheWait(t *testing.T) {
	r := newRig(t, nil)
	r.grant(2, Grant{LeaseOf: "b"})
	r.view.LeaseOf = "" // the fence record cleared it
	r.want(r.step(FenceDone{Epoch: 2}), Serving, Record{})
}

func TestPendingHolderFencedThenBlockedWithBackoff(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.view.Unconfirmed["b"] = 1
	acts := r.grant(2, Grant{LeaseOf: "b"})
	r.want(acts, Fencing, AskBound{}, Record{}, Fence{})
	// From a quarter second, doubling, capped at a third of the lease.
	wantBackoff := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second, time.Second}
	// One block, however many retries: the replicated state is written
	// once (and again only when the reason changes), the reason holds
	// while a retry runs, and a retry records no "fencing" state.
	for i, b := range wantBackoff {
		acts = r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "every level failed"}})
		if i == 0 {
			r.want(acts, Blocked, Record{})
			if rec := find[Record](t, acts); rec.State != HolderBlocked || !strings.Contains(rec.Reason, "fence") {
				t.Fatal(rec)
			}
		} else {
			r.want(acts, Blocked)
		}
		if r.m.fenceAt != r.now.Add(b) {
			t.Fatalf("try %d: next fence in %s, want %s", i, r.m.fenceAt.Sub(r.now), b)
		}
		// Keep the lease alive while blocked.
		r.m.actingUntil = r.now.Add(time.Hour)
		r.now = r.m.fenceAt
		acts = r.step(nil)
		r.want(acts, Fencing, Fence{})
		if !strings.Contains(r.m.BlockedReason(), "every level failed") || !slices.Equal(r.m.BlockedOn(), []string{"b"}) {
			t.Fatalf("try %d: the block ended at the retry: %q on %v", i, r.m.BlockedReason(), r.m.BlockedOn())
		}
	}
	// Another reason is written.
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "BMC unreachable"}}), Blocked, Record{})
	r.m.actingUntil = r.now.Add(time.Hour)
	r.now = r.m.fenceAt
	r.want(r.step(nil), Fencing, Fence{})
	// The fence succeeds: b is confirmed stopped in the state, the lease
	// wait has long passed.
	delete(r.view.Unconfirmed, "b")
	r.view.LeaseOf = ""
	r.want(r.step(FenceDone{Epoch: 2}), Mounting, MountIntent{})
	if r.m.BlockedReason() != "" || !strings.Contains(r.m.Unblocked(), "fence of [b] was confirmed") {
		t.Fatalf("after the fence: blocked %q, unblocked %q", r.m.BlockedReason(), r.m.Unblocked())
	}
}

func TestUnfenceablePendingBlocksUntilConfirm(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true; c.Fenceable = map[string]bool{} })
	r.view.Unconfirmed["b"] = 1
	acts := r.grant(2, Grant{LeaseOf: "b"})
	r.want(acts, Blocked, AskBound{}, Record{})
	if !strings.Contains(r.m.BlockedReason(), "no fence devices") {
		t.Fatal(r.m.BlockedReason())
	}
	for range 100 { // waits; only renews
		r.now = r.m.Wake(r.now)
		r.want(r.step(nil), Blocked)
	}
	// An admin's confirmation clears b.
	delete(r.view.Unconfirmed, "b")
	r.view.LeaseOf = ""
	r.want(r.step(nil), Mounting, MountIntent{})
}

func TestRenewalsExtendTheLeaseAndSilenceEndsIt(t *testing.T) {
	r := newRig(t, nil)
	r.renew = false
	r.grant(1, Grant{})
	until := r.m.ActingUntil()
	if until != r.now.Add(testTiming.Lease-testTiming.Margin) {
		t.Fatalf("acting until %v", until)
	}
	r.advance(testTiming.Heartbeat)
	acts := r.step(nil)
	c := find[Confirm](t, acts)
	if c.T0 != r.now {
		t.Fatal(c)
	}
	r.advance(10 * time.Millisecond)
	r.step(ConfirmDone{Epoch: 1, T0: c.T0})
	if r.m.ActingUntil() != c.T0.Add(testTiming.Lease-testTiming.Margin) {
		t.Fatalf("renewal did not extend the lease from its start: %v", r.m.ActingUntil())
	}
	// No further confirmation: the lease ends exactly at t0 + lease − margin.
	r.now = r.m.ActingUntil() - 1
	r.step(ConfirmDone{Epoch: 1, T0: r.now, Err: errors.New("timeout")})
	if !r.m.Acting(r.now) {
		t.Fatal("stopped acting before the lease ended")
	}
	r.now++
	if r.m.Acting(r.now) {
		t.Fatal("acting at lease − margin")
	}
	r.want(r.step(nil), Releasing, Cancel{}, Release{})
	if r.m.Demotion().Reason != ReasonLeaseExpired {
		t.Fatal(r.m.Demotion())
	}
}

func TestOneRenewalInFlight(t *testing.T) {
	r := newRig(t, nil)
	r.renew = false
	r.grant(1, Grant{})
	r.advance(testTiming.Heartbeat)
	find[Confirm](t, r.step(nil))
	r.advance(testTiming.Heartbeat)
	for _, a := range r.step(nil) {
		if _, ok := a.(Confirm); ok {
			t.Fatal("second renewal while one is in flight")
		}
	}
}

func TestDemotionStopsWithinGraceThenReleases(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.serve(3)
	r.leader = false
	acts := r.step(nil)
	r.want(acts, Demoting, Cancel{}, Stop{})
	if s := find[Stop](t, acts); s.Deadline != r.now.Add(testTiming.Grace) {
		t.Fatal(s)
	}
	if r.m.Acting(r.now) || r.m.Role() != RoleDemoting {
		t.Fatal("acting while demoting")
	}
	acts = r.step(StopDone{Epoch: 3})
	r.want(acts, Releasing, Release{})
	if rel := find[Release](t, acts); rel.Epoch != 3 || rel.Reason != ReasonLostLeadership.String() {
		t.Fatal(rel)
	}
	r.want(r.step(ReleaseDone{Epoch: 3}), Secondary)
	if r.m.Demotion().Reason != ReasonLostLeadership {
		t.Fatal(r.m.Demotion())
	}
}

func TestFailedOrHungStopSelfFences(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.serve(1)
	r.leader = false
	r.step(nil)
	acts := r.step(StopDone{Epoch: 1, Err: errors.New("umount: target is busy")})
	r.want(acts, SelfFenced, SelfFence{})
	if r.step(nil) != nil || !r.m.Done() {
		t.Fatal("a self-fenced machine still acts")
	}

	r = newRig(t, func(c *Config) { c.Storage = true })
	r.serve(1)
	r.leader = false
	r.step(nil)
	r.advance(testTiming.Grace - 1)
	r.want(r.step(nil), Demoting)
	r.advance(1)
	r.want(r.step(nil), SelfFenced, SelfFence{})
}

func TestStartInFlightAtDemotionIsStoppedAfterItReturns(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.want(r.grant(1, Grant{}), Mounting, MountIntent{})
	r.want(r.step(MountIntentDone{Epoch: 1}), Mounting, Start{})
	r.leader = false
	r.want(r.step(nil), Demoting, Cancel{})
	r.want(r.step(StartDone{Epoch: 1, Err: errors.New("context canceled")}), Demoting, Stop{})
	r.want(r.step(StopDone{Epoch: 1}), Releasing, Release{})

	// A start that never returns: self-fence at the grace's end.
	r = newRig(t, func(c *Config) { c.Storage = true })
	r.grant(1, Grant{})
	r.step(MountIntentDone{Epoch: 1})
	r.leader = false
	r.step(nil)
	r.advance(testTiming.Grace)
	r.want(r.step(nil), SelfFenced, SelfFence{})
}

func TestMonitorFailureReleasesTransfersAndCoolsDown(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.serve(1)
	r.advance(2 * time.Second)
	r.m.actingUntil = r.now.Add(time.Hour)
	acts := r.step(nil)
	find[Monitor](t, acts)
	r.want(r.step(MonitorDone{Epoch: 1, Err: errors.New("mount gone")}), Demoting, Cancel{}, Stop{})
	r.want(r.step(StopDone{Epoch: 1}), Releasing, Release{})
	acts = r.step(ReleaseDone{Epoch: 1})
	r.want(acts, Secondary, Transfer{})
	if r.m.Demotion().Reason != ReasonMonitorFailed || !strings.Contains(r.m.Demotion().String(), "mount gone") {
		t.Fatal(r.m.Demotion())
	}
	// Still leader during the cooldown (no other node took it): no
	// acquire, only transfers, one at a time; a failed transfer keeps it
	// off primacy for another lease (the target may still win).
	r.want(r.step(nil), Secondary)
	r.want(r.step(TransferDone{Err: errors.New("leadership transfer timeout")}), Secondary)
	if r.m.cooldown != r.now.Add(testTiming.Lease) {
		t.Fatalf("cooldown ends in %s", r.m.cooldown.Sub(r.now))
	}
	for range 2 {
		r.now = r.m.Wake(r.now)
		r.want(r.step(nil), Secondary, Transfer{})
		r.want(r.step(TransferDone{}), Secondary)
	}
	// Leadership came back after all: once the cooldown is over, acquire.
	r.now = r.m.cooldown
	r.want(r.step(nil), Acquiring, Acquire{})
}

func TestHandoverReleasesBeforeTransfer(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.serve(4)
	// Many concurrent requests: one demotion, one transfer, to the last.
	r.want(r.step(HandoverAsked{To: "b"}), Demoting, Cancel{}, Stop{})
	r.want(r.step(HandoverAsked{To: "c"}), Demoting)
	r.want(r.step(StopDone{Epoch: 4}), Releasing, Release{})
	r.want(r.step(HandoverAsked{To: "c"}), Releasing)
	acts := r.step(ReleaseDone{Epoch: 4})
	r.want(acts, Secondary, Transfer{})
	if tr := find[Transfer](t, acts); tr.To != "c" {
		t.Fatal(tr)
	}
	if r.m.Demotion().Reason != ReasonHandover {
		t.Fatal(r.m.Demotion())
	}
}

func TestReleaseRetriedWhileLeader(t *testing.T) {
	r := newRig(t, nil)
	r.grant(1, Grant{})
	r.step(HandoverAsked{})
	busy := errors.New("leadership transfer in progress")
	for try := 1; try < releaseTries; try++ {
		r.want(r.step(ReleaseDone{Epoch: 1, Err: busy}), Releasing)
		r.now = r.m.Wake(r.now)
		r.want(r.step(nil), Releasing, Release{})
	}
	// Out of tries: give up (the successor fences), and still hand over.
	r.want(r.step(ReleaseDone{Epoch: 1, Err: busy}), Secondary, Transfer{})
}

func TestHandoverWhenNotHoldingTransfersAtOnce(t *testing.T) {
	r := newRig(t, nil)
	r.leader = true
	r.m.acquireAt = r.now.Add(time.Hour) // not acquiring right now
	acts := r.step(HandoverAsked{To: "b"})
	r.want(acts, Secondary, Transfer{})
	if find[Transfer](t, acts).To != "b" {
		t.Fatal(acts)
	}
	// A follower ignores it.
	r2 := newRig(t, nil)
	r2.want(r2.step(HandoverAsked{To: "b"}), Secondary)
}

func TestShutdown(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.serve(1)
	r.want(r.step(ShutdownAsked{}), Demoting, Cancel{}, Stop{})
	r.want(r.step(StopDone{Epoch: 1}), Releasing, Release{})
	r.want(r.step(ReleaseDone{Epoch: 1}), Stopped)
	if !r.m.Done() || r.m.Demotion().Reason != ReasonShutdown {
		t.Fatal(r.m.Phase(), r.m.Demotion())
	}
	r = newRig(t, nil)
	r.want(r.step(ShutdownAsked{}), Stopped)
	// Shutdown while the acquire is in flight: the grant is released.
	r = newRig(t, nil)
	r.leader = true
	r.step(nil)
	r.step(ShutdownAsked{})
	r.view.Epoch, r.view.Holder = 1, "a"
	r.want(r.step(AcquireDone{Grant: Grant{Epoch: 1}}), Releasing, Cancel{}, Release{})
}

func TestStandbyAndWitnessNeverAcquire(t *testing.T) {
	r := newRig(t, nil)
	r.grant(1, Grant{})
	r.view.Standby = map[string]bool{"a": true}
	r.want(r.step(nil), Releasing, Cancel{}, Release{})
	r.want(r.step(ReleaseDone{Epoch: 1}), Secondary, Transfer{})
	r.want(r.step(TransferDone{Err: errors.New("timeout")}), Secondary)
	r.advance(testTiming.Heartbeat)
	r.want(r.step(nil), Secondary, Transfer{})

	w := newRig(t, func(c *Config) { c.Witness = true })
	w.leader = true
	w.want(w.step(nil), Secondary, Transfer{})
	w.want(w.step(nil), Secondary) // one at a time
	w.want(w.step(TransferDone{Err: errors.New("timeout")}), Secondary)
	w.advance(testTiming.Heartbeat / 2)
	w.want(w.step(nil), Secondary) // once a heartbeat
	w.advance(testTiming.Heartbeat / 2)
	w.want(w.step(nil), Secondary, Transfer{})
}

func TestIneligibleNeverAcquires(t *testing.T) {
	r := newRig(t, nil)
	r.leader = true
	acts := r.m.Step(Input{Now: r.now, Leader: true, Committed: r.view, Ineligible: "unfencing at start failed"})
	r.want(acts, Secondary, Transfer{})
	r.step(TransferDone{Err: errors.New("no other voter")})
	r.now = r.m.cooldown
	// Eligible again: acquire.
	r.want(r.step(nil), Acquiring, Acquire{})
}

// With no other node that may hold primacy, an ineligible leader keeps
// leadership (ErrNoSuccessor): it asks again once a heartbeat, never
// acquires while ineligible, and acquires at once when it becomes eligible
// (no cooldown: no transfer was under way).
func TestIneligibleKeepsLeadershipWithoutSuccessor(t *testing.T) {
	r := newRig(t, nil)
	r.leader = true
	ineligible := func(ev Event) []Action {
		return r.m.Step(Input{Now: r.now, Leader: true, Committed: r.view, Ineligible: "config: waiting for a majority", Event: ev})
	}
	r.want(ineligible(nil), Secondary, Transfer{})
	r.want(ineligible(TransferDone{Err: ErrNoSuccessor}), Secondary)
	for i := 0; i < 3; i++ {
		r.advance(testTiming.Heartbeat / 2)
		r.want(ineligible(nil), Secondary)
		r.advance(testTiming.Heartbeat / 2)
		r.want(ineligible(nil), Secondary, Transfer{})
		r.want(ineligible(TransferDone{Err: ErrNoSuccessor}), Secondary)
	}
	if r.m.cooldown > r.now {
		t.Fatalf("a cooldown after keeping leadership: until %v, now %v", r.m.cooldown, r.now)
	}
	r.want(r.step(nil), Acquiring, Acquire{})
}

// A leader that is not ready yet (NotYet) neither acquires nor hands
// leadership on; once ready, it acquires.
func TestNotYetWaitsWithoutTransfer(t *testing.T) {
	r := newRig(t, nil)
	r.leader = true
	for range 3 {
		r.want(r.m.Step(Input{Now: r.now, Leader: true, Committed: r.view, NotYet: "opening fence device sessions"}), Secondary)
		r.advance(testTiming.Heartbeat)
	}
	r.want(r.step(nil), Acquiring, Acquire{})
}

func TestSupersededAndStaleViews(t *testing.T) {
	r := newRig(t, nil)
	r.grant(5, Grant{})
	stale := r.view
	stale.Epoch = 4
	if acts := r.m.Step(Input{Now: r.now, Leader: true, Committed: stale}); r.m.Phase() != Serving {
		t.Fatalf("a view older than the grant demoted: %s", names(acts))
	}
	r.view.Epoch, r.view.Holder = 6, "b"
	r.want(r.step(nil), Releasing, Cancel{}, Release{})
	if r.m.Demotion().Reason != ReasonSuperseded {
		t.Fatal(r.m.Demotion())
	}
}

func TestResultsOfAnotherTenureIgnored(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.serve(2)
	for _, ev := range []Event{StartDone{Epoch: 1, Err: errors.New("x")}, MonitorDone{Epoch: 1, Err: errors.New("x")},
		StopDone{Epoch: 1, Err: errors.New("x")}, FenceDone{Epoch: 1}, MountIntentDone{Epoch: 1, Err: errors.New("x")},
		ConfirmDone{Epoch: 1, T0: r.now.Add(time.Hour)}, ReleaseDone{Epoch: 1}, AcquireDone{Grant: Grant{Epoch: 9}}} {
		before := r.m.ActingUntil()
		r.want(r.step(ev), Serving)
		if r.m.ActingUntil() != before {
			t.Fatalf("%T of another tenure changed the lease", ev)
		}
	}
}

func TestTokenStorageTakesOverAtLeaseExpiry(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage, c.TokenStorage = true, true; c.Fenceable = map[string]bool{} })
	r.view.Unconfirmed["b"] = 1
	acts := r.grant(2, Grant{LeaseOf: "b"})
	r.want(acts, Waiting, AskBound{}) // no devices: wait, do not block
	// Its lease, and then its stop (up to grace), must have ended.
	end := r.now.Add(testTiming.Lease + testTiming.Margin + testTiming.Grace)
	for r.now < end {
		if acts := r.step(nil); r.m.Phase() != Waiting {
			t.Fatalf("left the wait %s before lease + margin + grace: %s", end.Sub(r.now), names(acts))
		}
		r.now = r.m.Wake(r.now)
	}
	acts = r.step(nil)
	r.want(acts, Waiting, Expire{})
	if e := find[Expire](t, acts); e.Targets["b"] != ExpiryLease {
		t.Fatal(e)
	}
	r.want(r.step(nil), Waiting) // one at a time
	// The record cleared b (and its lease).
	delete(r.view.Unconfirmed, "b")
	r.view.LeaseOf = ""
	r.want(r.step(ExpireDone{Epoch: 2}), Mounting, MountIntent{})
}

func TestTokenStorageFencesFirstAndBoundShortensTheWait(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage, c.TokenStorage = true, true })
	r.view.Unconfirmed["b"] = 1
	acts := r.grant(2, Grant{LeaseOf: "b"})
	r.want(acts, Fencing, AskBound{}, Record{}, Fence{})
	bound := r.now.Add(-2 * time.Second)
	r.step(BoundDone{Epoch: 2, Bound: bound, OK: true})
	// The fence fails: not blocked, the lease wait goes on and the fence
	// is retried meanwhile.
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "BMC unreachable"}}), Waiting)
	r.now = r.m.fenceAt
	r.want(r.step(nil), Fencing, Record{}, Fence{})
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "BMC unreachable"}}), Waiting)
	end := bound.Add(testTiming.Lease + testTiming.Margin + testTiming.Grace)
	// Time passes (renewals answered, fence retries failing) up to the
	// end of the wait: no expiry before it, one at it.
	var acts2 []Action
	for r.now < end {
		r.now = min(r.m.Wake(r.now), end)
		acts2 = r.step(nil)
		if r.m.Phase() == Fencing {
			acts2 = append(acts2, r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "BMC unreachable"}})...)
		}
		for _, a := range acts2 {
			if _, ok := a.(Expire); ok && r.now < end {
				t.Fatalf("expired %s before bound + lease + margin + grace", end.Sub(r.now))
			}
		}
	}
	if e := find[Expire](t, acts2); e.Targets["b"] != ExpiryLease {
		t.Fatal(e)
	}
}

func TestUncheckedResourceNeverExpires(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Storage, c.TokenStorage, c.Unchecked = true, true, true
		c.Fenceable = map[string]bool{}
	})
	r.view.Unconfirmed["b"] = 1
	r.want(r.grant(2, Grant{LeaseOf: "b"}), Blocked, AskBound{}, Record{})
	r.neverExpires(50, "a holder whose group runs a resource that checks no tokens")
	if r.m.Phase() != Blocked || !strings.Contains(r.m.BlockedReason(), "fencectl confirm") {
		t.Fatalf("phase %s, blocked %q", r.m.Phase(), r.m.BlockedReason())
	}
}

// Each holder's advertised timing is waited out, when longer than this
// node's: a holder still on a longer lease (a change of timing rolling
// through the cluster) is not outlived.
func TestAdvertisedTimingIsWaitedOut(t *testing.T) {
	long := testTiming
	long.Lease, long.Margin, long.Grace = 4*testTiming.Lease, 2*testTiming.Margin, 3*testTiming.Grace
	r := newRig(t, func(c *Config) { c.Fenceable = map[string]bool{} })
	r.view.Timings = map[string]Timing{"b": long}
	granted := r.now
	r.want(r.grant(2, Grant{LeaseOf: "b"}), Waiting, AskBound{})
	// A bound shortens the wait by b's own lease, not this node's.
	bound := r.now.Add(-time.Second)
	r.step(BoundDone{Epoch: 2, Bound: bound, OK: true})
	end := min(granted, bound).Add(long.Lease + long.Margin)
	for r.now < end {
		if acts := r.step(nil); r.m.Phase() != Waiting {
			t.Fatalf("left the gate %s before b's lease + margin: %s", end.Sub(r.now), names(acts))
		}
		r.now = r.m.Wake(r.now)
	}
	r.want(r.step(nil), Serving, Record{})

	// The watchdog level waits from b's lease too, and token expiry adds
	// b's grace.
	r = newRig(t, func(c *Config) { c.Storage, c.TokenStorage = true, true; c.Fenceable = map[string]bool{} })
	r.view.Unconfirmed["b"] = 1
	r.view.Timings = map[string]Timing{"b": long}
	granted = r.now
	r.grant(2, Grant{LeaseOf: "b"})
	end = granted.Add(long.Lease + long.Margin + long.Grace)
	for r.now < end {
		for _, a := range r.step(nil) {
			if _, ok := a.(Expire); ok {
				t.Fatalf("expired %s before b's lease + margin + grace", end.Sub(r.now))
			}
		}
		r.now = r.m.Wake(r.now)
	}
	if e := find[Expire](t, r.step(nil)); e.Targets["b"] != ExpiryLease {
		t.Fatal(e)
	}
}

func TestWithoutTokensOrWatchdogAFailedFenceBlocks(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.view.Unconfirmed["b"] = 1
	r.grant(2, Grant{LeaseOf: "b"})
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "dead"}}), Blocked, Record{})
	// Long after every lease: still blocked, never an Expire.
	for range 50 {
		r.neverExpires(1, "without token storage or watchdog")
		if r.m.Phase() == Mounting || r.m.Phase() == Serving {
			t.Fatal("passed the gate")
		}
	}
}

func TestWatchdogLevel(t *testing.T) {
	const wd = 10 * time.Second
	r := newRig(t, func(c *Config) { c.Storage = true; c.WatchdogLevel = map[string]bool{"b": true} })
	r.view.Unconfirmed["b"] = 1
	r.view.Watchdogs = map[string]time.Duration{"b": wd}
	r.grant(2, Grant{})
	granted := r.now
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "BMC shares the node's power"}}), Waiting)
	end := granted.Add(testTiming.Lease + testTiming.Margin + wd)
	for r.now < end {
		for _, a := range r.step(nil) {
			if _, ok := a.(Expire); ok {
				t.Fatalf("watchdog level passed %s early", end.Sub(r.now))
			}
			if f, ok := a.(Fence); ok {
				r.step(FenceDone{Epoch: f.Epoch, Failed: map[string]string{"b": "dead"}})
			}
		}
		r.now = r.m.Wake(r.now)
	}
	acts := r.step(nil)
	if e := find[Expire](t, acts); e.Targets["b"] != ExpiryWatchdog {
		t.Fatal(e)
	}

	// A node that advertised no armed watchdog never passes the level.
	r = newRig(t, func(c *Config) { c.Storage = true; c.WatchdogLevel = map[string]bool{"b": true} })
	r.view.Unconfirmed["b"] = 1
	r.grant(2, Grant{})
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "dead"}}), Blocked, Record{})
}

func TestReconfigured(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true; c.Fenceable = map[string]bool{} })
	r.view.Unconfirmed["b"] = 1
	r.grant(2, Grant{LeaseOf: "b"})
	if r.m.Phase() != Blocked {
		t.Fatal(r.m.Phase())
	}
	// The admin adds b's fence device and reloads: the takeover fences.
	cfg := r.m.cfg
	cfg.Fenceable = map[string]bool{"b": true}
	acts := r.step(Reconfigured{Config: cfg})
	r.want(acts, Fencing, Fence{}) // still blocked until the fence is confirmed
	if r.m.BlockedReason() == "" {
		t.Fatal("the block ended when the fence started")
	}
	// A timing change is not taken live.
	cfg.Timing.Lease *= 2
	r.step(Reconfigured{Config: cfg})
	if r.m.cfg.Timing.Lease != testTiming.Lease {
		t.Fatal("lease changed live")
	}
}

// Found by the simulator (daemon/tenure/sim, seed 4237): a leader that
// handed over while its target was down retried the transfer every
// heartbeat, as it should, but each failure restarted its cooldown, so it
// never acquired again: with raft's choice of target a dead node (the one
// with the highest replication index), no node acted, with a healthy
// majority, for good.
func TestFailingTransfersDoNotKeepOffPrimacyForever(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.serve(1)
	r.want(r.step(HandoverAsked{To: "b"}), Demoting, Cancel{}, Stop{})
	r.want(r.step(StopDone{Epoch: 1}), Releasing, Release{})
	r.want(r.step(ReleaseDone{Epoch: 1}), Secondary, Transfer{})
	timeout := 2 * testTiming.Raft().HeartbeatTimeout // raft's transfer timeout (leader's election timeout)
	r.advance(timeout)
	r.want(r.step(TransferDone{Err: errors.New("leadership transfer timeout")}), Secondary)
	limit := r.now.Add(testTiming.Lease + testTiming.Heartbeat)
	for r.m.Phase() == Secondary && r.now <= limit {
		r.now = r.m.Wake(r.now)
		for _, a := range r.step(nil) {
			if _, ok := a.(Transfer); ok {
				r.advance(timeout)
				r.step(TransferDone{Err: errors.New("leadership transfer timeout")})
			}
		}
	}
	if r.m.Phase() != Acquiring {
		t.Fatalf("still %s %s after the first failed transfer: its retries keep it off primacy", r.m.Phase(), r.now.Sub(limit.Add(-testTiming.Lease-testTiming.Heartbeat)))
	}
}

// Found with the simulator (daemon/tenure/sim, TestRegressions): the
// daemon of a holder crashed with the storage mounted (a crash leaves the
// mount), restarted, and its fresh machine later acquired a new epoch and
// gave it up before mounting (a handover, a lost leadership). It released
// at once, since this process never started the storage; the release at
// the newer epoch cleared the node's older mount intent from the
// replicated state, and the next holder mounted the storage while the old
// mount was still there. A node the replicated state lists as maybe
// running the storage must stop it before it releases.
func TestReleaseStopsStorageTheStateSaysMayRunHere(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.view.Unconfirmed["a"] = 1 // mounted at epoch 1, by the process before this one
	r.want(r.grant(4, Grant{LeaseOf: "b"}), Waiting, AskBound{})
	r.want(r.step(HandoverAsked{}), Demoting, Cancel{}, Stop{})
	r.want(r.step(StopDone{Epoch: 4}), Releasing, Release{})

	// Without such an entry nothing can run here: release at once.
	r = newRig(t, func(c *Config) { c.Storage = true })
	r.view.Unconfirmed["b"] = 1
	r.want(r.grant(4, Grant{LeaseOf: "b"}), Fencing, AskBound{}, Record{}, Fence{})
	r.want(r.step(HandoverAsked{}), Releasing, Cancel{}, Release{})
}

// Found by the simulator with fast leader detection (seed 2275, 7 nodes,
// no storage): n3 acted at epoch 1 and was paused; n6 was granted epoch 2
// and lost leadership before it passed its gate; n4, granted epoch 3, saw
// only n6 as the former holder, fenced it, and acted while n3's lease still
// ran. Every former since a holder last passed its gate must be waited out.
func TestOlderFormersAreWaitedOutToo(t *testing.T) {
	r := newRig(t, nil)
	r.view.Formers = map[string]uint64{"b": 1, "c": 2}
	r.want(r.grant(3, Grant{LeaseOf: "c"}), Waiting, AskBound{})
	granted := r.now
	r.now = r.m.vanishAt
	acts := r.step(nil)
	r.want(acts, Fencing, Record{}, Fence{})
	if f := find[Fence](t, acts); !reflect.DeepEqual(f.Targets, []string{"b", "c"}) {
		t.Fatalf("fences %v, want both formers", f.Targets)
	}
	// c is fenced and dropped from the state; b's fence failed: b's lease
	// is still waited out, from this grant.
	r.view.LeaseOf = ""
	delete(r.view.Formers, "c")
	r.want(r.step(FenceDone{Epoch: 3, Failed: map[string]string{"b": "BMC unreachable"}}), Waiting)
	for r.now < granted.Add(testTiming.Lease+testTiming.Margin) {
		if acts := r.step(nil); r.m.Phase() != Waiting {
			t.Fatalf("passed the gate %s before the older former's lease had certainly ended: %s", granted.Add(testTiming.Lease+testTiming.Margin).Sub(r.now), names(acts))
		}
		r.now = r.m.Wake(r.now)
	}
	r.want(r.step(nil), Serving, Record{})
}

// A node listed as maybe running the group while this one serves (its
// probe found a leftover it could not stop) is fenced by the holder, which
// keeps serving; a failed fence is retried with backoff; a node with no
// fence devices is left to an admin.
func TestServingHolderFencesANodeBesideIt(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.serve(2)
	r.view.Unconfirmed["b"] = 1
	acts := r.step(nil)
	f := find[Fence](t, acts)
	if len(f.Targets) != 1 || f.Targets[0] != "b" || !strings.Contains(f.Reason, "beside its holder a") {
		t.Fatalf("fence %+v", f)
	}
	r.want(r.step(nil), Serving) // one at a time
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "BMC unreachable"}}), Serving)
	r.want(r.step(nil), Serving) // backing off
	r.now = r.m.fenceAt
	find[Fence](t, r.step(nil))
	delete(r.view.Unconfirmed, "b") // the record cleared it
	r.want(r.step(FenceDone{Epoch: 2}), Serving)
	for end := r.now.Add(10 * time.Second); r.now < end; r.now = r.m.Wake(r.now) {
		for _, a := range r.step(nil) {
			switch a := a.(type) {
			case Fence:
				t.Fatal("fenced again after the record cleared it")
			case Monitor:
				r.step(MonitorDone{Epoch: a.Epoch})
			}
		}
	}
	if !r.m.Acting(r.now) {
		t.Fatal("the holder stopped acting")
	}
	// No devices: nothing to run.
	r2 := newRig(t, func(c *Config) { c.Storage = true; c.Fenceable = map[string]bool{"a": true} })
	r2.serve(2)
	r2.view.Unconfirmed["b"] = 1
	for _, a := range r2.step(nil) {
		if _, ok := a.(Fence); ok {
			t.Fatal("fenced a node without devices")
		}
	}
}

// A node marked unclean (its watchdog did not reset it: its probe found a
// leftover) is not confirmed by its watchdog level.
func TestUncleanNodeNotConfirmedByItsWatchdog(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Storage, c.Fenceable, c.WatchdogLevel = true, map[string]bool{}, map[string]bool{"b": true}
	})
	r.view.Unconfirmed["b"] = 1
	r.view.Watchdogs = map[string]time.Duration{"b": time.Second}
	r.view.Unclean = map[string]bool{"b": true}
	r.grant(2, Grant{LeaseOf: "b"})
	r.neverExpires(30, "an unclean node, by its watchdog")
	if r.m.Phase() != Blocked {
		t.Fatalf("phase %s", r.m.Phase())
	}
}

// TestOffLeaderWaitsFromTheGrant: a group held off the raft leader asks no
// lease bound (it asks about contacts with a raft leader, which bound
// nothing of such a holder): the successor waits lease + margin from its
// grant.
func TestOffLeaderWaitsFromTheGrant(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Fenceable = map[string]bool{}; c.OffLeader = true })
	r.want(r.grant(2, Grant{Previous: "b", LeaseOf: "b"}), Waiting)
	r.waitsFromGrant()
}

// TestConfirmedWhileFencingCancelsTheFence: a takeover whose fence of the
// former holder is still running (a dead BMC, retried) when an admin
// confirms the node stopped goes on, and cancels that fence: left
// running, it would power off the node once it is back and booting again
// (the nemesis saw it: a confirmed node, restarted, powered off by the
// fence's next try). A fence that also covers a vanished former is not
// cancelled: that one is fenced whatever happens.
func TestConfirmedWhileFencingCancelsTheFence(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Storage = true })
	r.view.Unconfirmed["b"] = 1
	r.want(r.grant(2, Grant{LeaseOf: "b"}), Fencing, AskBound{}, Record{}, Fence{})
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "no answer"}}), Blocked, Record{})
	r.m.actingUntil = r.now.Add(time.Hour)
	r.now = r.m.fenceAt
	r.want(r.step(nil), Fencing, Fence{})
	// `fencectl confirm b` commits while the retry runs.
	delete(r.view.Unconfirmed, "b")
	r.view.LeaseOf = ""
	r.want(r.step(nil), Mounting, Cancel{}, MountIntent{})
	// Its late result changes nothing.
	r.want(r.step(FenceDone{Epoch: 2, Failed: map[string]string{"b": "cancelled"}}), Mounting)
}

// TestVanishedFormerFenceNotCancelled: a fence of a former holder that
// vanished runs on when the lease wait ends (a node that disappears
// uncleanly is fenced).
func TestVanishedFormerFenceNotCancelled(t *testing.T) {
	r := newRig(t, nil)
	r.want(r.grant(2, Grant{LeaseOf: "b"}), Waiting, AskBound{})
	r.now = r.m.vanishAt
	r.want(r.step(nil), Fencing, Record{}, Fence{})
	r.view.LeaseOf = "" // its lease certainly over, the fence still running
	r.want(r.step(nil), Serving, Record{})
}
