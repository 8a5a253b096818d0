// Package config is fenced's configuration: the YAML schema, its defaults
// (in one place, Default), strict decoding, and a pure Validate that reports
// every problem at once with its path and line.
package config

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fenced/fenced/daemon/tenure"
)

// Config is the whole configuration file.
type Config struct {
	// Version of the file format; must be 1.
	Version int     `yaml:"version"`
	Cluster Cluster `yaml:"cluster"`
	// Node is this node's name; usually given by --node or taken from the
	// hostname instead.
	Node  string `yaml:"node,omitempty"`
	Nodes []Node `yaml:"nodes"`
	// Timing of leases, heartbeats and fencing.
	Timing Timing `yaml:"timing"`
	// DataDir holds the raft log and snapshots (the epoch and the history
	// survive restarts) and sessions.json, the fence device sessions this
	// node holds open (device, address, session ID; no secret), which a
	// daemon closes at start when the last one did not (it was killed).
	DataDir string            `yaml:"data_dir"`
	API     API               `yaml:"api"`
	Gossip  Gossip            `yaml:"gossip"`
	Devices map[string]Device `yaml:"devices"`
	Storage Storage           `yaml:"storage"`
	// Resources is the ordered resource group the primary runs, started
	// in order and stopped in reverse; Storage is its one-resource
	// shorthand.
	Resources []Resource `yaml:"resources,omitempty"`
	// OCFRoot is where OCF resource agents live (resource.d/PROVIDER/TYPE).
	OCFRoot string `yaml:"ocf_root"`
	// Watchdog used to self-fence when a demotion cannot finish in time.
	Watchdog Watchdog `yaml:"watchdog"`
	Metrics  Metrics  `yaml:"metrics"`
	History  History  `yaml:"history"`
	// Alerts are the alert agents this node runs on cluster events,
	// through Pacemaker's alert interface.
	Alerts []Alert `yaml:"alerts,omitempty"`

	// lines maps a path ("nodes[1].gossip") to its line in the file.
	lines map[string]int
	file  string
	// undecoded paths already reported by Parse; Validate does not
	// report them again.
	undecoded map[string]bool
}

// Cluster names the cluster.
type Cluster struct {
	Name string `yaml:"name"`
	// AllowEvenNodes accepts an even number of voting nodes. An even count
	// tolerates no more failures than the odd count below it and can split
	// evenly, so it is refused unless explicitly asked for.
	AllowEvenNodes bool `yaml:"allow_even_nodes"`
}

// Node is one configured (voting) node.
type Node struct {
	Name string `yaml:"name"`
	// Gossip is the memberlist bind address, host:port.
	Gossip string `yaml:"gossip"`
	// Raft is the consensus transport address, host:port.
	Raft string `yaml:"raft"`
	// Role is data (the default: may hold primacy and the storage) or
	// witness (votes and gossips, never holds primacy or the storage, is
	// never fenced and has no fence topology).
	Role string `yaml:"role,omitempty"`
	// Fence is this node's fence topology: levels tried in order; every
	// device of a level must succeed for the level to succeed.
	Fence []Level `yaml:"fence"`
}

// Node roles.
const (
	RoleData    = "data"
	RoleWitness = "witness"
)

// Witness reports a witness node (false for nil: no node).
func (n *Node) Witness() bool { return n != nil && n.Role == RoleWitness }

// Level is one fence level: devices, or the watchdog.
type Level struct {
	Devices []DeviceRef `yaml:"devices,omitempty"`
	// Watchdog, as the last level, is passed once the node's lease has
	// certainly ended plus the watchdog timeout the node advertised when it
	// took primacy (it resets itself by then). Only for hardware whose
	// watchdog really resets the machine; a node that advertised no armed
	// watchdog never passes it.
	Watchdog bool `yaml:"watchdog,omitempty"`
}

// DeviceRef is one device of a level with the target's mapping on it.
type DeviceRef struct {
	Device string `yaml:"device"`
	// Plug is the target on that device: an outlet, a system id, WWPNs.
	Plug string `yaml:"plug,omitempty"`
	// Params override the device's parameters for this target.
	Params map[string]string `yaml:"params,omitempty"`
}

// Device is a fencing device: an agent and its parameters.
type Device struct {
	Agent  string            `yaml:"agent"`
	Params map[string]string `yaml:"params"`
	// Timeout for one action including its read-back; 0 = timing.fence_timeout.
	Timeout Duration `yaml:"timeout"`
	// Retries of a failed action before the level is given up.
	Retries int `yaml:"retries"`
	// MonitorInterval is how often every node that could fence through this
	// device checks it (a status query or the agent's monitor, never a power
	// action); 0 = 60s, else 1s–24h.
	MonitorInterval Duration `yaml:"monitor_interval"`
	// Unfence says whether a node runs "on" for itself on this device when it
	// starts, before it may become primary: "" (as the agent declares: exec
	// agents whose metadata marks "on" on_target and automatic, such as
	// fence_scsi and fence_mpath), "on_start" (always) or "never".
	Unfence string `yaml:"unfence,omitempty"`
}

// Timing holds the lease parameters. See Validate for the relations.
type Timing struct {
	// Heartbeat is how often the primary re-confirms its majority.
	Heartbeat Duration `yaml:"heartbeat"`
	// Lease is how long one confirmation lets the primary act.
	Lease Duration `yaml:"lease"`
	// Margin absorbs clock-rate differences and scheduling delays: the
	// holder stops at lease−margin, a successor waits lease+margin.
	Margin Duration `yaml:"margin"`
	// Grace is the time a demotion (stop, unmount, release) may take before
	// the node self-fences.
	Grace Duration `yaml:"grace"`
	// FenceTimeout bounds one device action with its read-back.
	FenceTimeout Duration `yaml:"fence_timeout"`
}

