package api

import (
	"time"

	"github.com/fenced/fenced/daemon/api/timeline"
)

// Page is the status page's document (GET /status.json on metrics.listen):
// what the page at / shows and refreshes. Status is the document of GET
// /v1/status (fencectl status -o json), with its stale marks; the rest is
// what the answering node knows besides. It holds no secret: no password,
// password file's content, key or token (the daemon's own test checks it).
type Page struct {
	SchemaVersion int `json:"schemaVersion"`
	// Generated is when the answering node built it; a page shows data
	// older than a few of its refresh intervals as not updated.
	Generated time.Time `json:"generated"`
	// RefreshSec is how often the page asks again.
	RefreshSec float64 `json:"refreshSeconds"`
	Status     Status  `json:"status"`
	// Resources are the answering node's resource group (resource list).
	Resources ResourceList `json:"resources"`
	// Devices are the fence devices with the answering node's checks.
	Devices []Device `json:"devices"`
	// Pending are the fences and unfences under way (outcome pending).
	Pending []Record `json:"pending"`
	// History is the newest records, oldest first (at most PageHistory).
	History []Record `json:"history"`
	// Failovers are the last PageFailovers, oldest first; TimelineSVG
	// draws them (timeline.SVG: its text escaped).
	Failovers   []timeline.Failover `json:"failovers"`
	TimelineSVG string              `json:"timelineSVG"`
}

// Bounds of the status page's document.
const (
	PageHistory   = 20
	PageFailovers = 5
)
