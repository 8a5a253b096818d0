// Package stonith is the fencing engine: it runs a node's fence topology
// (ordered levels of devices that must all succeed), confirms every power-off
// by reading the state back, and describes what it did as a Record that the
// cluster commits to its replicated history.
package stonith

import "time"

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
)

// Outcomes of a record.
const (
	OutcomePending = "pending" // requested, running
	OutcomeSuccess = "success" // confirmed by read-back
	OutcomeFailed  = "failed"  // every level failed
	OutcomeUnknown = "unknown" // a device may have acted; not confirmed
)

// Record is one entry of the replicated fence history.
type Record struct {
	ID          uint64    `json:"id"`
	Kind        string    `json:"kind"`
	Target      string    `json:"target"`
	Action      string    `json:"action,omitempty"` // off, reboot, on
	Reason      string    `json:"reason,omitempty"`
	RequestedBy string    `json:"requestedBy,omitempty"`
	Executor    string    `json:"executor,omitempty"`
	Epoch       uint64    `json:"epoch"`
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished,omitempty"`
	Outcome     string    `json:"outcome"`
	Error       string    `json:"error,omitempty"`
	Attempts    []Attempt `json:"attempts,omitempty"`
}

// Attempt is one device action within a fence.
type Attempt struct {
	Level    int           `json:"level"` // 1-based
	Device   string        `json:"device"`
	Agent    string        `json:"agent"`
	Plug     string        `json:"plug,omitempty"`
	Action   string        `json:"action"`
	Try      int           `json:"try"`                // 1-based
	Result   string        `json:"result"`             // success, failed, unknown
	ReadBack string        `json:"readBack,omitempty"` // state read back: off, on, unknown
	Duration time.Duration `json:"durationNs"`         // the action and the read-back
	// ReadBackDuration is the engine's own status query after the action.
	ReadBackDuration time.Duration `json:"readBackNs,omitempty"`
	Error            string        `json:"error,omitempty"`
	Stderr           string        `json:"stderr,omitempty"` // plugin agents, secrets scrubbed
}
