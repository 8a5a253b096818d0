package tenure

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Phase is where a node is in (or out of) a tenure.
type Phase uint8

// Phases, in the order a tenure moves through them.
const (
	Secondary  Phase = iota // not holding an epoch
	Acquiring               // leads raft; the acquire entry is in flight
	Waiting                 // granted; waiting for the former holder's lease or for confirmations
	Fencing                 // granted; fencing nodes that may still run the storage
	Blocked                 // granted; a node that may run the storage could not be fenced
	Mounting                // past the gate; mount intent in flight, then the storage starting
	Serving                 // acting as primary
	Demoting                // giving up: the storage stopping
	Releasing               // the storage stopped (or never ran); the release in flight
	Stopped                 // shut down; nothing more happens
	SelfFenced              // the storage could not be stopped: the node resets itself
)

var phaseNames = [...]string{"secondary", "acquiring", "waiting", "fencing", "blocked", "mounting", "serving",
	"demoting", "releasing", "stopped", "self-fenced"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// Roles a node reports (status, gossip, metrics).
const (
	RoleSecondary    = "secondary"
	RolePrimaryElect = "primary-elect" // holds an epoch, not yet allowed to act
	RolePrimary      = "primary"
	RoleDemoting     = "demoting"
	RoleStopping     = "stopping"
)

// Roles lists every role, for metrics.
var Roles = []string{RoleSecondary, RolePrimaryElect, RolePrimary, RoleDemoting, RoleStopping}

// Storage states a node reports.
const (
	StorageStopped  = "stopped"
	StorageStarting = "starting"
	StorageRunning  = "running"
	StorageStopping = "stopping"
	StorageFailed   = "failed"
)

// Reason is why a tenure ended.
type Reason uint8

// Reasons a tenure ends.
const (
	ReasonNone           Reason = iota
	ReasonLeaseExpired          // no confirmed majority contact for lease − margin
	ReasonLostLeadership        // raft leadership moved
	ReasonSuperseded            // the replicated state names another holder or a newer epoch
	ReasonHandover              // an admin asked (transfer, SIGTERM is ReasonShutdown)
	ReasonStandby               // this node was put in standby
	ReasonMountRefused          // the mount intent was not committed
	ReasonStartFailed           // the storage failed to start
	ReasonMonitorFailed         // the storage's monitor failed
	ReasonShutdown              // the daemon is stopping
)

var reasonText = [...]string{
	ReasonNone:           "",
	ReasonLeaseExpired:   "lease expired: no confirmed majority contact for lease − margin",
	ReasonLostLeadership: "lost raft leadership",
	ReasonSuperseded:     "superseded",
	ReasonHandover:       "graceful handover",
	ReasonStandby:        "standby requested",
	ReasonMountRefused:   "mount intent not committed",
	ReasonStartFailed:    "start storage",
	ReasonMonitorFailed:  "storage monitor failed",
	ReasonShutdown:       "shutting down",
}

func (r Reason) String() string {
	if int(r) < len(reasonText) {
		return reasonText[r]
	}
	return fmt.Sprintf("reason(%d)", r)
}

// StorageFault reports a reason that means the storage failed here: after
// the clean release, another node should take over, and this one should
// not grab primacy straight back.
func (r Reason) StorageFault() bool { return r == ReasonStartFailed || r == ReasonMonitorFailed }

// Demotion is why a tenure ended, with the error behind it, if any.
type Demotion struct {
	Reason Reason
	Detail string
}

func (d Demotion) String() string {
	if d.Detail == "" {
		return d.Reason.String()
	}
	return d.Reason.String() + ": " + d.Detail
}

// Committed is the part of the replicated state the rules read, as this node
// has applied it.
type Committed struct {
	Epoch       uint64
	Holder      string
	HolderState string
	// LeaseOf is a former holder that neither released nor was confirmed
	// stopped: its lease may still run. Formers are all such holders since
	// a holder last passed its gate (LeaseOf the newest), with the epoch
	// each held.
	LeaseOf string
	Formers map[string]uint64
	// Unconfirmed are the nodes that may still run the storage, with the
	// epoch they committed a mount intent at.
	Unconfirmed map[string]uint64
	Standby     map[string]bool
	// Watchdogs are the watchdog timeouts nodes in Unconfirmed advertised
	// with their mount intent.
	Watchdogs map[string]time.Duration
	// Timings are the lease timings holders advertised with their grant
	// and mount intent (Lease, Margin and Grace): what a successor must
	// wait out for each, whatever its own timing (a change of timing
	// rolling through the cluster leaves holders on the old one).
	Timings map[string]Timing
	// Unclean are nodes that said something of the group may still run
	// on them that they could neither stop nor reset themselves away
	// (their watchdog, if they advertised one, did not reset them).
	Unclean map[string]bool
}

// Grant is a committed acquire: this node holds Epoch.
type Grant struct {
	Epoch    uint64
	Previous string // the holder before this grant
	LeaseOf  string // the newest former holder whose lease may still run
}

// Holder states the machine records for status (the replicated state's
// own words: package quorum uses the same strings).
const (
	HolderFencing = "fencing"
	HolderBlocked = "blocked"
	HolderMounted = "mounted"
)

// Config is what a machine knows of its node and cluster. It does not
// change during the machine's life.
type Config struct {
	Self   string
	Timing Timing
	// Storage is set when a resource runs under the tenure.
	Storage bool
	// MonitorInterval is how often the storage is monitored while serving.
	MonitorInterval time.Duration
	// Witness nodes vote but never hold primacy.
	Witness bool
	// Fenceable lists the nodes that have fence devices.
	Fenceable map[string]bool
	// TokenStorage: the storage refuses writes with an epoch below the
	// highest it has seen, so a former holder that cannot be fenced is
	// taken over once its lease and its stop deadline have certainly
	// ended — provided nothing else of the group runs there unchecked
	// (Unchecked).
	TokenStorage bool
	// Unchecked: the group runs a resource that checks no tokens (a
	// floating address, a service). Lease expiry then confirms nothing: a
	// holder whose daemon crashed leaves such a resource running, and
	// nothing tells a successor that its stop ever ran; only a fence, the
	// watchdog or an admin does.
	Unchecked bool
	// WatchdogLevel lists the nodes whose topology ends with the
	// watchdog level.
	WatchdogLevel map[string]bool
	// OffLeader: the group's holder need not be the raft leader (a
	// resource group other than the default one, docs/groups.md). Input's
	// Leader is then "the group is placed on this node", and the former
	// holder's lease is waited out from the grant (or ended by a fence or
	// a release): the lease-bound question asks about contacts with a
	// raft leader, which says nothing of a holder that renews through the
	// log from anywhere.
	OffLeader bool
}

// How a node that may run the storage was confirmed stopped without a
// fence (the kinds of the records the driver commits for an Expire).
const (
	ExpiryLease    = "lease-expiry" // its lease ended; the storage checks tokens
	ExpiryWatchdog = "watchdog"     // its lease and its advertised watchdog timeout ended
)

// ErrNoSuccessor is TransferDone's error when no other node may hold
// primacy now, so leadership was not handed on.
var ErrNoSuccessor = errors.New("no other node may hold primacy now")

// Input is one step's worth of the world: the time, whether this node is
// raft leader, the replicated state as applied here, and at most one event.
type Input struct {
	Now Time
	// Leader: this node leads raft (Config.OffLeader: the group is placed
	// on this node).
	Leader    bool
	Committed Committed
	// Ineligible, when set, says why this node may not take primacy now
	// (e.g. its unfencing at start failed, or a resource found running
	// where it must not be could not be stopped). It holds no tenure; a
	// holding tenure is not ended by it.
	Ineligible string
	// NotYet, when set, says why this node, eligible, does not take
	// primacy yet (it opens the fence device sessions a takeover needs,
	// for a bounded time): unlike Ineligible, a leader keeps leadership
	// meanwhile, and acquires once it is clear.
	NotYet string
	Event  Event // nil: time passed or the state changed
}

// Event is the result of an action, or a request from outside.
type Event interface{ event() }

// Results of actions. Epoch ties a result to the tenure that asked; a
// result for another tenure is ignored.
type (
	AcquireDone struct {
		Grant Grant
		Err   error
	}
	ConfirmDone struct {
		Epoch uint64
		T0    Time
		Err   error
	}
	BoundDone struct {
		Epoch uint64
		Bound Time // on this node's clock; valid when OK
		OK    bool
	}
	// FenceDone reports a Fence: Failed holds each target that was not
	// confirmed off, with why.
	FenceDone struct {
		Epoch  uint64
		Failed map[string]string
	}
	MountIntentDone struct {
		Epoch uint64
		Err   error
	}
	StartDone struct {
		Epoch uint64
		Err   error
	}
	MonitorDone struct {
		Epoch uint64
		Err   error
	}
	StopDone struct {
		Epoch uint64
		Err   error
	}
	ReleaseDone struct {
		Epoch uint64
		Err   error
	}
	ExpireDone struct {
		Epoch uint64
		Err   error
	}
)

// Requests from outside.
type (
	// HandoverAsked: release cleanly, then move leadership to To ("" = any).
	HandoverAsked struct{ To string }
	// TransferDone reports a Transfer.
	TransferDone struct{ Err error }
	// Reconfigured replaces the machine's configuration (a live reload:
	// fence topology, storage, monitor interval). Self and Timing must not
	// change: a lease cannot change length while it runs, so a timing
	// change needs a restart.
	Reconfigured struct{ Config Config }
	// ShutdownAsked: release cleanly and stop.
	ShutdownAsked struct{}
)

func (AcquireDone) event()     {}
func (ConfirmDone) event()     {}
func (BoundDone) event()       {}
func (FenceDone) event()       {}
func (MountIntentDone) event() {}
func (StartDone) event()       {}
func (MonitorDone) event()     {}
func (StopDone) event()        {}
func (ReleaseDone) event()     {}
func (ExpireDone) event()      {}
func (HandoverAsked) event()   {}
func (TransferDone) event()    {}
func (Reconfigured) event()    {}
func (ShutdownAsked) event()   {}

// Action is something the driver does and, where it has a result, reports
// back as an Event.
type Action interface{ action() }

// Actions.
type (
	// Acquire commits a grant of the next epoch to this node → AcquireDone.
	// The grant is the first renewal of its lease, begun at T0.
	Acquire struct{ T0 Time }
	// Confirm commits a barrier created after T0 → ConfirmDone.
	Confirm struct {
		Epoch uint64
		T0    Time
	}
	// AskBound asks a majority when each last heard from Former →
	// BoundDone (see BoundOf).
	AskBound struct {
		Epoch  uint64
		Former string
	}
	// Record commits the holder state for status (best effort, no event).
	Record struct {
		Epoch  uint64
		State  string
		Reason string
	}
	// Fence powers Targets off, confirms by read-back and commits the
	// records → FenceDone.
	Fence struct {
		Epoch   uint64
		Targets []string
		Reason  string
	}
	// MountIntent commits that this node starts the storage at Epoch →
	// MountIntentDone. The replicated state refuses it while another node
	// may still run the storage.
	MountIntent struct{ Epoch uint64 }
	// Start starts the storage with Epoch as its token → StartDone.
	Start struct {
		Epoch    uint64
		Previous string
	}
	// Expire commits, for each target, that it is confirmed stopped
	// without a fence (Targets: node → ExpiryLease or ExpiryWatchdog) →
	// ExpireDone.
	Expire struct {
		Epoch   uint64
		Targets map[string]string
	}
	// Monitor checks the storage → MonitorDone.
	Monitor struct{ Epoch uint64 }
	// Stop stops the storage, giving up at Deadline → StopDone.
	Stop struct {
		Epoch    uint64
		Deadline Time
	}
	// Release commits that this node holds nothing at Epoch any more →
	// ReleaseDone.
	Release struct {
		Epoch  uint64
		Reason string
	}
	// Transfer hands raft leadership to To ("" = raft's choice) →
	// TransferDone. No acquire happens while it runs. A TransferDone with
	// ErrNoSuccessor says no other node may hold primacy: leadership
	// stayed here.
	Transfer struct{ To string }
	// Cancel abandons the in-flight work of Epoch's tenure (a fence, a
	// bound query, a start or a monitor): its results no longer matter.
	Cancel struct{ Epoch uint64 }
	// SelfFence resets the node: it may still run the storage and cannot
	// prove otherwise.
	SelfFence struct{ Reason string }
)

func (Acquire) action()     {}
func (Confirm) action()     {}
func (AskBound) action()    {}
func (Record) action()      {}
func (Fence) action()       {}
func (MountIntent) action() {}
func (Start) action()       {}
func (Monitor) action()     {}
func (Stop) action()        {}
func (Release) action()     {}
func (Transfer) action()    {}
func (Cancel) action()      {}
func (Expire) action()      {}
func (SelfFence) action()   {}

// Backoff of fence retries while blocked.
const (
	firstBackoff = 250 * time.Millisecond
	// releaseTries bounds the attempts to commit a release while leader.
	releaseTries = 3
)

// Machine is one node's tenure state. The zero value is not usable: call
// New. A Machine is not safe for concurrent use; the driver owns it.
type Machine struct {
	cfg Config

	phase    Phase
	stopping bool

	// The tenure (valid from Waiting to Releasing).
	epoch       uint64
	previous    string // holder before this grant (for the storage)
	t0          Time   // start of the acquire
	actingUntil Time
	grantAt     Time // when the grant committed: every earlier renewal came before
	bound       Time // the majority's bound on LeaseOf's last renewal (when bounded)
	vanishAt    Time // a former that has not released by then is fenced
	fenceFailed map[string]bool
	expiring    bool            // an Expire is under way
	expireAt    Time            // next Expire attempt after a failed one
	bounded     bool            // bound was learned
	triedFormer map[string]bool // former holders fenced once (they vanished)
	// fenceOfPending: the fence under way (Fencing) is of nodes that may
	// run the storage only, no vanished former: once they are all
	// confirmed stopped some other way (an admin's confirmation, a
	// release), it is cancelled rather than left to power off a node that
	// may have started again since.
	fenceOfPending bool
	fenceAt        Time // next fence attempt while Blocked (or serving)
	backoff        time.Duration
	serveFence     bool // a fence of a node beside this one runs while serving
	// blocked says why the takeover is blocked. It holds from the first
	// failed fence until a fence is confirmed, or the nodes it waited for
	// are released or confirmed, or the tenure ends: the retries in
	// between (phase Fencing again) do not end it, so status, metrics and
	// alerts see one block, not one per attempt.
	blocked     string
	blockedOn   []string // the nodes it waits for
	unblocked   string   // why the last block ended (Unblocked)
	nextRenew   Time
	confirming  bool
	starting    bool
	monitoring  bool
	nextMonitor Time
	demotion    Demotion
	stopBy      Time // self-fence if the storage has not stopped by then
	stopAsked   bool
	releases    int  // release attempts
	releaseAt   Time // next release attempt
	storage     string

	// Between tenures.
	acquireAt    Time // next acquire attempt
	cooldown     Time // no acquire before (after a storage fault here)
	transferAt   Time // next leadership transfer attempt (standby, witness)
	handover     *string
	transferring bool
	// transferCooling: the running transfer began during a cooldown.
	transferCooling bool
	lastCommitted   Committed
	leader          bool
}

// New returns the machine of a node that holds nothing.
func New(cfg Config) *Machine {
	return &Machine{cfg: cfg, storage: StorageStopped, backoff: firstBackoff}
}

// Phase is the machine's phase.
func (m *Machine) Phase() Phase { return m.phase }

// Epoch is the epoch this node holds, or 0.
func (m *Machine) Epoch() uint64 {
	if m.inTenure() {
		return m.epoch
	}
	return 0
}

// Acting reports whether this node may act as primary at now.
func (m *Machine) Acting(now Time) bool { return m.phase == Serving && now < m.actingUntil }

// ActingUntil is when this node's right to act ends (0 when it has none).
func (m *Machine) ActingUntil() Time {
	if m.phase < Waiting || m.phase > Serving {
		return 0
	}
	return m.actingUntil
}

// Storage is the storage's state as this node runs it.
func (m *Machine) Storage() string { return m.storage }

// BlockedReason says why a takeover is blocked ("" when it is not),
// while it retries too.
func (m *Machine) BlockedReason() string {
	if m.phase != Blocked && m.phase != Fencing {
		return ""
	}
	return m.blocked
}

// BlockedOn lists the nodes a blocked takeover waits for.
func (m *Machine) BlockedOn() []string {
	if m.BlockedReason() == "" {
		return nil
	}
	return slices.Clone(m.blockedOn)
}

// Unblocked says why the last block of this tenure ended ("" if none
// did): a fence confirmed, or the nodes confirmed stopped otherwise.
func (m *Machine) Unblocked() string { return m.unblocked }

// unblock ends a block, saying why.
func (m *Machine) unblock(why string) {
	if m.blocked != "" {
		m.blocked, m.blockedOn, m.unblocked = "", nil, why
	}
}

// Demotion is why the last tenure ended.
func (m *Machine) Demotion() Demotion { return m.demotion }

// Done reports that the machine will do nothing more (stopped or
// self-fenced).
func (m *Machine) Done() bool { return m.phase == Stopped || m.phase == SelfFenced }

// Role is the role this node reports.
func (m *Machine) Role() string {
	switch m.phase {
	case Waiting, Fencing, Blocked, Mounting:
		return RolePrimaryElect
	case Serving:
		return RolePrimary
	case Demoting, Releasing, SelfFenced:
		return RoleDemoting
	}
	if m.stopping {
		return RoleStopping
	}
	return RoleSecondary
}

func (m *Machine) inTenure() bool { return m.phase >= Waiting && m.phase <= Releasing }

// holding reports a tenure that has not begun to give up yet.
func (m *Machine) holding() bool { return m.phase >= Waiting && m.phase <= Serving }

// Wake returns the earliest moment after now at which the machine needs a
// step even if nothing happens (Never: only an event or a change of
// leadership or state can move it).
func (m *Machine) Wake(now Time) Time {
	w := Never
	at := func(ts ...Time) {
		for _, t := range ts {
			if t > now && t < w {
				w = t
			}
		}
	}
	switch {
	case m.holding():
		at(m.actingUntil)
		if !m.confirming {
			at(m.nextRenew)
		}
		switch m.phase {
		case Waiting, Blocked:
			at(m.vanishAt, m.fenceAt, m.expireAt)
			for _, f := range m.formers(m.lastCommitted) {
				at(m.formerEnd(f, m.lastCommitted))
			}
			for _, n := range m.pending(m.lastCommitted) {
				if e, _, ok := m.expiry(n, m.lastCommitted); ok {
					at(e)
				}
			}
		case Serving:
			if m.cfg.Storage && !m.monitoring {
				at(m.nextMonitor)
			}
			if !m.serveFence && len(m.besides(m.lastCommitted)) > 0 {
				at(m.fenceAt)
			}
		}
	case m.phase == Demoting:
		at(m.stopBy)
	case m.phase == Releasing:
		if m.releaseAt != 0 {
			at(m.releaseAt)
		}
	case m.phase == Secondary && m.leader && !m.transferring:
		at(m.acquireAt, m.cooldown, m.transferAt)
	}
	return w
}

// Step advances the machine by one input and returns what to do.
func (m *Machine) Step(in Input) []Action {
	if m.Done() {
		return nil
	}
	m.lastCommitted, m.leader = in.Committed, in.Leader
	var acts []Action
	if e := in.Event; e != nil {
		acts = m.handle(in, e)
	}
	return append(acts, m.advance(in)...)
}

// handle applies an event.
func (m *Machine) handle(in Input, e Event) []Action {
	t := m.cfg.Timing
	switch e := e.(type) {
	case HandoverAsked:
		to := e.To
		m.handover = &to
	case ShutdownAsked:
		m.stopping = true
	case Reconfigured:
		if e.Config.Self == m.cfg.Self && e.Config.Timing == m.cfg.Timing {
			m.cfg = e.Config
		}
	case TransferDone:
		m.transferring = false
		if errors.Is(e.Err, ErrNoSuccessor) {
			// Nobody to hand it to (every node is a witness, a standby
			// or ineligible): keep leadership rather than hand the same
			// refusal around in a new term a second. Nothing is started
			// here (idle acquires only what this node may hold); look
			// again in a heartbeat. No cooldown: no transfer is under way
			// that this node could race.
			m.transferAt = in.Now.Add(t.Heartbeat)
			break
		}
		if e.Err != nil {
			// raft gave up waiting, but the target may still win the
			// election it was told to start: grabbing primacy back now
			// would make this node a former holder that the winner
			// fences. Keep off it for a lease; retry the transfer (for a
			// standby or witness) in a heartbeat. A transfer started
			// during a cooldown does not extend it when it fails: a target
			// that never answers (raft may keep picking a dead node) would
			// keep this node off primacy for good, and the cluster
			// without a primary.
			m.transferAt = in.Now.Add(t.Heartbeat)
			if !m.transferCooling {
				m.cooldown = max(m.cooldown, in.Now.Add(t.Lease))
			}
		}
	case AcquireDone:
		if m.phase != Acquiring {
			return nil
		}
		if e.Err != nil {
			m.phase = Secondary
			m.acquireAt = in.Now.Add(t.Heartbeat)
			return nil
		}
		g := e.Grant
		m.phase = Waiting
		m.epoch, m.previous = g.Epoch, g.Previous
		m.actingUntil = t.ActingUntil(m.t0)
		// The acquire committed after every former holder's last renewal
		// did: waiting lease + margin from here covers those leases; a
		// majority's answers may bound the newest's sooner (formerEnd).
		m.grantAt = in.Now
		m.vanishAt = in.Now.Add(min(t.Heartbeat, t.Lease/4))
		m.fenceFailed, m.expiring, m.expireAt = map[string]bool{}, false, 0
		m.bounded, m.triedFormer = false, map[string]bool{}
		m.backoff, m.fenceAt, m.blocked, m.serveFence = firstBackoff, 0, "", false
		m.blockedOn, m.unblocked = nil, ""
		m.nextRenew = m.t0.Add(t.Heartbeat)
		m.confirming, m.starting, m.monitoring, m.stopAsked = false, false, false, false
		m.releases, m.releaseAt = 0, 0
		m.demotion = Demotion{}
		m.storage = StorageStopped
		if f := g.LeaseOf; f != "" && f != m.cfg.Self && !m.cfg.OffLeader {
			return []Action{AskBound{Epoch: m.epoch, Former: f}}
		}
	case ConfirmDone:
		if !m.holding() || e.Epoch != m.epoch {
			return nil
		}
		m.confirming = false
		if e.Err == nil {
			m.actingUntil = max(m.actingUntil, t.ActingUntil(e.T0))
		}
	case BoundDone:
		if e.Epoch != m.epoch || !m.holding() || !e.OK || m.bounded {
			return nil
		}
		m.bounded, m.bound = true, e.Bound
	case FenceDone:
		if e.Epoch == m.epoch && m.phase == Serving && m.serveFence {
			m.serveFence = false
			// (After a success too: the record that clears the node may
			// not be applied here yet.)
			m.fenceAt = in.Now.Add(m.backoff)
			if len(e.Failed) > 0 {
				m.backoff = min(m.backoff*2, m.maxBackoff())
			} else {
				m.backoff = firstBackoff
			}
			return nil
		}
		if e.Epoch != m.epoch || m.phase != Fencing {
			return nil
		}
		var why, failed []string
		for _, n := range m.pending(in.Committed) {
			if msg, ok := e.Failed[n]; ok {
				m.fenceFailed[n] = true
				why = append(why, n+": "+msg)
				failed = append(failed, n)
			}
		}
		if len(why) == 0 {
			m.phase = Waiting
			m.backoff = firstBackoff
			m.unblock(fmt.Sprintf("the fence of %v was confirmed", m.blockedOn))
			return nil
		}
		// Retry the fence with backoff; meanwhile a node whose lease
		// expiry or watchdog confirms it stopped is waited for instead
		// of blocking (see gate).
		m.fenceAt = in.Now.Add(m.backoff)
		if !m.anyBlocked(in.Committed) {
			m.phase = Waiting
			m.backoff = min(m.backoff*2, m.maxBackoff())
			m.unblock("only waits for leases or watchdogs are left")
			return nil
		}
		m.phase = Blocked
		m.backoff = min(m.backoff*2, m.maxBackoff())
		// The replicated state is written when the reason changes, not
		// at each retry (the history folds the retries: quorum.FSM).
		reason := fmt.Sprintf("every fence path failed (%s); retrying with backoff; `fencectl confirm NODE --yes` overrides", strings.Join(why, "; "))
		if reason == m.blocked {
			return nil
		}
		m.blocked, m.blockedOn = reason, failed
		return []Action{Record{Epoch: m.epoch, State: HolderBlocked, Reason: m.blocked}}
	case ExpireDone:
		if e.Epoch != m.epoch || !m.expiring {
			return nil
		}
		m.expiring = false
		if e.Err != nil {
			m.expireAt = in.Now.Add(t.Heartbeat) // try again in a heartbeat
		}
	case MountIntentDone:
		if e.Epoch != m.epoch || m.phase != Mounting || m.starting {
			return nil
		}
		if e.Err != nil {
			return m.demote(in, ReasonMountRefused, e.Err.Error())
		}
		if in.Now >= m.actingUntil {
			return m.demote(in, ReasonLeaseExpired, "before the storage started")
		}
		m.starting = true
		m.storage = StorageStarting
		return []Action{Start{Epoch: m.epoch, Previous: m.previous}}
	case StartDone:
		if e.Epoch != m.epoch || !m.starting {
			return nil
		}
		m.starting = false
		if e.Err != nil {
			m.storage = StorageFailed
			if m.phase == Mounting {
				return m.demote(in, ReasonStartFailed, e.Err.Error())
			}
			return nil // already demoting: the stop follows (advance)
		}
		m.storage = StorageRunning
		if m.phase != Mounting {
			return nil
		}
		m.phase = Serving
		m.nextMonitor = in.Now.Add(m.cfg.MonitorInterval)
		return []Action{Record{Epoch: m.epoch, State: HolderMounted}}
	case MonitorDone:
		if e.Epoch != m.epoch || !m.monitoring {
			return nil
		}
		m.monitoring = false
		m.nextMonitor = in.Now.Add(m.cfg.MonitorInterval)
		if e.Err != nil && m.phase == Serving {
			return m.demote(in, ReasonMonitorFailed, e.Err.Error())
		}
	case StopDone:
		if e.Epoch != m.epoch || m.phase != Demoting {
			return nil
		}
		if e.Err != nil {
			m.storage = StorageFailed
			return m.selfFence(fmt.Sprintf("storage did not stop within %s: %v", t.Grace, e.Err))
		}
		m.storage = StorageStopped
		return m.release(in)
	case ReleaseDone:
		if e.Epoch != m.epoch || m.phase != Releasing {
			return nil
		}
		if e.Err != nil && in.Leader && m.releases < releaseTries {
			// Still leading: the commit failed for a passing reason
			// (e.g. a leadership transfer under way); try again.
			m.releaseAt = in.Now.Add(t.Heartbeat / 2)
			return nil
		}
		return m.released(in)
	}
	return nil
}

// advance does what the current phase, time and state call for.
func (m *Machine) advance(in Input) []Action {
	t := m.cfg.Timing
	var acts []Action
	if m.holding() {
		if d, ok := m.mustDemote(in); ok {
			acts = m.demote(in, d.Reason, d.Detail)
		} else if in.Now >= m.nextRenew && !m.confirming {
			m.confirming = true
			acts = append(acts, Confirm{Epoch: m.epoch, T0: in.Now})
			m.nextRenew = in.Now.Add(t.Heartbeat)
		}
	}
	switch m.phase {
	case Secondary:
		return append(acts, m.idle(in)...)
	case Waiting, Fencing, Blocked:
		return append(acts, m.gate(in)...)
	case Serving:
		if m.cfg.Storage && !m.monitoring && in.Now >= m.nextMonitor {
			m.monitoring = true
			acts = append(acts, Monitor{Epoch: m.epoch})
		}
		acts = append(acts, m.fenceBesides(in)...)
	case Demoting:
		if m.starting {
			// A start in flight ends first (its context is cancelled);
			// then the storage is stopped.
			if in.Now >= m.stopBy {
				return m.selfFence(fmt.Sprintf("storage start did not return within %s of the demotion", t.Grace))
			}
			break
		}
		if !m.stopAsked {
			m.stopAsked = true
			m.storage = StorageStopping
			acts = append(acts, Stop{Epoch: m.epoch, Deadline: m.stopBy})
		} else if in.Now >= m.stopBy {
			m.storage = StorageFailed
			return m.selfFence(fmt.Sprintf("storage did not stop within %s", t.Grace))
		}
	case Releasing:
		if m.releaseAt != 0 && in.Now >= m.releaseAt {
			m.releaseAt = 0
			return append(acts, m.releaseAction())
		}
	}
	return acts
}

// mustDemote reports why a holding tenure must end now, if it must.
func (m *Machine) mustDemote(in Input) (Demotion, bool) {
	v := in.Committed
	switch {
	case in.Now >= m.actingUntil:
		return Demotion{Reason: ReasonLeaseExpired}, true
	case !in.Leader:
		return Demotion{Reason: ReasonLostLeadership}, true
	case v.Epoch > m.epoch || v.Epoch == m.epoch && v.Holder != m.cfg.Self:
		// (A view older than the grant says nothing: it has not applied
		// the acquire yet.)
		return Demotion{Reason: ReasonSuperseded, Detail: fmt.Sprintf("epoch %d superseded by %s at %d", m.epoch, v.Holder, v.Epoch)}, true
	case m.stopping:
		return Demotion{Reason: ReasonShutdown}, true
	case m.handover != nil:
		return Demotion{Reason: ReasonHandover}, true
	case v.Standby[m.cfg.Self]:
		return Demotion{Reason: ReasonStandby}, true
	}
	return Demotion{}, false
}

// idle is a node that holds nothing: acquire when it leads and may hold,
// otherwise hand leadership on.
func (m *Machine) idle(in Input) []Action {
	if m.stopping {
		m.phase = Stopped
		return nil
	}
	if !in.Leader {
		m.handover = nil // only a leader hands over
		return nil
	}
	if m.transferring {
		return nil // leadership is on its way elsewhere
	}
	if m.handover != nil {
		to := *m.handover
		m.handover = nil
		return m.transfer(in, to)
	}
	if m.cfg.Witness || in.Committed.Standby[m.cfg.Self] || in.Ineligible != "" || in.Now < m.cooldown {
		// Never primary here (a witness, a standby or ineligible node, or
		// a node whose storage just failed): let another node lead.
		if in.Now >= m.transferAt {
			return m.transfer(in, "")
		}
		return nil
	}
	if in.NotYet != "" || in.Now < m.acquireAt {
		// Not yet: handing leadership on would cost an election, and
		// the follower it goes to may be the leader that just died.
		return nil
	}
	m.phase = Acquiring
	m.t0 = in.Now
	return []Action{Acquire{T0: in.Now}}
}

// pending lists the nodes other than this one that may still run the
// storage.
func (m *Machine) pending(v Committed) []string {
	var ns []string
	for n := range v.Unconfirmed {
		if n != m.cfg.Self {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns
}

// gate is the takeover gate: the tenure passes once every node that may
// still run the storage is confirmed stopped, and the former holder's
// lease has certainly run out (or it is confirmed stopped).
func (m *Machine) gate(in Input) []Action {
	v := in.Committed
	if v.Epoch != m.epoch {
		return nil // the grant is not applied here yet
	}
	pending := m.pending(v)
	// Every former holder's lease must have certainly ended, or the former
	// be confirmed stopped (the replicated state then drops it). The
	// newest's end may be bounded by a majority's answers (leaseEnd); the
	// older ones' renewals all came before this grant (grantEnd).
	var formers []string
	leaseWait := false
	for _, f := range m.formers(v) {
		formers = append(formers, f)
		leaseWait = leaseWait || in.Now < m.formerEnd(f, v)
	}
	// A former holder that vanished without releasing is fenced too when
	// it has fence devices, once per tenure, even if it never ran the
	// storage: a node that disappears uncleanly is fenced, and a confirmed
	// fence also ends the wait for its lease early. If that fence fails,
	// its lease still runs out and the takeover goes on. It is given a
	// moment first (vanishAt): a former that is alive and merely lost
	// leadership releases within it, and is then not powered off (which,
	// with a bare majority up, would cost the cluster its majority).
	var vanished []string
	for _, f := range formers {
		if !slices.Contains(pending, f) && !m.triedFormer[f] && m.cfg.Fenceable[f] && in.Now < m.formerEnd(f, v) {
			vanished = append(vanished, f)
		}
	}
	if len(pending) == 0 && !leaseWait && len(vanished) == 0 {
		var acts []Action
		if m.phase == Fencing && m.fenceOfPending {
			// Confirmed stopped while its fence still runs (an admin's
			// `fencectl confirm`, a release): the fence would only power
			// off a node that may be starting again.
			acts = append(acts, Cancel{Epoch: m.epoch})
		}
		return append(acts, m.pass()...)
	}
	if m.phase == Fencing || m.expiring {
		return nil // a fence, or the record of an expiry, is under way
	}
	// A node that may run the storage is confirmed stopped by a fence when
	// it has devices; only when it has none, or the fence failed, by its
	// lease certainly ending (storage that checks tokens) or by the
	// watchdog it advertised. Otherwise only an admin's confirmation helps.
	due := map[string]string{}
	var stuck []string
	for _, n := range pending {
		if m.cfg.Fenceable[n] && !m.fenceFailed[n] {
			continue // its fence comes first
		}
		at, kind, ok := m.expiry(n, v)
		switch {
		case ok && in.Now >= at && in.Now >= m.expireAt:
			due[n] = kind
		case ok:
			// its lease (and watchdog) not certainly over yet: wait
		case !m.cfg.Fenceable[n]:
			stuck = append(stuck, n)
		}
	}
	if len(due) > 0 {
		m.expiring = true
		return []Action{Expire{Epoch: m.epoch, Targets: due}}
	}
	if len(stuck) > 0 {
		why := fmt.Sprintf("%v may still run the storage and %s no fence devices (and the storage does not check tokens): waiting for `fencectl confirm`",
			stuck, map[bool]string{true: "has", false: "have"}[len(stuck) == 1])
		if m.phase != Blocked || m.blocked != why {
			m.phase, m.blocked, m.blockedOn = Blocked, why, stuck
			return []Action{Record{Epoch: m.epoch, State: HolderBlocked, Reason: why}}
		}
		return nil
	}
	var targets []string
	for _, n := range pending {
		if m.cfg.Fenceable[n] {
			targets = append(targets, n)
		}
	}
	if in.Now >= m.vanishAt {
		targets = append(targets, vanished...)
	} else {
		vanished = nil
	}
	if len(targets) == 0 || in.Now < m.fenceAt {
		if m.phase == Blocked && !m.anyBlocked(v) {
			m.phase = Waiting // confirmations arrived, or only waits are left
			m.unblock("the nodes it waited for are confirmed stopped")
		}
		return nil
	}
	for _, f := range vanished {
		m.triedFormer[f] = true
	}
	m.fenceOfPending = len(vanished) == 0
	fence := Fence{Epoch: m.epoch, Targets: targets, Reason: fmt.Sprintf("takeover by %s at epoch %d", m.cfg.Self, m.epoch)}
	if m.phase == Blocked {
		// A retry: the takeover stays blocked until a fence is confirmed.
		m.phase = Fencing
		return []Action{fence}
	}
	m.phase = Fencing
	return []Action{Record{Epoch: m.epoch, State: HolderFencing, Reason: fmt.Sprintf("fencing %v", targets)}, fence}
}

// besides lists the fenceable nodes other than this one that the
// replicated state lists as maybe running the storage while this node
// serves: a node whose probe found something of the group left running
// that it could not stop.
func (m *Machine) besides(v Committed) []string {
	var ns []string
	for _, n := range m.pending(v) {
		if m.cfg.Fenceable[n] {
			ns = append(ns, n)
		}
	}
	return ns
}

// fenceBesides fences, while this node serves, a node that may run the
// group beside it: it runs what this node runs, and fencing it is the only
// way to stop that. This node's tenure goes on meanwhile (what runs here
// is its own), retrying with backoff.
func (m *Machine) fenceBesides(in Input) []Action {
	targets := m.besides(in.Committed)
	if len(targets) == 0 || m.serveFence || in.Now < m.fenceAt {
		return nil
	}
	m.serveFence = true
	return []Action{Fence{Epoch: m.epoch, Targets: targets,
		Reason: fmt.Sprintf("%v may run the group beside its holder %s (epoch %d)", targets, m.cfg.Self, m.epoch)}}
}

// maxBackoff caps the pause between fence attempts while blocked: a third
// of the lease (at least a quarter second), so a device that comes back
// (a BMC rebooted, a switch port fixed) is used within about a second at
// default timings. Each attempt is bounded by the devices' own timeouts.
func (m *Machine) maxBackoff() time.Duration {
	return min(max(m.cfg.Timing.Lease/3, 250*time.Millisecond), 30*time.Second)
}

// formers lists the former holders whose leases may still run, this node
// excepted (its own former tenure ended in this process, or in one that
// stopped before this one could acquire).
func (m *Machine) formers(v Committed) []string {
	set := map[string]bool{}
	if v.LeaseOf != "" {
		set[v.LeaseOf] = true
	}
	for f := range v.Formers {
		set[f] = true
	}
	delete(set, m.cfg.Self)
	return slices.Sorted(maps.Keys(set))
}

// formerEnd is when node f's lease has certainly ended, by the longer of
// its advertised timing and this node's: lease + margin after the grant
// (every renewal of f's came before it), or for the newest former holder
// after the point a majority bounds its last renewal by, if sooner.
func (m *Machine) formerEnd(f string, v Committed) Time {
	t := m.timingOf(f, v)
	end := t.SuccessorWait(m.grantAt)
	if f == v.LeaseOf && m.bounded {
		end = min(end, t.SuccessorWait(m.bound))
	}
	return end
}

// timingOf is the timing to wait out for node f: field by field the
// longer of what f advertised and this node's own.
func (m *Machine) timingOf(f string, v Committed) Timing {
	t := m.cfg.Timing
	if a, ok := v.Timings[f]; ok {
		t.Lease, t.Margin, t.Grace = max(t.Lease, a.Lease), max(t.Margin, a.Margin), max(t.Grace, a.Grace)
	}
	return t
}

// expiry returns when node n, which may still run the storage, is
// certainly stopped without a fence, and how ("lease-expiry" or "watchdog");
// ok is false when neither path applies.
//
// n's last renewal started before this node's grant committed (a renewal
// is a barrier of n's term, and this grant is of a later one), so n stopped
// acting at the latest a lease after the grant (formerEnd; for the former
// holder a majority's answers may bound it sooner, BoundOf), by the longer
// of n's advertised timing and this node's. A watchdog n armed and fed
// only while its lease was valid has reset it by then plus its timeout.
// Storage that checks tokens refuses n's late writes from then on; but n
// may still be stopping what it ran for up to its grace, and only when
// every resource of the group checks tokens does that not matter: a
// resource that does not (Unchecked) is left running by a holder whose
// daemon crashed, and nothing says its stop ever ran.
func (m *Machine) expiry(n string, v Committed) (at Time, kind string, ok bool) {
	base := m.formerEnd(n, v)
	switch {
	case m.cfg.TokenStorage && !m.cfg.Unchecked:
		return base.Add(m.timingOf(n, v).Grace), ExpiryLease, true
	case m.cfg.WatchdogLevel[n] && v.Watchdogs[n] > 0 && !v.Unclean[n]:
		return base.Add(v.Watchdogs[n]), ExpiryWatchdog, true
	}
	return 0, "", false
}

// anyBlocked reports a node that may run the storage and can be
// confirmed stopped by nothing but a fence that failed, or an admin.
func (m *Machine) anyBlocked(v Committed) bool {
	for _, n := range m.pending(v) {
		if _, _, ok := m.expiry(n, v); ok {
			continue
		}
		if !m.cfg.Fenceable[n] || m.fenceFailed[n] {
			return true
		}
	}
	return false
}

// pass leaves the gate: commit the mount intent, or with no storage start
// serving at once.
func (m *Machine) pass() []Action {
	m.unblock("the nodes it waited for are confirmed stopped")
	if !m.cfg.Storage {
		m.phase = Serving
		return []Action{Record{Epoch: m.epoch, State: HolderMounted}}
	}
	m.phase = Mounting
	return []Action{MountIntent{Epoch: m.epoch}}
}

// demote is the graceful expiry: stop acting at once, stop the storage
// within grace (or self-fence), then record the release.
func (m *Machine) demote(in Input, r Reason, detail string) []Action {
	m.demotion = Demotion{Reason: r, Detail: detail}
	m.actingUntil = 0
	m.confirming, m.monitoring, m.serveFence = false, false, false
	acts := []Action{Cancel{Epoch: m.epoch}}
	// A release says nothing runs here. This process may not have started
	// what runs (a crashed daemon leaves the storage mounted): while the
	// replicated state lists this node as maybe running it, stop it first.
	_, mayRun := in.Committed.Unconfirmed[m.cfg.Self]
	if m.storage == StorageStopped && !m.starting && !(m.cfg.Storage && mayRun) {
		return append(acts, m.release(in)...)
	}
	m.phase = Demoting
	m.stopBy = in.Now.Add(m.cfg.Timing.Grace)
	m.stopAsked = false
	return acts // the stop is asked by advance
}

// release records that nothing runs any more, so the successor needs
// neither a fence nor the lease wait.
func (m *Machine) release(in Input) []Action {
	m.phase = Releasing
	m.releases = 0
	return []Action{m.releaseAction()}
}

func (m *Machine) releaseAction() Action {
	m.releases++
	return Release{Epoch: m.epoch, Reason: m.demotion.String()}
}

// released ends the tenure: hand leadership on if asked or if the storage
// failed here, and keep off primacy for a lease after a storage fault.
func (m *Machine) released(in Input) []Action {
	t := m.cfg.Timing
	m.phase = Secondary
	m.storage = StorageStopped
	m.acquireAt = 0
	var acts []Action
	standby := in.Committed.Standby[m.cfg.Self]
	fault := m.demotion.Reason.StorageFault()
	if fault {
		m.cooldown = in.Now.Add(t.Lease)
	}
	if m.stopping {
		m.phase = Stopped
		return nil
	}
	if in.Leader && (m.handover != nil || standby || fault) {
		to := ""
		if m.handover != nil {
			to = *m.handover
		}
		m.handover = nil
		acts = append(acts, m.transfer(in, to)...)
	}
	return acts
}

func (m *Machine) transfer(in Input, to string) []Action {
	m.transferring = true
	m.transferCooling = in.Now < m.cooldown
	m.transferAt = in.Now.Add(m.cfg.Timing.Heartbeat)
	return []Action{Transfer{To: to}}
}

func (m *Machine) selfFence(reason string) []Action {
	m.phase = SelfFenced
	return []Action{SelfFence{Reason: reason}}
}

// Unconfirmed returns a copy of the nodes the last view listed as maybe
// running the storage (for status).
func (m *Machine) Unconfirmed() map[string]uint64 { return maps.Clone(m.lastCommitted.Unconfirmed) }
