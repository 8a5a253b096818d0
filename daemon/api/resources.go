package api

import "time"

// ResourceList is GET /v1/resources (`fencectl resource list`): this
// node's resource group, in start order. Only the primary runs the group;
// on other nodes every resource reads "stopped" (or what a probe found).
type ResourceList struct {
	SchemaVersion int              `json:"schemaVersion"`
	Node          string           `json:"node"`
	Role          string           `json:"role"`
	Epoch         uint64           `json:"epoch"`
	Resources     []ResourceStatus `json:"resources"`
}

// ResourceStatus is one resource of the group.
type ResourceStatus struct {
	Name string `json:"name"`
	// Kind is "ocf:PROVIDER:TYPE", "mount", "hooks" or "storage" (the
	// storage shorthand).
	Kind string `json:"kind"`
	// State is stopped, starting, running, stopping or failed (the last
	// start, monitor or stop failed: it may still run).
	State string `json:"state"`
	// MonitorIntervalSec is how often the primary monitors it.
	MonitorIntervalSec float64 `json:"monitorIntervalSeconds"`
	// LastMonitor is when the last monitor (or probe) began; LastResult is
	// "ok", "probe: not running", "started, not yet monitored" or the
	// error; LastMonitorMillis its
	// duration.
	LastMonitor       *time.Time `json:"lastMonitor,omitempty"`
	LastResult        string     `json:"lastResult,omitempty"`
	LastMonitorMillis float64    `json:"lastMonitorMillis,omitempty"`
	// Failures counts failed starts, monitors and stops since the daemon
	// started; LastError is the latest.
	Failures  int    `json:"failures"`
	LastError string `json:"lastError,omitempty"`
}
