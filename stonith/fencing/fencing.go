// Package fencing is the vocabulary of the replicated history: a Record of
// each fence, unfence, admin confirmation, release and expiry, with its
// device attempts, and of each raft election and grant of primacy; and the
// words for their kinds, actions, results and outcomes.
// The fencing engine (package stonith) writes records, the replicated state
// (package quorum) commits and keeps them, fencectl shows them. It depends
// on nothing, so that the state machine and the command-line tool read
// records without linking the engine and its agents.
package fencing

import "time"

// Actions a fence request may ask for.
const (
	ActionOff    = "off"
	ActionReboot = "reboot"
	ActionOn     = "on"
)

// Attempt results.
const (
	ResultSuccess = "success"
	ResultFailed  = "failed"
	ResultUnknown = "unknown"
)

// Event kinds in the fence history.
const (
	KindFence   = "fence"   // power a node off (or reboot it)
	KindUnfence = "unfence" // power a node on / restore its zoning
	KindConfirm = "confirm" // an admin acknowledged a node is down
	KindRelease = "release" // a holder released the storage cleanly
	// KindExpiry: the holder's lease has certainly ended and the storage
	// checks tokens, so its late writes are refused by the storage itself
	// (recorded by the successor that takes over).
	KindExpiry = "lease-expiry"
	// KindWatchdog: the holder's lease has certainly ended plus the
	// watchdog timeout it advertised: its watchdog has reset it.
	KindWatchdog = "watchdog"
	// KindElection: a node won a raft election (Term; Previous the leader
	// before it, LastContact when it last heard from that one; Started when
	// it first stood as candidate, Finished when it won). The new leader
	// records it; a leader re-elected with no other leader between takes
	// its own record again (Runs), as a retried fence does.
	KindElection = "election"
	// KindPrimacy: the new primary was granted the epoch (Epoch; Previous
	// the holder before it; Started the grant), and the phases its
	// takeover went through (Steps). Finished is when it began serving, or
	// when its tenure ended before that; Reason says how the previous
	// holder left and, once it stepped down, why.
	KindPrimacy = "primacy"
	// KindRecover: `fenced recover` started a new voting set from Target
	// after a majority was lost (RequestedBy who ran it; Reason the nodes
	// declared gone and the epochs before and after).
	KindRecover = "recover"
)

// Kinds lists every record kind, in the order fencectl names them.
var Kinds = []string{KindFence, KindUnfence, KindConfirm, KindRelease, KindExpiry, KindWatchdog, KindElection, KindPrimacy, KindRecover}

// Stopping reports whether kind is one of the records of a node stopped or
// acted on (fence, unfence, confirm, release, expiry, watchdog) rather than
// a change of leader, primacy or voting set: its Target is the node that was stopped,
// not the one that took over.
func Stopping(kind string) bool {
	return kind != KindElection && kind != KindPrimacy && kind != KindRecover
}

// Outcomes of a record.
const (
	OutcomePending = "pending" // requested, running
	OutcomeSuccess = "success" // confirmed by read-back
	OutcomeFailed  = "failed"  // every level failed
	OutcomeUnknown = "unknown" // a device may have acted; not confirmed
)

// Record is one entry of the replicated fence history.
type Record struct {
	ID          uint64 `json:"id"`
	Kind        string `json:"kind"`
	Target      string `json:"target"`
	Action      string `json:"action,omitempty"` // off, reboot, on
	Reason      string `json:"reason,omitempty"`
	RequestedBy string `json:"requestedBy,omitempty"`
	Executor    string `json:"executor,omitempty"`
	Epoch       uint64 `json:"epoch"`
	// Group is the resource group whose epoch Epoch is ("": the default
	// group, the only one before groups).
	Group    string    `json:"group,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitempty"`
	Outcome  string    `json:"outcome"`
	Error    string    `json:"error,omitempty"`
	Attempts []Attempt `json:"attempts,omitempty"`
	// Scope is ScopeStorage when the level that confirmed an off cuts
	// only the node's access to the storage ("" = its power).
	Scope string `json:"scope,omitempty"`
	// TargetBoot is the boot the target was in when it was fenced (its
	// boot ID, as its mount intent or its gossip advertised it; "" when
	// not known): a node fenced at the storage level unfences itself
	// again only from another boot, or with an admin's consent.
	TargetBoot string `json:"targetBoot,omitempty"`
	// Runs counts the times this fence ran when a blocked takeover retried
	// it (see Retries): a retry of a failed fence takes the record of the
	// first run, which keeps its start and takes the newest run's end,
	// outcome, error and attempts. 0 means it ran once.
	Runs int `json:"runs,omitempty"`
	// Term is the raft term an election was won in.
	Term uint64 `json:"term,omitempty"`
	// Previous is, for an election, the leader before; for a grant of
	// primacy, the holder before ("" = none known).
	Previous string `json:"previous,omitempty"`
	// LastContact is, for an election, when the new leader last heard
	// from Previous: where the failure was first noticed (zero: never).
	LastContact time.Time `json:"lastContact,omitzero"`
	// Steps are the phases a primacy went through, as its holder saw
	// them.
	Steps []Step `json:"steps,omitempty"`
}

// Step is one phase of a tenure (waiting, fencing, blocked, mounting,
// serving, demoting, ...), from when on, with why for the phases that end
// one.
type Step struct {
	Phase  string    `json:"phase"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// Retries reports whether r, a fence just requested, runs again the fence
// prev that failed: the same target, action, epoch, executor, requester
// and reason (a blocked takeover retrying).
func Retries(prev, r Record) bool {
	return prev.Kind == KindFence && r.Kind == KindFence && (prev.Outcome == OutcomeFailed || prev.Outcome == OutcomeUnknown) &&
		r.Outcome == OutcomePending && prev.Target == r.Target && prev.Action == r.Action && prev.Epoch == r.Epoch &&
		prev.Executor == r.Executor && prev.RequestedBy == r.RequestedBy && prev.Reason == r.Reason
}

// ScopeStorage: see Record.Scope.
const ScopeStorage = "storage"

// Attempt is one device action within a fence.
type Attempt struct {
	Level  int    `json:"level"` // 1-based
	Device string `json:"device"`
	Agent  string `json:"agent"`
	Plug   string `json:"plug,omitempty"`
	Action string `json:"action"`
	Try    int    `json:"try"` // 1-based
	// Start is when the try began, since the operation's start (levels
	// that ran side by side overlap: see Engine.Hedge).
	Start    time.Duration `json:"startNs,omitempty"`
	Result   string        `json:"result"`             // success, failed, unknown
	ReadBack string        `json:"readBack,omitempty"` // state read back: off, on, unknown
	Duration time.Duration `json:"durationNs"`         // the action and the read-back
	// ReadBackDuration is the engine's own status query after the action.
	ReadBackDuration time.Duration `json:"readBackNs,omitempty"`
	Error            string        `json:"error,omitempty"`
	Stderr           string        `json:"stderr,omitempty"` // plugin agents, secrets scrubbed
}
