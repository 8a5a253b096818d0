// Package daemon wires fenced together: configuration, cluster membership and
// election, the fencing engine, the resource manager, the API socket,
// metrics and the service lifecycle.
package daemon
