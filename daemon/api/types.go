package api

import (
	"time"

	"github.com/fenced/fenced/stonith/fencing"
)

// SchemaVersion of every JSON document the API serves and fencectl
// prints. It rises when a field changes meaning or goes away; new fields
// may appear within a version.
const SchemaVersion = 1

// Version of this build of fenced and fencectl, set at link time
// (-ldflags "-X github.com/fenced/fenced/daemon/api.Version=...").
var Version = "0.1.0-dev"

// Status is GET /v1/status.
type Status struct {
	SchemaVersion int          `json:"schemaVersion"`
	Cluster       string       `json:"cluster"`
	Node          string       `json:"node"`
	Quorum        QuorumStatus `json:"quorum"`
	Primary       PrimaryInfo  `json:"primary"`
	Self          SelfStatus   `json:"self"`
	Nodes         []NodeStatus `json:"nodes"`
	// FencePaths says, for every configured node, whether it can be
	// fenced, from the answering node's device checks.
	FencePaths []FencePath `json:"fencePaths,omitempty"`
	// Config is the answering node's configuration against the cluster's.
	Config *ConfigStatus `json:"config,omitempty"`
	// PendingFences are the fences and unfences running, cluster-wide.
	PendingFences []PendingFence `json:"pendingFences,omitempty"`
	// Resources says where each resource of the group runs, cluster-wide.
	Resources []ResourcePlace `json:"resources,omitempty"`
	// ClusterVersion is the committed cluster version and what holds back
	// the next (absent from an older daemon).
	ClusterVersion *ClusterVersion `json:"clusterVersion,omitempty"`
}

// ClusterVersion is what the replicated log may hold (see README,
// "Upgrades and downgrades"): new commands, fields and formats are used
// only once every configured voter runs a fenced that supports them.
type ClusterVersion struct {
	// Committed is the version the leader committed (1 before any).
	Committed int `json:"committed"`
	// Supported is the highest the answering node's fenced supports.
	Supported int `json:"supported"`
	// HeldBy, while Committed is below Supported, names each voter that
	// holds the next version back and why ("node3 runs an older fenced",
	// "node3 not seen in gossip").
	HeldBy []string `json:"heldBy,omitempty"`
	// Halted: the answering node stopped applying the log at an entry of
	// a newer fenced, and why.
	Halted string `json:"halted,omitempty"`
}

// PendingFence is a fence (or unfence) the replicated history holds as
// running.
type PendingFence struct {
	ID         uint64     `json:"id"`
	Kind       string     `json:"kind"` // fence or unfence
	Target     string     `json:"target"`
	Action     string     `json:"action"`
	Executor   string     `json:"executor,omitempty"`
	Epoch      uint64     `json:"epoch"`
	Reason     string     `json:"reason,omitempty"`
	Runs       int        `json:"runs,omitempty"` // runs of a blocked takeover's retried fence
	Started    *time.Time `json:"started,omitempty"`
	ElapsedSec float64    `json:"elapsedSeconds"`
	// LastAttempt is the newest device attempt the history holds.
	LastAttempt *FenceAttempt `json:"lastAttempt,omitempty"`
	// Steps is what each device does now; only on the node that runs it.
	Steps []FenceStep `json:"steps,omitempty"`
}

// FenceAttempt is one finished device try of a pending fence.
type FenceAttempt struct {
	Level    int    `json:"level"`
	Device   string `json:"device"`
	Try      int    `json:"try"`
	Result   string `json:"result"`
	ReadBack string `json:"readBack,omitempty"`
	Error    string `json:"error,omitempty"`
}

// FenceStep is what one device of a running fence does now.
type FenceStep struct {
	Level  int    `json:"level"`
	Device string `json:"device"`
	Try    int    `json:"try"`
	// Step is session (logging in), command, read-back or "waiting to
	// retry".
	Step   string  `json:"step"`
	ForSec float64 `json:"forSeconds"`
}

