package api

import "time"

// Report files: each node's part of a diagnostics bundle (GET /v1/report,
// fencectl report) holds these, in the bundle's directory of that node.
const (
	ReportConfig   = "config.yaml"  // the configuration file, secrets redacted
	ReportStatus   = "status.json"  // GET /v1/status as the node answers it
	ReportHistory  = "history.json" // GET /v1/history
	ReportRaft     = "raft.json"    // the raft servers and raft's own counters
	ReportGossip   = "gossip.json"  // the gossip members as the node sees them
	ReportDevices  = "devices.json" // GET /v1/devices: every device's health
	ReportVersion  = "version.json" // version and build of the node's fenced
	ReportLog      = "fenced.log"   // the daemon's log for the period
	ReportPartFile = "part.json"    // a ReportPart: where the log came from, what was cut
	ReportIndex    = "index.json"   // the bundle's ReportIndexDoc, at its top
	ReportReadme   = "README.txt"   // what is where, at the bundle's top
)

// ReportMaxSince is the longest period a report's log may cover.
const ReportMaxSince = 31 * 24 * time.Hour

// ReportDefaultSince is the period of a report asked for without one.
const ReportDefaultSince = 2 * time.Hour

// Log sources of a report part (ReportPart.LogSource).
const (
	LogJournal = "journal" // journalctl of the daemon's unit
	LogMemory  = "memory"  // the daemon's ring of recent lines
	LogNone    = "none"    // neither: the part has no log
)

// ReportPart is one node's part.json: how its part was made.
type ReportPart struct {
	SchemaVersion int       `json:"schemaVersion"`
	Node          string    `json:"node"`
	Generated     time.Time `json:"generated"`
	Since         time.Time `json:"since"`
	LogSource     string    `json:"logSource"`
	// Notes say what is missing or cut from the part, and why (the log
	// older than the ring holds; a file over the part's bound; a view
	// that could not be read).
	Notes []string `json:"notes,omitempty"`
}

// ReportIndexDoc is a bundle's index.json: every configured node, with its
// files or the reason it is missing.
type ReportIndexDoc struct {
	SchemaVersion int          `json:"schemaVersion"`
	Cluster       string       `json:"cluster"`
	CollectedBy   string       `json:"collectedBy"`
	Generated     time.Time    `json:"generated"`
	Since         time.Time    `json:"since"`
	Nodes         []ReportNode `json:"nodes"`
}

// ReportNode is one node of a bundle.
type ReportNode struct {
	Name string `json:"name"`
	// Unreachable is why the node's part is missing ("" when it is there).
	Unreachable string   `json:"unreachable,omitempty"`
	Files       []string `json:"files,omitempty"`
	LogSource   string   `json:"logSource,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}
