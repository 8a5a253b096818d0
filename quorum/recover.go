package quorum

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/fenced/fenced/stonith/fencing"
)

// OpRecover starts a new voting set from one node's data after a majority
// was lost for good (fenced recover): Epoch is the epoch it continues at,
// Gone the nodes an admin declared stopped, Incarnation the new voting
// set's identity, Record the history's account of who did it.
const OpRecover = "recover"

// KindRecover is the history record of a recovery.
const KindRecover = fencing.KindRecover

// RecoverEpochGap is how far above the highest epoch this node's log holds
// a recovery continues. The lost majority may have committed grants this
// node never stored (it may have lagged, or been cut off, before the
// disaster); each grant is one takeover, so a million of them unseen is
// beyond any outage, and a storage that checks tokens then refuses every
// writer of the old voting set. An admin who knows the storage's highest
// token passes it as a floor.
const RecoverEpochGap = 1_000_000

// IncarnationFile, in data_dir, names the voting set the node's raft log
// belongs to (empty or absent: the one bootstrapped from the
// configuration). It is part of raft's TLS trust root, so that nodes of an
// older voting set cannot talk raft to those of the recovered one.
const IncarnationFile = "incarnation"

// RecoveringFile, in data_dir, marks a recovery begun and not finished:
// the incarnation file already names the new voting set, the log may not
// hold it yet. The daemon refuses to start on it (run the recovery again).
const RecoveringFile = "recovering"

// SupersededFile, in data_dir, records that a node of a later incarnation
// was seen: this node's data belongs to a voting set an admin declared
// gone. The daemon refuses to start on it.
const SupersededFile = "superseded"

// IncarnationGen is an incarnation's generation, the count of recoveries
// behind it: 0 for the voting set bootstrapped from the configuration
// (""), N for "N.<random>". A recovery continues at its data's generation
// plus one, so the set an admin built last is always the newest.
func IncarnationGen(inc string) uint64 {
	if inc == "" {
		return 0
	}
	g, _, ok := strings.Cut(inc, ".")
	if !ok {
		return 1 // the first format: random hex alone, one recovery
	}
	n, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return 1
	}
	return n
}

// Supersedes reports whether incarnation newer names a later voting set
// than old: a node on old's data must stop for good.
func Supersedes(newer, old string) bool {
	return IncarnationGen(newer) > IncarnationGen(old)
}

// WriteIncarnation records inc in dir, atomically (a node that joins a
// recovered voting set learns it from gossip before raft starts).
func WriteIncarnation(dir, inc string) error {
	return writeFileAtomic(filepath.Join(dir, IncarnationFile), inc+"\n")
}