// ResourcePlace is where one resource of the group runs, from each node's
// gossip (its state of every resource of the group, in group order).
type ResourcePlace struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
	// On are the nodes where it is not known stopped.
	On []ResourceOn `json:"on"`
}

// ResourceOn is a resource's state on one node.
type ResourceOn struct {
	Node string `json:"node"`
	// State is starting, running, stopping or failed (it may still run),
	// or "unknown" (the node is gone and may still run it: unclean or
	// unconfirmed).
	State string `json:"state"`
	// Stale: the node's gossip is older than one lease.
	Stale bool `json:"stale,omitempty"`
}

// ConfigStatus compares the answering node's cluster-wide configuration
// with the fingerprint the cluster committed.
type ConfigStatus struct {
	// File is the configuration file the node runs.
	File string `json:"file,omitempty"`
	// Fingerprint is the node's own (16 hex digits).
	Fingerprint string `json:"fingerprint"`
	// Committed is the cluster's; empty until the leader commits one.
	Committed     string     `json:"committed,omitempty"`
	CommittedNode string     `json:"committedNode,omitempty"` // whose configuration it is
	CommittedBy   string     `json:"committedBy,omitempty"`
	CommittedAt   *time.Time `json:"committedAt,omitempty"`
	// Match says the node runs the committed configuration (before one is
	// committed: the one a majority runs).
	Match bool `json:"match"`
	// Differing are the keys in which the node's differs from the
	// committed one (names only).
	Differing []string `json:"differing,omitempty"`
	// Hint says how to declare node-local those of the keys that differ
	// (this node's and the others') that may rightly be each node's own:
	// the group's mount and hooks values (node_local), an OCF agent's
	// parameters (node_params).
	Hint string `json:"hint,omitempty"`
	// Warning says that no running data node may take primacy, and what
	// to do about it.
	Warning    string      `json:"warning,omitempty"`
	LastReload *ReloadInfo `json:"lastReload,omitempty"`
}

// ReloadInfo is the last reload of the node's configuration.
type ReloadInfo struct {
	Time *time.Time `json:"time"`
	OK   bool       `json:"ok"`
	// Error is why it was refused (the running configuration stayed).
	Error string `json:"error,omitempty"`
}

// ReloadReply is the answer of POST /v1/reload: what the reload changed.
type ReloadReply struct {
	SchemaVersion int    `json:"schemaVersion"`
	Node          string `json:"node"`
	File          string `json:"file"`
	// Changed are the keys that changed and apply now (devices, fence
	// topologies, alerts, and "gossip.key_file (keys ID, …)" when the key
	// file's keys changed); empty when nothing did.
	Changed     []string `json:"changed"`
	Fingerprint string   `json:"fingerprint"`
	// Committed is the cluster's fingerprint; Match whether the node's is it.
	Committed string `json:"committed,omitempty"`
	Match     bool   `json:"match"`
}

// ConfigAcceptReply is the answer of POST /v1/config/accept.
type ConfigAcceptReply struct {
	SchemaVersion int `json:"schemaVersion"`
	// Fingerprint is now the cluster's: that of Node's configuration.
	Fingerprint string `json:"fingerprint"`
	Node        string `json:"node"`
	Previous    string `json:"previous,omitempty"`
	// Differing are the nodes that do not run it (not eligible for
	// primacy until they do).
	Differing []NodeConfig `json:"differing"`
}

// ConfigKeys is the answer of GET /v1/config/keys: the per-key hashes of
// the cluster's configuration and of each node's, as far as the node asked
// knows them (`fenced validate` compares a file with them). Hashes only:
// no value, and no secret, is in them.
type ConfigKeys struct {
	SchemaVersion int `json:"schemaVersion"`
	// Node is the node asked.
	Node string `json:"node"`
	// Committed is the cluster's configuration; nil until one is
	// committed.
	Committed *KeyHashes `json:"committed,omitempty"`
	// Nodes are the configured nodes, each with what it advertises.
	Nodes []KeyHashes `json:"nodes"`
}