// Tenure returns the timing in the form the tenure rules use.
func (t Timing) Tenure() tenure.Timing {
	return tenure.Timing{Heartbeat: t.Heartbeat.D(), Lease: t.Lease.D(), Margin: t.Margin.D(), Grace: t.Grace.D(), FenceTimeout: t.FenceTimeout.D()}
}

// API is the local control socket.
type API struct {
	Socket string `yaml:"socket"`
	// Group that may use the socket (mode 0660); empty keeps the daemon's.
	Group string `yaml:"group"`
}

// Gossip configures memberlist.
type Gossip struct {
	// KeyFile holds a base64 AES key (16, 24 or 32 bytes) that encrypts and
	// authenticates gossip and roots raft's mutual TLS. Required unless
	// Plaintext is set: gossip carries the requests forwarded to the
	// leader, including a node's release of the storage, which lets a
	// successor skip the fence. It may hold up to 8 keys, one a line (a
	// rotation): the first encrypts, all decrypt and are accepted for TLS;
	// a reload applies a change of its content (not of its path) live.
	KeyFile string `yaml:"key_file"`
	// Plaintext allows unencrypted, unauthenticated gossip and raft (labs,
	// tests).
	Plaintext bool `yaml:"plaintext"`
}

// Storage is what the primary runs: a mount and/or hook programs.
type Storage struct {
	Mount *Mount `yaml:"mount,omitempty"`
	Hooks Hooks  `yaml:"hooks"`
	// ChecksTokens declares that the storage rejects writes carrying an
	// epoch below the highest it has seen. A former holder that cannot be
	// fenced is then taken over once its lease has certainly ended
	// (lease + margin after its last majority-confirmed renewal): its late
	// writes are refused by the storage itself.
	ChecksTokens bool `yaml:"checks_tokens,omitempty"`
	// MonitorInterval is how often the monitor hook or mount check runs.
	MonitorInterval Duration `yaml:"monitor_interval"`
	// NodeLocal lists the values of mount and hooks that are this node's
	// own ("mount.device", "mount.mountpoint", "hooks.start", …: the same
	// disk under another name, a program installed elsewhere): each node
	// gives its own, and they are left out of the cluster's configuration
	// fingerprint. The list itself is part of it: every node must declare
	// the same keys.
	NodeLocal []string `yaml:"node_local,omitempty"`
}

// Mount is a filesystem mount.
type Mount struct {
	Device     string `yaml:"device"`
	Mountpoint string `yaml:"mountpoint"`
	FSType     string `yaml:"fstype"`
	Options    string `yaml:"options"`
}

// Hooks are executables run with FENCED_EPOCH, FENCED_NODE and
// FENCED_PREVIOUS_HOLDER in their environment.
type Hooks struct {
	Start   string `yaml:"start"`
	Stop    string `yaml:"stop"`
	Monitor string `yaml:"monitor"`
}

// Watchdog selects the self-fence path, and the watchdog fence level.
type Watchdog struct {
	// Device is a watchdog device such as /dev/watchdog; empty disables it,
	// in which case a stuck demotion makes the process exit hard instead.
	// With a device, it is armed while this node may hold the storage and
	// fed only while its lease is valid.
	Device string `yaml:"device"`
	// Timeout is the watchdog's reset timeout, set on the device where it
	// takes the setting; it must exceed timing.grace so that a demotion
	// that finishes in time is not cut short.
	Timeout Duration `yaml:"timeout,omitempty"`
}

// Metrics configures the Prometheus endpoint; off when Listen is empty.
type Metrics struct {
	// Listen is the host:port /metrics and the status page (/,
	// /status.json) are served on; it must not be a
	// node's gossip or raft address.
	Listen string `yaml:"listen"`
}

// History bounds the replicated history (fences, confirmations,
// releases, elections, grants of primacy: every kind together).
type History struct {
	Limit int `yaml:"limit"`
}

// Default returns the configuration every file starts from.
func Default() *Config {
	return &Config{
		Timing: Timing{
			Heartbeat:    Duration(time.Second),
			Lease:        Duration(3 * time.Second),
			Margin:       Duration(500 * time.Millisecond),
			Grace:        Duration(2 * time.Second),
			FenceTimeout: Duration(20 * time.Second),
		},
		DataDir: "/var/lib/fenced",
		API:     API{Socket: "/run/fenced/fenced.sock"},
		Storage: Storage{MonitorInterval: Duration(2 * time.Second)},
		OCFRoot: DefaultOCFRoot,
		History: History{Limit: 1000},
	}
}

// Duration is a time.Duration written as "250ms", "3s".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as \"3s\"", n.Line)}}
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration (want e.g. \"250ms\", \"3s\")", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Majority is the number of votes a primary needs: a majority of the
// configured nodes, never of the nodes currently seen.
func (c *Config) Majority() int { return len(c.Nodes)/2 + 1 }

// NodeByName returns the configured node called name.
func (c *Config) NodeByName(name string) (*Node, bool) {
	for i := range c.Nodes {
		if c.Nodes[i].Name == name {
			return &c.Nodes[i], true
		}
	}
	return nil, false
}

// File is the path the config was loaded from ("" if parsed from bytes).
func (c *Config) File() string { return c.file }
