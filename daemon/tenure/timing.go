package tenure

import (
	"fmt"
	"math"
	"time"
)

// Time is a point on the boot-time monotonic clock (CLOCK_BOOTTIME), in
// nanoseconds. The machine never reads a clock: the driver, or a simulator,
// passes Time in with every step.
type Time int64

// Never is later than every reachable time.
const Never Time = math.MaxInt64

// Add returns t+d, saturating instead of wrapping: a deadline computed from
// an absurd duration is "never", not a moment in the past. (A wrapped
// lease + margin would let a successor skip its wait.)
func (t Time) Add(d time.Duration) Time {
	switch {
	case d > 0 && t > Never-Time(d):
		return Never
	case d < 0 && t < math.MinInt64-Time(d):
		return math.MinInt64
	}
	return t + Time(d)
}

// Sub returns t−u, saturating.
func (t Time) Sub(u Time) time.Duration {
	switch {
	case u < 0 && t > math.MaxInt64+u:
		return math.MaxInt64
	case u > 0 && t < math.MinInt64+u:
		return math.MinInt64
	}
	return time.Duration(t - u)
}

// Before reports t < u.
func (t Time) Before(u Time) bool { return t < u }

// Timing is every lease parameter. The rules that relate them live here,
// next to the code that relies on them; config validation reports what
// Check finds.
type Timing struct {
	// Heartbeat is how often a holder re-confirms its majority.
	Heartbeat time.Duration
	// Lease is how long one confirmation lets the holder act.
	Lease time.Duration
	// Margin covers clock-rate differences and the delay between reading
	// the clock and acting: the holder stops at lease − margin, a
	// successor waits lease + margin.
	Margin time.Duration
	// Grace is what a demotion (stop, unmount, release) may take before
	// the node self-fences.
	Grace time.Duration
	// FenceTimeout bounds one device action with its read-back.
	FenceTimeout time.Duration
}

// Bounds of each parameter. Outside them a cluster is either unsafe (sums
// that overflow, a successor that cannot tell a lease from forever) or
// useless (a 3ns lease burns a core granting epochs; a fence that must
// answer in a nanosecond never succeeds).
const (
	MinLease        = 500 * time.Millisecond
	MaxLease        = 10 * time.Minute
	MinHeartbeat    = 50 * time.Millisecond
	MinGrace        = 100 * time.Millisecond
	MinFenceTimeout = time.Second
	MaxFenceTimeout = 10 * time.Minute
	// MinMarginFraction: margin ≥ lease/MinMarginFraction. Quartz clocks
	// drift by well under 0.1 %; the rest of the margin covers scheduling
	// delays between reading the clock and acting on it.
	MinMarginFraction = 20
)

// Problem is one broken rule, for the field (its configuration key under
// `timing`) that should change.
type Problem struct {
	Field string
	Msg   string
}

// Check returns every rule t breaks. Each duration is checked against its
// bounds first; the relations between them are checked only when all are
// in bounds, so no sum below can overflow.
func (t Timing) Check() []Problem {
	var ps []Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, Problem{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	within := func(field string, d, lo, hi time.Duration) bool {
		switch {
		case d <= 0:
			add(field, "must be > 0, got %s", d)
		case d < lo:
			add(field, "%s is below the minimum %s", d, lo)
		case d > hi:
			add(field, "%s is above the maximum %s", d, hi)
		default:
			return true
		}
		return false
	}
	ok := within("lease", t.Lease, MinLease, MaxLease)
	// The others are bounded by the lease below; their own upper bound
	// here only keeps the checks from overflowing.
	ok = within("heartbeat", t.Heartbeat, MinHeartbeat, MaxLease) && ok
	ok = within("margin", t.Margin, 1, MaxLease) && ok
	ok = within("grace", t.Grace, MinGrace, MaxLease) && ok
	within("fence_timeout", t.FenceTimeout, MinFenceTimeout, MaxFenceTimeout)
	if !ok {
		return ps
	}
	if t.Heartbeat >= t.Lease {
		add("heartbeat", "%s must be less than timing.lease (%s)", t.Heartbeat, t.Lease)
	}
	if t.Grace >= t.Lease {
		add("grace", "%s must be less than timing.lease (%s)", t.Grace, t.Lease)
	}
	if lo := t.Lease / MinMarginFraction; t.Margin < lo {
		add("margin", "%s is too small for clock drift and scheduling delays: at least lease/%d = %s", t.Margin, MinMarginFraction, lo)
	}
	if t.Margin*2 >= t.Lease {
		add("margin", "%s must be less than half of timing.lease (%s)", t.Margin, t.Lease)
	} else if t.Heartbeat*2 > t.Lease-t.Margin {
		// At least two renewals must fit in a lease, or one lost
		// heartbeat demotes a healthy primary.
		add("heartbeat", "%s is too long: two heartbeats must fit in lease − margin (%s)", t.Heartbeat, t.Lease-t.Margin)
	}
	return ps
}

// ActingUntil is how long a holder whose renewal started at t0 (and was
// stored by a majority) may act: t0 + lease − margin.
func (t Timing) ActingUntil(t0 Time) Time { return t0.Add(t.Lease - t.Margin) }

// SuccessorWait is when a successor may act without a confirmation that
// the former holder stopped, given a point after which that holder renewed
// no more: bound + lease + margin. The margin on each side covers the
// clocks of two machines running at slightly different rates.
func (t Timing) SuccessorWait(bound Time) Time { return bound.Add(t.Lease).Add(t.Margin) }

// RaftTimings are the failure-detection settings, derived from the lease.
type RaftTimings struct {
	// HeartbeatTimeout is hashicorp/raft's own: how long a follower waits
	// without raft traffic before it stands for election (randomised up to
	// twice that). It is a fallback, set long so that TCP retransmissions
	// under packet loss are not taken for a dead leader; also raft's
	// ElectionTimeout, LeaderLeaseTimeout and CommitTimeout.
	HeartbeatTimeout time.Duration
	// Detect is how long a leader may be silent (neither raft traffic nor
	// its UDP beacons) before a follower acts on it (quorum.Detector).
	Detect time.Duration
	// Stagger separates the followers' moments of acting, so that their
	// candidacies do not split the vote.
	Stagger time.Duration
}

// Raft derives the failure-detection timings. A quarter of the lease for
// detection: a dead leader is replaced well inside the successor's wait for
// its lease (which runs from the old holder's last contact), and eight
// beacons (Detect/8 apart) must be lost in a row before silence is
// suspected. raft's own timeout is the whole lease.
func (t Timing) Raft() RaftTimings {
	detect := max(t.Lease/4, 50*time.Millisecond)
	return RaftTimings{
		HeartbeatTimeout: max(t.Lease, 100*time.Millisecond),
		Detect:           detect,
		Stagger:          min(max(detect/20, 5*time.Millisecond), 50*time.Millisecond),
	}
}

// PollInterval is how often the driver polls the lease clock while a
// tenure runs when it has no boot-time timer (quorum.BootTimer): Go's
// timers run on CLOCK_MONOTONIC, which stands still while the machine is
// suspended, whereas the lease is measured on CLOCK_BOOTTIME. A quarter of
// the margin (and of the heartbeat), so the lateness stays well inside the
// margin that covers it.
func (t Timing) PollInterval() time.Duration {
	return min(max(min(t.Heartbeat, t.Margin)/4, 5*time.Millisecond), 250*time.Millisecond)
}