// KeyHashes is a configuration as hashes: its fingerprint and one hash
// per cluster-wide key (nil when not known here). A witness's leave the
// resource group out.
type KeyHashes struct {
	Node        string            `json:"node,omitempty"`
	Witness     bool              `json:"witness,omitempty"`
	Fingerprint string            `json:"fingerprint,omitempty"`
	Keys        map[string]string `json:"keys,omitempty"`
}

// NodeConfig is one node's configuration fingerprint.
type NodeConfig struct {
	Node        string `json:"node"`
	Fingerprint string `json:"fingerprint,omitempty"`
	State       string `json:"state"`
}

// QuorumStatus counts votes against the configured size.
type QuorumStatus struct {
	Configured int    `json:"configured"`
	Seen       int    `json:"votesSeen"`
	Needed     int    `json:"votesNeeded"`
	Have       bool   `json:"have"`
	Leader     string `json:"leader"`
	// Reachable are the votes this node reaches now: itself, the nodes
	// gossip finds alive (not suspect) with a recent probe answered, and
	// the leader while it hears it.
	Reachable int `json:"votesReachable"`
	// LeaderHeard: this node leads, or heard Leader (raft or beacon)
	// within the detector's time; LeaderSilentSec how long it has not.
	LeaderHeard     bool    `json:"leaderHeard"`
	LeaderSilentSec float64 `json:"leaderSilentSeconds,omitempty"`
	// Incarnation names the voting set after a `fenced recover` (""
	// for the configured one); Configured then counts its voters.
	Incarnation string `json:"incarnation,omitempty"`
}

// PrimaryInfo is the replicated holder state.
type PrimaryInfo struct {
	Node        string            `json:"node"`
	Epoch       uint64            `json:"epoch"`
	State       string            `json:"state"`
	Blocked     bool              `json:"blocked"`
	Reason      string            `json:"reason,omitempty"`
	Previous    string            `json:"previous,omitempty"`
	Unconfirmed map[string]uint64 `json:"unconfirmed,omitempty"`
	// Unclean are the nodes of Unconfirmed that said something of the
	// group may still run on them that they could neither stop nor reset
	// themselves away, with why: only a fence that removes their power, or
	// an admin's confirmation, clears them.
	Unclean map[string]string `json:"unclean,omitempty"`
	// LastKnown: this node has no quorum, so this is the replicated state
	// as it last learned it, not confirmed now.
	LastKnown bool `json:"lastKnown,omitempty"`
	// Since is when the epoch was granted; Change why the holder got it.
	Since  *time.Time `json:"since,omitempty"`
	Change string     `json:"change,omitempty"`
}

// SelfStatus is the answering node's own view.
type SelfStatus struct {
	Role         string  `json:"role"`
	Acting       bool    `json:"acting"`
	Epoch        uint64  `json:"epoch"`
	KnownEpoch   uint64  `json:"knownEpoch"`
	LeaseLeftSec float64 `json:"leaseLeftSeconds"`
	Storage      string  `json:"storage"`
	Raft         string  `json:"raft"`
	Term         uint64  `json:"raftTerm"`
	Standby      bool    `json:"standby"`
	// Ineligible says why this node may not take primacy now (its
	// unfencing at start failed, a resource it cannot stop, ...).
	Ineligible string `json:"ineligible,omitempty"`
	// NotReady says why this node, eligible, does not take primacy yet:
	// it just joined and opens the fence device sessions it should hold.
	NotReady string `json:"notReady,omitempty"`
	// Watchdog is this node's watchdog device, when one is configured.
	Watchdog *WatchdogStatus `json:"watchdog,omitempty"`
	// Keys are the IDs of this node's cluster keys (gossip.key_file), the
	// primary (the one it encrypts with) first; none in plaintext.
	Keys []string `json:"keys,omitempty"`
}

