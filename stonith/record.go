// Package stonith is the fencing engine: it runs a node's fence topology
// (ordered levels of devices that must all succeed), confirms every power-off
// by reading the state back, and describes what it did as a Record that the
// cluster commits to its replicated history.
//
// # One command and the engine's read-back
//
// An agent that can send a command on its own (agents.Commander: the IPMI
// agent) is sent the power command only; the engine then reads
// the state back itself, at once and every 100ms (every 500ms after 5s)
// until it reads the wanted state or the command's window ends. Success is
// the read-back, never the command's reply: a refused command is still read
// back once (a BMC may refuse power-off of a chassis that is already off),
// and an acknowledged one that never reads back off is failed (or unknown,
// when the state cannot be read). Other agents run their own off and the
// engine's status query must then agree.
//
// # Kept agents and warm sessions
//
// A fence should be one command plus its read-back, not a login first: a
// slow BMC's session setup costs several round trips. The node's device
// monitor (package daemon/health) owns one long-lived agent per device it
// checks (Engine.Keep returns a Kept) and, while the device matters for the
// next takeover, has it hold an authenticated session kept alive between
// checks. Every operation on a target built from exactly the same agent,
// plug and parameters borrows that agent, and so its session and its
// measured round trip; a target that differs (a reload changed a
// parameter) gets an agent of its own, built and closed with the
// operation. A held session that fails an operation is dropped and the
// operation runs again on a new one (the IPMI agent).
//
// # Levels in parallel
//
// Levels are tried in order, and a level that fails starts the next. A
// level that is not answering does not hold the next one up for its whole
// timeout: when a kept device of the running level failed its last check,
// or has not answered at all within three of its request timeouts (its
// measured round trip and variation; 500ms to 5s, 2s before it was ever
// measured), the next level starts alongside it (Engine.Hedge, on by
// default). Both are off actions, so running them together cannot do what
// either alone would not; success is still one level whose every device
// was read back off, the first such level wins and the others are stopped
// (their tries are recorded, as stopped, unknown or failed). Devices the
// engine has no measurement of (no kept agent: plugins, a first fence
// after start) are not judged: their level runs to its end first. Because
// a stopped level may have cut the node anyway (a SAN zone removed before
// its read-back), unfencing goes through every level whose off may have
// happened, not only the winner.
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
	// Scope is ScopeStorage when the level that confirmed an off cuts
	// only the node's access to the storage ("" = its power).
	Scope string `json:"scope,omitempty"`
	// TargetBoot is the boot the target was in when it was fenced (its
	// boot ID, as its mount intent or its gossip advertised it; "" when
	// not known): a node fenced at the storage level unfences itself
	// again only from another boot, or with an admin's consent.
	TargetBoot string `json:"targetBoot,omitempty"`
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
