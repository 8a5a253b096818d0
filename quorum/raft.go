package quorum

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Peer is one configured node.
type Peer struct {
	Name   string
	Raft   string // host:port
	Gossip string // host:port
}

// findPeer returns the peer called name, or nil.
func findPeer(peers []Peer, name string) *Peer {
	for i := range peers {
		if peers[i].Name == name {
			return &peers[i]
		}
	}
	return nil
}

// RaftOptions configure the consensus side of a node.
type RaftOptions struct {
	Self    string
	Peers   []Peer // every configured (voting) node, self included
	DataDir string
	// HeartbeatTimeout is how long a follower waits for its leader before
	// it stands for election (raft randomises up to twice that); the
	// daemon derives it from the lease (tenure.Timing.Raft).
	HeartbeatTimeout time.Duration
	HistoryLimit     int
	Logger           *slog.Logger
	// Transport replaces the TCP transport (in-process tests use
	// raft.InmemTransport to cut links).
	Transport raft.Transport
	// InMemory keeps the log in memory (in-process tests only).
	InMemory bool
	// Keys are the cluster's keys (the gossip keys), the primary first.
	// With them, raft connections use mutual TLS rooted in the keys (see
	// clusterTLS); without, plain TCP. Key alone is the same as Keys of
	// that one key.
	Keys [][]byte
	Key  []byte
	// Cluster is the cluster's name; it is part of the TLS trust root, so
	// two clusters sharing a key still cannot talk.
	Cluster string
	// Join: a node without raft data does not bootstrap the configured
	// voting set; it waits for the leader of a recovered one to add it
	// (AddVoter).
	Join bool

	// supports replaces ClusterVersionMax in this node's certificate
	// (tests: a node of an older version); 0 = ClusterVersionMax.
	supports int
	// snapshotInterval replaces raft's check for a snapshot every
	// SnapshotInterval (benchmarks: a year's compactions in a minute);
	// 0 = raftConfig's.
	snapshotInterval time.Duration
}

// Raft is the node's consensus engine with fenced's state machine.
type Raft struct {
	r     *raft.Raft
	logs  raft.LogStore
	fsm   *FSM
	self  string
	trans raft.Transport // the inner transport (kick wraps it for raft)
	kick  *kickTransport
	close func() error
	log   *slog.Logger

	contacts *contactTracker
	hb       time.Duration  // raft's heartbeat timeout when not leading
	changes  *raft.Observer // see onLeaderChange
	reloadMu sync.Mutex     // one ReloadConfig at a time (pace, re-check)
	leaderMu sync.Mutex
	leaderCh chan struct{} // closed (and replaced) at a change of leader
	// elections follows the campaigns this node stood in (LastElection).
	elections elections
	// tls is the mutual TLS of the raft connections; nil over plain TCP
	// or a test's transport.
	tls *raftKeys
}

// raftKeys are the keys the raft stream's TLS is made of.
type raftKeys struct {
	stream *tlsStream
	trust  string // the cluster's name (and incarnation) the CAs are of

	mu   sync.Mutex
	keys [][]byte
}

// keys are the options' keys, primary first (nil: plain TCP).
func (o RaftOptions) keys() [][]byte {
	if len(o.Keys) > 0 {
		return o.Keys
	}
	if o.Key != nil {
		return [][]byte{o.Key}
	}
	return nil
}