// WatchdogStatus is the node's watchdog: armed while it may hold the
// storage, and advertised (for the watchdog fence level) only when its
// timer keeps counting after the daemon dies.
type WatchdogStatus struct {
	Device     string  `json:"device"`
	Armed      bool    `json:"armed"`
	Advertised bool    `json:"advertised"`
	TimeoutSec float64 `json:"timeoutSeconds,omitempty"`
	// Note says why it is or is not advertised (once armed).
	Note string `json:"note,omitempty"`
}

// NodeStatus is one configured node as gossip sees it.
type NodeStatus struct {
	Name string `json:"name"`
	// Kind is the node's configured role: data (may hold primacy and the
	// storage) or witness (votes, never holds anything).
	Kind        string     `json:"kind"`
	Address     string     `json:"address"`
	Gossip      string     `json:"gossip"`
	Raft        string     `json:"raftRole"`
	Role        string     `json:"role"`
	Epoch       uint64     `json:"epoch"`
	Storage     string     `json:"storage"`
	LastContact *time.Time `json:"lastContact,omitempty"`
	RTTMillis   float64    `json:"rttMillis,omitempty"`
	Version     string     `json:"version"`
	// Config is the fingerprint of the node's cluster-wide configuration
	// as it advertises it; ConfigMismatch says it differs from the
	// committed one (before one is committed: from the asked node's),
	// ConfigDiffering in which keys (when known).
	Config          string   `json:"config,omitempty"`
	ConfigMismatch  bool     `json:"configMismatch,omitempty"`
	ConfigDiffering []string `json:"configDiffering,omitempty"`
	// Stale says the node's gossip (role, epoch, storage) is older than
	// one lease, or claims a primacy the replicated state gives another:
	// what it says may no longer be true.
	Stale bool `json:"stale,omitempty"`
	// Down is what is known of a node gossip does not see, from the
	// replicated state: "fenced" (FencedAt, FencedBy: its newest fence,
	// read back), "unclean" (something of the group may still run there),
	// "unconfirmed" (it may still run the storage), or "" (not known).
	Down     string     `json:"down,omitempty"`
	FencedAt *time.Time `json:"fencedAt,omitempty"`
	FencedBy string     `json:"fencedBy,omitempty"`
	// Standby: the replicated state holds the node in standby (never
	// granted primacy).
	Standby bool `json:"standby,omitempty"`
	// Keys are the IDs of the node's cluster keys, the primary first, as
	// it last advertised them (only the primary's when its gossip
	// metadata had no room for more); none from an older fenced.
	Keys []string `json:"keys,omitempty"`
}

// Record is one entry of the replicated history: a fence, unfence,
// confirmation or release, with every device action.
type Record = fencing.Record

// History is GET /v1/history.
type History struct {
	SchemaVersion int      `json:"schemaVersion"`
	Records       []Record `json:"records"`
}

// RecordReply is what fencectl prints for fence, unfence and confirm (the
// API answers the bare Record).
type RecordReply struct {
	SchemaVersion int    `json:"schemaVersion"`
	Record        Record `json:"record"`
}

// Device is one entry of GET /v1/devices.
type Device struct {
	Name    string       `json:"name"`
	Agent   string       `json:"agent"`
	Targets []string     `json:"targets"` // "node2 (level 1, plug 3)"
	Health  DeviceHealth `json:"health"`
}

// Device health states (DeviceHealth.State, FencePathDevice.State).
const (
	HealthOK          = "ok"          // the last check succeeded
	HealthFailing     = "failing"     // the last check failed
	HealthPending     = "pending"     // not checked yet
	HealthUnmonitored = "unmonitored" // not checked by the answering node: it fences only that node
)

