package quorum

import (
	"errors"
	"fmt"

	"github.com/fenced/fenced/stonith/fencing"
)

// Cluster versions, like etcd's: what the replicated log may hold. A
// command, field or wire format new in version N is written only once the
// leader committed cluster version N (OpClusterVersion), which it does only
// once every configured voter advertises in gossip that it supports N
// (Meta.Supports); so no node is ever sent an entry it cannot apply. A node
// that is sent one anyway halts (HaltError) rather than skip it.
//
//   - 1: fenced before cluster versions (no OpRecover, no incarnation);
//   - 2: recovery (OpRecover, State.Incarnation, the recover history kind)
//     and the cluster version itself (OpClusterVersion);
//   - 3: resource groups other than the default one (Command.Group,
//     Record.Group) and placement (OpPlace): GroupsVersion.
const (
	// ClusterVersionMax is the highest cluster version this build
	// supports; it supports every one from 1 up to it.
	ClusterVersionMax = GroupsVersion
)

// OpClusterVersion raises the cluster version to ClusterVersion. It never
// goes down; the leader proposes it once every configured voter advertises
// support for it.
const OpClusterVersion = "cluster-version"

// opVersions is the cluster version each op first appeared in. An op not
// listed is of a newer fenced than this one.
var opVersions = map[string]int{
	OpAcquire: 1, OpState: 1, OpRelease: 1, OpRecord: 1, OpStandby: 1, OpConfig: 1, OpUnclean: 1,
	OpRecover: 2, OpClusterVersion: 2,
	OpPlace: GroupsVersion, OpRenew: GroupsVersion,
}

// ErrClusterVersion refuses, at proposal, a command the committed cluster
// version does not allow yet.
var ErrClusterVersion = errors.New("not allowed at the cluster's version")

// Needs is the cluster version c needs: its op's, that of every newer
// field or record kind it carries, and its own Version (what the fenced
// that wrote it declared). An unknown op needs a version above this
// build's.
func (c *Command) Needs() int {
	v, ok := opVersions[c.Op]
	if !ok {
		v = ClusterVersionMax + 1
	}
	if c.Incarnation != "" || len(c.Gone) > 0 || c.Record != nil && c.Record.Kind == fencing.KindRecover {
		v = max(v, 2)
	}
	if c.Op == OpClusterVersion {
		v = max(v, c.ClusterVersion)
	}
	if namedGroup(c.Group) != "" || c.Record != nil && namedGroup(c.Record.Group) != "" {
		v = max(v, GroupsVersion)
	}
	return max(v, c.Version, 1)
}

// allows says why c may not be proposed at cluster version cv (nil: it
// may). OpClusterVersion is itself the first entry of the version it
// raises to, so it may name the next version (at most this build's).
func allows(c *Command, cv int) error {
	need := c.Needs()
	if c.Op == OpClusterVersion {
		if c.ClusterVersion > ClusterVersionMax {
			return fmt.Errorf("%w: cluster version %d is above this fenced's highest (%d)", ErrClusterVersion, c.ClusterVersion, ClusterVersionMax)
		}
		return nil
	}
	if need > cv {
		return fmt.Errorf("%w: %s needs cluster version %d, the cluster runs %d (raised once every voter runs a fenced that supports it)",
			ErrClusterVersion, c.Op, need, cv)
	}
	return nil
}

// Version is the cluster version the state was committed at (1 before
// any OpClusterVersion).
func (s *State) Version() int { return max(s.ClusterVersion, 1) }

// ClusterVersion is the committed cluster version.
func (f *FSM) ClusterVersion() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Version()
}

// Allows says why c may not be proposed now (nil: it may): its op, a
// field or a record kind it carries is newer than the committed cluster
// version, or this node halted (but for its release). Every proposal
// passes here (Raft.Apply).
func (f *FSM) Allows(c *Command) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.halt != nil && c.Op != OpRelease {
		// A halted node may still commit that it released what it held
		// (every version applies that), so that no one need fence it.
		return f.halt
	}
	return allows(c, f.state.Version())
}

// applyClusterVersion (OpClusterVersion) raises the cluster version to
// c.ClusterVersion; one not above the current is refused (it never goes
// down). One above this build's never gets here: the FSM halts on it.
func (f *FSM) applyClusterVersion(c *Command) any {
	s := &f.state
	if c.ClusterVersion <= s.Version() {
		return fmt.Errorf("cluster version: %d is not above the current %d (it never goes down)", c.ClusterVersion, s.Version())
	}
	s.ClusterVersion = c.ClusterVersion
	return nil
}

// HaltError is why the state machine stopped applying the log: an entry
// (or a snapshot) this build cannot apply, written by a newer fenced.
// Skipping it would leave this node's state different from the others';
// the daemon stops acting and exits instead, and an upgraded fenced
// applies the log from where it stopped.
type HaltError struct {
	Index uint64 // the entry's; 0 for a snapshot
	Op    string // the entry's op, when known
	Needs int    // the cluster version it needs (0: undecodable)
	Err   error  // why it could not be decoded
}

func (e *HaltError) Error() string {
	what := fmt.Sprintf("replicated entry %d", e.Index)
	if e.Index == 0 {
		what = "the replicated snapshot"
	}
	switch {
	case e.Err != nil:
		return fmt.Sprintf("%s cannot be decoded by this fenced (%v); it supports cluster versions up to %d: upgrade this node", what, e.Err, ClusterVersionMax)
	case e.Op != "" && opVersions[e.Op] == 0:
		return fmt.Sprintf("%s is a %q command, unknown to this fenced (it supports cluster versions up to %d): a newer fenced wrote it: upgrade this node",
			what, e.Op, ClusterVersionMax)
	}
	return fmt.Sprintf("%s needs fenced cluster version %d; this fenced supports up to %d: upgrade this node", what, e.Needs, ClusterVersionMax)
}

// Halted returns why the state machine stopped applying the log (nil
// while it applies it). A halted FSM applies nothing more, takes no
// snapshot and refuses every proposal; its Changed channel was closed at
// the halt.
func (f *FSM) Halted() *HaltError {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.halt
}

// versionRefusal says why a peer supporting cluster versions up to
// supports may not talk raft with a node whose committed cluster version
// is cv ("" = it may): it could not apply the log. This is what keeps a
// node downgraded after the cluster version was raised from rejoining.
func versionRefusal(supports, cv int) string {
	if supports >= cv {
		return ""
	}
	return fmt.Sprintf("its fenced supports cluster versions up to %d and the cluster runs version %d, whose log it cannot apply: "+
		"a node downgraded after the cluster version was raised cannot rejoin; run the newer fenced on it", supports, cv)
}