// SetKeys makes keys (primary first) those of the raft connections made or
// accepted from now on: this node presents a certificate of keys[0]'s CA
// and accepts a peer's of any key's. Established connections stay as they
// are, so a rotation costs no election. It returns whether anything
// changed; over plain TCP (or a test's transport) there is nothing to
// change.
func (q *Raft) SetKeys(keys [][]byte) (bool, error) {
	t := q.tls
	if t == nil {
		return false, nil
	}
	if len(keys) == 0 {
		return false, errors.New("raft keys: no key; raft runs over TLS and needs one")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if sameKeys(t.keys, keys) {
		return false, nil
	}
	conf, err := clusterTLS(keys, t.trust, q.self)
	if err != nil {
		return false, err
	}
	t.stream.setConf(conf, KeyIDs(keys))
	t.keys = slices.Clone(keys)
	q.log.Info("raft: TLS keys changed: new connections use them, established ones stay", "keys", strings.Join(KeyIDs(keys), ","), "primary", KeyID(keys[0]))
	return true, nil
}

// CloseRemovedKeyConns closes the established raft connections whose
// peer's certificate chains to none of this node's keys now, unless
// keep(peer) says the peer holds keys it can connect again with (as its
// gossip says). A rotation's connections, all made under the old key,
// stay; a node left with only a removed key loses them, and the new ones
// it tries are refused: it is shut out of raft as of gossip. It returns
// the peers whose connections it closed.
func (q *Raft) CloseRemovedKeyConns(keep func(peer string) bool) []string {
	if q.tls == nil {
		return nil
	}
	closed := q.tls.stream.closeRemoved(keep)
	for _, p := range closed {
		q.log.Warn("raft: closed the connections of a peer whose certificate is of a removed key and that holds none of this node's keys", "peer", p)
	}
	return closed
}

// raftConfig builds raft's configuration around hb, the followers'
// heartbeat timeout (derived from the lease by the daemon).
func raftConfig(self string, hb time.Duration, log *slog.Logger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(self)
	c.HeartbeatTimeout = hb
	c.ElectionTimeout = hb
	// raft's own step-down; fenced's lease (daemon) is what guards safety,
	// so this only needs to be as tolerant as the followers are.
	c.LeaderLeaseTimeout = hb
	// The leader's idle replication loop sends an AppendEntries every
	// CommitTimeout to carry the commit index to followers. Commits are not
	// delayed by it; only a follower's copy of the state (its status
	// output) may trail by up to one heartbeat timeout, and the lease
	// renewals, one per heartbeat, carry the index sooner anyway.
	c.CommitTimeout = hb
	// Lease renewals append a barrier entry every heartbeat; snapshot often
	// enough that the log stays small.
	c.SnapshotThreshold = 2048
	c.SnapshotInterval = 30 * time.Second
	c.TrailingLogs = 1024
	c.Logger = hclogger(log, "raft")
	return c
}

// OpenRaft starts the consensus engine. On first start it bootstraps the
// cluster with every configured node as a voter; later starts resume from
// the durable log, so the epoch continues where it stopped.
func OpenRaft(o RaftOptions) (*Raft, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	self := findPeer(o.Peers, o.Self)
	if self == nil {
		return nil, fmt.Errorf("raft: node %q is not among the configured nodes", o.Self)
	}
	if o.HeartbeatTimeout <= 0 {
		return nil, errors.New("raft: no heartbeat timeout")
	}
	conf := raftConfig(o.Self, o.HeartbeatTimeout, log)
	if o.snapshotInterval > 0 {
		conf.SnapshotInterval = o.snapshotInterval
	}
	fsm := NewFSM(o.HistoryLimit)

	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
		closes []func() error
	)
	if o.InMemory {
		st := raft.NewInmemStore()
		logs, stable, snaps = st, st, raft.NewInmemSnapshotStore()
	} else {
		dir := o.DataDir
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("data_dir %s: %w", dir, err)
		}
		if err := checkWritable(dir); err != nil {
			return nil, fmt.Errorf("data_dir %s: %w", dir, err)
		}
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), BoltOptions: boltOptions()})
		if err != nil {
			return nil, fmt.Errorf("data_dir %s: raft log: %w", dir, err)
		}
		closes = append(closes, bolt.Close)
		fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclogger(log, "snapshot"))
		if err != nil {
			bolt.Close()
			return nil, fmt.Errorf("data_dir %s: snapshots: %w", dir, err)
		}
		logs, stable, snaps = bolt, bolt, fss
	}
	closeAll := func() error {
		var errs []error
		for _, c := range closes {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	}

	trans := o.Transport
	var tlsKeys *raftKeys
	if trans == nil {
		addr, err := net.ResolveTCPAddr("tcp", self.Raft)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("raft address %s: %w", self.Raft, err)
		}
		// Plain TCP or mutual TLS rooted in the cluster key; either way
		// thin-stream sockets (thin.go).
		var stream raft.StreamLayer
		if keys := o.keys(); len(keys) > 0 {
			// A recovered voting set has a trust root of its own: nodes
			// still on the data of the one before cannot talk to it.
			// (An in-memory log has no data_dir to hold one.)
			trust := o.Cluster
			if !o.InMemory {
				inc, ierr := ReadIncarnation(o.DataDir)
				if ierr != nil {
					closeAll()
					return nil, ierr
				}
				if inc != "" {
					trust += " incarnation " + inc
				}
			}
			supports := ClusterVersionMax
			if o.supports > 0 {
				supports = o.supports
			}
			conf, cerr := clusterTLSSupporting(keys, trust, o.Self, supports)
			if cerr != nil {
				closeAll()
				return nil, cerr
			}
			tlsS, terr := newTLSStream(self.Raft, addr, conf, streamGuard{Known: knownAddrs(o.Peers, func(p Peer) string { return p.Raft }), Log: log, KeyIDs: KeyIDs(keys),
				Admit: func(_ string, supports int) string { return versionRefusal(supports, fsm.ClusterVersion()) }})
			if terr == nil {
				tlsKeys = &raftKeys{stream: tlsS, trust: trust, keys: keys}
				stream = tlsS
			}
			err = terr
		} else {
			stream, err = newTCPStream(self.Raft, addr)
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("raft address %s: %w", self.Raft, err)
		}
		t := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: stream, MaxPool: 3, Timeout: 2 * time.Second, Logger: hclogger(log, "raft-net"),
		})
		trans = t
		closes = append([]func() error{t.Close}, closes...)
	}

	kick := newKickTransport(trans, o.Self)
	closes = append([]func() error{kick.Close}, closes...)
	existing, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("raft: reading state: %w", err)
	}
	if !existing && !o.Join {
		var cfg raft.Configuration
		for _, p := range o.Peers {
			addr := raft.ServerAddress(p.Raft)
			if o.Transport != nil {
				addr = raft.ServerAddress(p.Name)
			}
			cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.Name), Address: addr})
		}
		// Every node bootstraps with the same configuration; raft treats
		// identical bootstraps as one.
		if err := raft.BootstrapCluster(conf, logs, stable, snaps, kick, cfg); err != nil {
			closeAll()
			return nil, fmt.Errorf("raft: bootstrap: %w", err)
		}
	}
	r, err := raft.NewRaft(conf, fsm, logs, stable, snaps, kick)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("raft: %w", err)
	}
	q := &Raft{r: r, logs: logs, fsm: fsm, self: o.Self, trans: trans, kick: kick, close: closeAll, log: log, tls: tlsKeys}
	// The term it started in, or a later one: renewal rounds are
	// answered only of later terms (see takeRound).
	q.contacts = &contactTracker{last: map[string]Mono{}, sealed: map[string]uint64{}, startTerm: r.CurrentTerm()}
	q.hb = conf.HeartbeatTimeout
	q.changes = raft.NewObserver(nil, false, q.observe)
	q.r.RegisterObserver(q.changes)
	return q, nil
}