// DeviceHealth is what the answering node's checks of a device found. A
// node checks every device that fences some other node, on the device's
// monitor_interval (a status query, never a power action).
type DeviceHealth struct {
	State string `json:"state"`
	// ErrorKind of a failing device: auth, unreachable or other.
	ErrorKind string `json:"errorKind,omitempty"`
	Error     string `json:"error,omitempty"`
	// LastCheck is when the last finished check started; Latency how long
	// it took.
	LastCheck     *time.Time `json:"lastCheck,omitempty"`
	LatencyMillis float64    `json:"latencyMillis,omitempty"`
	// Since is when the current state (ok or failing) began.
	Since *time.Time `json:"since,omitempty"`
	// Failures counts the consecutive failed checks.
	Failures        int     `json:"failures,omitempty"`
	IntervalSeconds float64 `json:"intervalSeconds,omitempty"`
	// CheckingSince is when the check now running started.
	CheckingSince *time.Time `json:"checkingSince,omitempty"`
	// Session is "held" while this node holds a session open on the device
	// for the next fence, "opening" while a check opens one.
	Session string `json:"session,omitempty"`
	// Note is what a passing check found that is worth knowing, e.g. "BMC
	// has no free session slot: checked on the held session".
	Note string `json:"note,omitempty"`
}

// Fence path states (FencePath.State).
const (
	PathWorking = "working" // every device of at least one level is healthy
	PathFailing = "failing" // every level has a device whose last check failed: a fence would fail
	PathUnknown = "unknown" // not every level is checked (yet, or from here)
	PathNone    = "none"    // the node has no fence topology
)

// FencePath is whether one node can be fenced, from the answering node's
// checks: a node's path works when every device of at least one of its
// levels passed its last check.
type FencePath struct {
	Node  string `json:"node"`
	State string `json:"state"`
	// Devices of the node's topology, each once, in level order.
	Devices []FencePathDevice `json:"devices"`
}

// FencePathDevice is one device of a fence path.
type FencePathDevice struct {
	Device    string     `json:"device"`
	Level     int        `json:"level"` // the first level it is in, 1-based
	State     string     `json:"state"`
	ErrorKind string     `json:"errorKind,omitempty"`
	Since     *time.Time `json:"since,omitempty"`
}

// DeviceList is GET /v1/devices.
type DeviceList struct {
	SchemaVersion int      `json:"schemaVersion"`
	Devices       []Device `json:"devices"`
}

// DeviceStatus is GET /v1/devices/{name}/status.
type DeviceStatus struct {
	SchemaVersion int            `json:"schemaVersion"`
	Device        string         `json:"device"`
	Agent         string         `json:"agent"`
	Monitor       string         `json:"monitor"` // ok or the error
	Targets       []TargetStatus `json:"targets"`
}

// TargetStatus is a node's state as read from one device.
type TargetStatus struct {
	Node  string `json:"node"`
	Plug  string `json:"plug,omitempty"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// StandbyReply is the answer of POST /v1/standby.
type StandbyReply struct {
	SchemaVersion int    `json:"schemaVersion"`
	Node          string `json:"node"`
	Standby       bool   `json:"standby"`
}

// TransferReply is the answer of POST /v1/transfer: the handover from the
// current primary-elect has started ("to" empty: raft's choice).
type TransferReply struct {
	SchemaVersion int    `json:"schemaVersion"`
	From          string `json:"from"`
	To            string `json:"to"`
}

// VersionInfo is GET /v1/version: the answering daemon's build.
type VersionInfo struct {
	SchemaVersion int    `json:"schemaVersion"`
	Node          string `json:"node"`
	Version       string `json:"version"`
	Go            string `json:"go"`
}

// BuildInfo is one program's build, in fencectl's version output.
type BuildInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	Node    string `json:"node,omitempty"` // the daemon's node
}

// Versions is what `fencectl version` prints: its own build and, when the
// daemon answered, the daemon's.
type Versions struct {
	SchemaVersion int        `json:"schemaVersion"`
	Client        BuildInfo  `json:"client"`
	Daemon        *BuildInfo `json:"daemon,omitempty"`
}