func writeFileAtomic(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadIncarnation returns the incarnation recorded in dir ("" for none).
func ReadIncarnation(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, IncarnationFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("data_dir %s: %w", dir, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// applyRecover (OpRecover): the epoch jumps to c.Epoch (refused unless
// above the current one), the nodes of c.Gone no longer may run the
// storage nor hold a lease (an admin declared them stopped), a holder
// among them is released, the incarnation becomes c.Incarnation and the
// record is added. It returns the record's ID.
func (f *FSM) applyRecover(c *Command) any {
	s := &f.state
	if e := s.MaxEpoch(); c.Epoch <= e {
		return fmt.Errorf("recover: epoch %d is not above the current epoch %d", c.Epoch, e)
	}
	if c.Record == nil || c.Incarnation == "" {
		return errors.New("recover: missing record or incarnation")
	}
	// Every group's epoch continues above every epoch granted before.
	f.eachGroup(func(_ string, g *GroupState) {
		for _, n := range c.Gone {
			g.cleared(n)
			g.formerEnded(n, anyEpoch)
			if g.Holder == n {
				g.HolderState = HolderReleased
			}
		}
		g.Epoch = c.Epoch
	})
	s.Incarnation = c.Incarnation
	r := *c.Record
	r.Epoch = c.Epoch
	return f.addRecord(r)
}

// RecoverOptions describe an offline recovery of one node's data.
type RecoverOptions struct {
	Self     string
	RaftAddr string // this node's raft address, the new voting set's only voter
	DataDir  string
	// Gone are the configured nodes declared stopped.
	Gone []string
	// EpochFloor: the new epoch is above it too (the storage's highest
	// token, when the admin knows it).
	EpochFloor uint64
	// By is who asked (user@host), Time when.
	By           string
	Time         time.Time
	HistoryLimit int
	Reason       string
}

// Recovered is what a recovery did.
type Recovered struct {
	Before, Epoch uint64 // the highest epoch in the log; the new one
	Incarnation   string
	Holder        string // the holder before
}

// Recover rewrites the raft data in o.DataDir (the daemon stopped) so that
// this node alone is the voting set (raft.RecoverCluster), with the epoch
// RecoverEpochGap above anything the log holds — every entry counts,
// committed or not — and a new incarnation. The new snapshot carries the
// recovery; the incarnation file is written last.
func Recover(o RecoverOptions) (Recovered, error) {
	var out Recovered
	if slices.Contains(o.Gone, o.Self) {
		return out, fmt.Errorf("recover: %s cannot declare itself gone", o.Self)
	}
	db := filepath.Join(o.DataDir, "raft.db")
	if _, err := os.Stat(db); err != nil {
		return out, fmt.Errorf("data_dir %s: no raft log to recover from (%w)", o.DataDir, err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: db, BoltOptions: boltOptions()})
	if err != nil {
		return out, fmt.Errorf("data_dir %s: raft log: %w", o.DataDir, err)
	}
	defer bolt.Close()
	snaps, err := raft.NewFileSnapshotStoreWithLogger(o.DataDir, 2, hclogger(slog.New(slog.DiscardHandler), "snapshot"))
	if err != nil {
		return out, fmt.Errorf("data_dir %s: snapshots: %w", o.DataDir, err)
	}
	prev, err := ReadIncarnation(o.DataDir)
	if err != nil {
		return out, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return out, fmt.Errorf("recover: incarnation: %w", err)
	}
	out.Incarnation = strconv.FormatUint(IncarnationGen(prev)+1, 10) + "." + hex.EncodeToString(b[:])
	// The new incarnation is on disk before the log is rewritten, with a
	// mark that the recovery is under way: a crash in between leaves a
	// node that refuses to start (recover again), never one whose log is
	// the new voting set's while its trust root is the old one's.
	if err := writeFileAtomic(filepath.Join(o.DataDir, RecoveringFile), out.Incarnation+"\n"); err != nil {
		return out, fmt.Errorf("data_dir %s: %w", o.DataDir, err)
	}
	if err := WriteIncarnation(o.DataDir, out.Incarnation); err != nil {
		return out, fmt.Errorf("data_dir %s: %w", o.DataDir, err)
	}
	rf := &recoveringFSM{FSM: NewFSM(o.HistoryLimit), o: o, out: &out}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(o.RaftAddr))
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(o.Self)
	conf.Logger = hclogger(slog.New(slog.DiscardHandler), "raft")
	cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(o.Self), Address: raft.ServerAddress(o.RaftAddr)}}}
	if err := raft.RecoverCluster(conf, rf, bolt, bolt, snaps, trans, cfg); err != nil {
		return out, fmt.Errorf("data_dir %s: recover: %w", o.DataDir, err)
	}
	if rf.err != nil {
		return out, rf.err
	}
	if !rf.done {
		return out, fmt.Errorf("data_dir %s: recover: the log holds no state to recover", o.DataDir)
	}
	// A superseded mark is of the data before: this node now leads the
	// newest set.
	os.Remove(filepath.Join(o.DataDir, SupersededFile))
	if err := os.Remove(filepath.Join(o.DataDir, RecoveringFile)); err != nil {
		return out, fmt.Errorf("data_dir %s: %w", o.DataDir, err)
	}
	return out, nil
}

// recoveringFSM applies the recovery when raft.RecoverCluster, having
// replayed the whole log, takes its snapshot: the snapshot it writes is
// the recovered state.
type recoveringFSM struct {
	*FSM
	o    RecoverOptions
	out  *Recovered
	done bool
	err  error
}

func (r *recoveringFSM) Snapshot() (raft.FSMSnapshot, error) {
	if !r.done {
		st := r.FSM.State()
		if !Supersedes(r.out.Incarnation, st.Incarnation) {
			r.err = fmt.Errorf("recover: the log's voting set %q is not older than the new one %q (data_dir %s: incarnation file and log disagree)", st.Incarnation, r.out.Incarnation, r.o.DataDir)
			return nil, r.err
		}
		r.out.Before, r.out.Holder = st.MaxEpoch(), st.Holder
		r.out.Epoch = max(r.out.Before, r.o.EpochFloor) + RecoverEpochGap
		gone := slices.Sorted(slices.Values(r.o.Gone))
		rec := &fencing.Record{Kind: KindRecover, Target: r.o.Self, Started: r.o.Time, Finished: r.o.Time,
			Outcome: fencing.OutcomeSuccess, RequestedBy: r.o.By, Executor: r.o.Self,
			Reason: fmt.Sprintf("majority lost: new voting set from %s; declared gone: %s; epoch %d → %d", r.o.Self, strings.Join(gone, ", "), r.out.Before, r.out.Epoch)}
		if r.o.Reason != "" {
			rec.Reason += "; " + r.o.Reason
		}
		// The new voting set is this node alone, which runs this
		// version: its cluster version is this build's, and the
		// recovery (version 2) is allowed in it.
		if v := r.FSM.state.Version(); v < ClusterVersionMax {
			r.FSM.apply(&Command{Op: OpClusterVersion, ClusterVersion: ClusterVersionMax})
		}
		c := Command{Op: OpRecover, Node: r.o.Self, Epoch: r.out.Epoch, Gone: gone, Incarnation: r.out.Incarnation, Record: rec, Time: r.o.Time}
		if res, ok := r.FSM.apply(&c).(error); ok {
			r.err = res
			return nil, res
		}
		r.done = true
	}
	return r.FSM.Snapshot()
}