func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// FSM returns the state machine (read-only use).
func (q *Raft) FSM() *FSM { return q.fsm }

// IsLeader reports whether this node is the raft leader right now.
func (q *Raft) IsLeader() bool { return q.r.State() == raft.Leader }

// LeaderChanged returns a channel closed at the next change of leader as
// this node sees it (any node's, unlike LeaderCh); any number of
// goroutines may wait on it.
func (q *Raft) LeaderChanged() <-chan struct{} {
	q.leaderMu.Lock()
	defer q.leaderMu.Unlock()
	if q.leaderCh == nil {
		q.leaderCh = make(chan struct{})
	}
	return q.leaderCh
}

// LeaderCh signals leadership changes of this node.
func (q *Raft) LeaderCh() <-chan bool { return q.r.LeaderCh() }

// Leader returns the leader's node name, or "".
func (q *Raft) Leader() string {
	_, id := q.r.LeaderWithID()
	return string(id)
}

// RaftState returns "leader", "follower", "candidate" or "shutdown".
func (q *Raft) RaftState() string {
	switch q.r.State() {
	case raft.Leader:
		return "leader"
	case raft.Candidate:
		return "candidate"
	case raft.Follower:
		return "follower"
	}
	return "shutdown"
}

// CommitIndex is the index of the newest entry this node knows to be
// committed; AppliedIndex the newest its state machine applied.
func (q *Raft) CommitIndex() uint64  { return q.r.CommitIndex() }
func (q *Raft) AppliedIndex() uint64 { return q.r.AppliedIndex() }

