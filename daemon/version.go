// Package daemon wires fenced together: configuration, cluster membership and
// election, the fencing engine, the resource manager, the API socket,
// metrics and the service lifecycle.
package daemon

// Version is set at link time (-ldflags "-X github.com/fenced/fenced/daemon.Version=...").
var Version = "0.1.0-dev"
