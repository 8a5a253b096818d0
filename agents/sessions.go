package agents

import (
	"context"
	"time"
)

// Sessions that outlive their process.
//
// An agent that holds a session open on its device (Keeper) logs it out
// when it is done with it; a process that is killed or crashes does not,
// and the session keeps one of the device's few slots (IPMI requires only
// four; many Redfish services allow a handful) until the device expires it,
// often minutes later. So such agents tell a SessionLedger of every session
// they open and close, the ledger keeps the list in a file, and the next
// process closes what it finds there (SessionCloser) before it opens
// sessions of its own.

// SessionRecord names one open session on a device: enough for another
// process, with fresh credentials, to close it, and nothing secret (never a
// token, key or password).
type SessionRecord struct {
	// Device is the configured device's name, set by whoever hands the
	// agent its ledger (the agent does not know its name).
	Device string `json:"device"`
	// Agent is the agent kind ("ipmi", "redfish").
	Agent string `json:"agent"`
	// Address is where the device was reached: host:port (ipmi), the
	// service's origin (redfish). A closer refuses a record of another
	// address.
	Address string `json:"address"`
	// ID names the session on the device: the BMC's session ID in hex
	// (ipmi), the session's URI path (redfish).
	ID string `json:"id"`
	// Opened is when the session was opened (wall clock).
	Opened time.Time `json:"opened"`
}

// SessionLedger is told of the sessions an agent opens and closes. Its
// methods are safe for concurrent use and do not block on the network.
type SessionLedger interface {
	Opened(SessionRecord)
	Closed(SessionRecord)
}

// SessionRecorder is implemented by agents that report their sessions to a
// ledger. RecordSessions is called once, before the agent's first
// operation.
type SessionRecorder interface {
	RecordSessions(SessionLedger)
}

// SessionCloser is implemented by agents that can close sessions another
// process left open on their device. CloseSessions closes each of recs (of
// this agent's kind and address; others are refused) with the agent's own
// credentials, and returns those it could not close, each with why; a
// session the device no longer knows counts as closed. A device with no
// free session slot for the agent's own login is an error that says so.
type SessionCloser interface {
	CloseSessions(ctx context.Context, recs []SessionRecord) (failed map[SessionRecord]error, err error)
}

// SlotReporter is implemented by agents that know whether their device
// refused their last login for want of a free session slot (while they
// checked on a session they hold instead); health reports it.
type SlotReporter interface {
	NoFreeSlot() bool
}