// Term is the current raft term.
func (q *Raft) Term() uint64 { return q.r.CurrentTerm() }

// LastLog is this node's newest log entry, index and term: what a voter
// compares with a candidate's before it grants its vote.
func (q *Raft) LastLog() (index, term uint64) {
	index = q.r.LastIndex()
	var l raft.Log
	if err := q.logs.GetLog(index, &l); err == nil {
		return index, l.Term
	}
	// The newest entry is in a snapshot (just installed): as raft does,
	// take the newer of its last log entry and its last snapshot.
	st := q.r.Stats()
	num := func(k string) uint64 { n, _ := strconv.ParseUint(st[k], 10, 64); return n }
	index, term = num("last_log_index"), num("last_log_term")
	if si := num("last_snapshot_index"); si > index {
		index, term = si, num("last_snapshot_term")
	}
	return index, term
}

// LastContact is when a follower last heard from its leader.
func (q *Raft) LastContact() time.Time { return q.r.LastContact() }

// Apply commits c through the log and returns the state machine's answer.
// It returns once a majority of the configured nodes stored c. Every
// proposal passes here: a command the committed cluster version does not
// allow yet is refused (FSM.Allows), so no node is sent an entry it cannot
// apply; one above version 1 carries the version it needs, so that a node
// that does not support it halts on it whatever it is.
func (q *Raft) Apply(c Command, timeout time.Duration) (any, error) {
	f, err := q.propose(&c, timeout)
	if err != nil {
		return nil, err
	}
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("commit %s: %w", c.Op, err)
	}
	// Followers learn that an entry is committed only from the next
	// AppendEntries that carries the commit index: raft's heartbeats do
	// not, and an idle leader sends one only every CommitTimeout. A
	// barrier right behind the entry is replicated at once and carries
	// it, so every node's status follows a change within a round trip.
	// Its own result does not matter.
	q.r.Barrier(timeout)
	if c.Op == OpRelease && q.fsm.Halted() != nil {
		// Committed; this node's own state machine applies nothing more.
		return nil, nil
	}
	return answerOf(f)
}

// ApplyQueued hands c to raft and returns at once, before it is
// committed; wait blocks until it is, with the state machine's answer.
// Entries handed over one after another by this node, as leader, are
// committed in that order: a later Apply (or ApplyQueued) of the same
// leader lands after it. So a record's progress can be queued without
// waiting, and its final form, committed after, is never overwritten by it.
func (q *Raft) ApplyQueued(c Command, timeout time.Duration) (wait func() (any, error)) {
	f, err := q.propose(&c, timeout)
	if err != nil {
		return func() (any, error) { return nil, err }
	}
	return func() (any, error) {
		if err := f.Error(); err != nil {
			return nil, fmt.Errorf("commit %s: %w", c.Op, err)
		}
		return answerOf(f)
	}
}

// propose checks c against the committed cluster version, marks the
// version it needs and hands it to raft (see Apply).
func (q *Raft) propose(c *Command, timeout time.Duration) (raft.ApplyFuture, error) {
	if err := q.fsm.Allows(c); err != nil {
		return nil, fmt.Errorf("commit %s: %w", c.Op, err)
	}
	if n := c.Needs(); n > 1 {
		c.Version = n
	}
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return q.r.Apply(data, timeout), nil
}

// answerOf is the state machine's answer to a committed entry: its error,
// if it refused it.
func answerOf(f raft.ApplyFuture) (any, error) {
	if err, ok := f.Response().(error); ok {
		return nil, err
	}
	return f.Response(), nil
}

// Confirm proves this node still leads a majority: it commits a barrier
// entry created after it was called. A majority storing an entry that did
// not exist before the call means each of them acknowledged this leader
// after the call, which is what a lease renewal needs. (raft's VerifyLeader
// is not enough: it may count a heartbeat reply that was already in flight,
// e.g. buffered while the process was paused.)
func (q *Raft) Confirm(timeout time.Duration) error {
	if h := q.fsm.Halted(); h != nil {
		// Its state stopped at an entry it cannot apply: it renews nothing.
		return h
	}
	return q.r.Barrier(timeout).Error()
}

// TransferLeadership hands leadership to another voter.
func (q *Raft) TransferLeadership() error { return q.r.LeadershipTransfer().Error() }

// AddVoter adds the named node, at addr, to the voting set (the leader
// only): a node joining a recovered voting set.
func (q *Raft) AddVoter(name, addr string, timeout time.Duration) error {
	if _, ok := q.trans.(*raft.InmemTransport); ok {
		addr = name
	}
	return q.r.AddVoter(raft.ServerID(name), raft.ServerAddress(addr), 0, timeout).Error()
}

// TransferLeadershipTo hands leadership to the named voter.
func (q *Raft) TransferLeadershipTo(name, addr string) error {
	if _, ok := q.trans.(*raft.InmemTransport); ok {
		addr = name
	}
	return q.r.LeadershipTransferToServer(raft.ServerID(name), raft.ServerAddress(addr)).Error()
}

// Shutdown stops raft and closes the stores.
func (q *Raft) Shutdown() error {
	q.r.DeregisterObserver(q.changes)
	err := q.r.Shutdown().Error()
	return errors.Join(err, q.close())
}

// leaderPace is how much longer than a follower's heartbeat timeout the
// leader's is. hashicorp/raft sends heartbeats every tenth of the timeout
// (randomised up to a fifth) and followers wait one to two timeouts, so a
// leader with twice the timeout still reaches each follower at least twice
// within the shortest wait, besides the lease renewal and commit-index
// AppendEntries that also count as contact. It halves the idle traffic.
const leaderPace = 2

// onLeaderChange runs inside raft's own call that records a leader change
// (as an observer's filter; it returns false, so nothing is queued):
//   - it samples raft's leader and last contact: at that moment the last
//     contact is still the departing leader's, so the contact tracker's
//     record is exact and needs no polling (SinceContact samples afresh
//     for the current leader);
//   - it paces heartbeats: leaderPace × hb while this node leads, hb
//     otherwise, so detection by followers keeps its speed.
func (q *Raft) onLeaderChange(lo raft.LeaderObservation) {
	q.sampleContact()
	q.leaderMu.Lock()
	if q.leaderCh != nil {
		close(q.leaderCh)
	}
	q.leaderCh = make(chan struct{})
	q.leaderMu.Unlock()
	t := q.hb
	if string(lo.LeaderID) == q.self {
		t = leaderPace * q.hb
	}
	q.reloadMu.Lock()
	defer q.reloadMu.Unlock()
	if rc := q.r.ReloadableConfig(); rc.HeartbeatTimeout != t {
		rc.HeartbeatTimeout, rc.ElectionTimeout = t, t
		if err := q.r.ReloadConfig(rc); err != nil {
			q.log.Warn("raft: heartbeat pace", "err", err)
		}
	}
}

// observe is raft's observer filter: it runs inside raft's own calls and
// returns false, so nothing is queued.
func (q *Raft) observe(o *raft.Observation) bool {
	switch d := o.Data.(type) {
	case raft.LeaderObservation:
		q.observeElection(d)
		q.onLeaderChange(d)
	case raft.RaftState:
		q.observeElection(d)
	}
	return false
}

// RaftServer is one server of the raft configuration this node holds.
type RaftServer struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"` // Voter, Nonvoter, Staging
}

// Servers is the raft configuration as this node holds it (the latest,
// committed or not): who votes, at which address.
func (q *Raft) Servers() ([]RaftServer, error) {
	f := q.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []RaftServer
	for _, s := range f.Configuration().Servers {
		out = append(out, RaftServer{ID: string(s.ID), Address: string(s.Address), Suffrage: s.Suffrage.String()})
	}
	return out, nil
}

// Stats are raft's own counters and state (hashicorp/raft's Stats: term,
// indexes, last contact, configuration), for diagnostics.
func (q *Raft) Stats() map[string]string { return q.r.Stats() }
