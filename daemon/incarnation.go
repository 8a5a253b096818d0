package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/quorum"
)

// After `fenced recover` (see recover.go) the survivor alone is the voting
// set, with a new incarnation (quorum.IncarnationGen: one generation up).
// Three things follow from it here:
//   - a node still on the data of the set before — one an admin declared
//     gone, started again — learns from gossip that a newer set exists: it
//     stops for good, and refuses to start on that data (SupersededFile);
//   - a node with no raft data (a replacement, or a declared node wiped)
//     looks in gossip before it starts raft: if a newer set exists it
//     takes that incarnation and waits to be added instead of
//     bootstrapping the configured voting set (which, with two such nodes,
//     would be a second majority);
//   - the leader of a recovered set adds each configured node that
//     advertises its incarnation and is not a voter yet.

// joinSurvey is how long a node without raft data listens to gossip for a
// recovered voting set before it bootstraps the configured one; it ends
// as soon as every other configured node was heard.
var joinSurvey = 2 * time.Second

// checkDataDirMarks refuses to start on data an admin declared gone (a
// newer voting set was seen) or in the middle of a recovery.
func checkDataDirMarks(dir string) error {
	if b, err := os.ReadFile(filepath.Join(dir, quorum.SupersededFile)); err == nil {
		return fmt.Errorf("data_dir %s belongs to a voting set that was replaced: %s. This node was declared gone by `fenced recover`; to join the new voting set, move %s aside (keep it for the record) and start with an empty data_dir", dir, strings.TrimSpace(string(b)), dir)
	}
	if _, err := os.Stat(filepath.Join(dir, quorum.RecoveringFile)); err == nil {
		return fmt.Errorf("data_dir %s: a `fenced recover` was interrupted; run it again before starting", dir)
	}
	return nil
}

// hasRaftData reports whether dir holds a raft log.
func hasRaftData(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "raft.db"))
	return err == nil
}

// joinRecovered is, for a node without raft data, the incarnation of a
// recovered voting set seen in gossip ("" for none: bootstrap the
// configured one), and the node that advertised it.
func joinRecovered(cfg *config.Config, tick func()) (inc, from string, err error) {
	peers := peersOf(cfg)
	heard := map[string]bool{}
	// The survey's own gossip events are not logged: it is a look before
	// the start, whose outcome is logged by the caller.
	ms, err := surveyMembers(cfg, peers, joinSurvey, "joining", slog.New(slog.DiscardHandler), func(ms []quorum.Member) bool {
		tick()
		for _, mb := range ms {
			if mb.Name != cfg.Node && (mb.State == "alive" || mb.State == "suspect") {
				heard[mb.Name] = true
				if quorum.IncarnationGen(mb.Meta.Incarnation) > 0 {
					return true
				}
			}
		}
		return len(heard) == len(peers)-1
	})
	if err != nil {
		return "", "", err
	}
	for _, mb := range ms {
		if mb.Name != cfg.Node && quorum.Supersedes(mb.Meta.Incarnation, inc) {
			inc, from = mb.Meta.Incarnation, mb.Name
		}
	}
	return inc, from, nil
}

// supersededBy is a configured node that advertises a newer voting set
// than this node's, and its incarnation ("" when none does).
func (d *Daemon) supersededBy() (who, inc string) {
	own := d.life.incarnation
	for _, mb := range d.members.Members() {
		if mb.Name != d.self && mb.State != "dead" && mb.State != "left" && quorum.Supersedes(mb.Meta.Incarnation, own) &&
			quorum.Supersedes(mb.Meta.Incarnation, inc) {
			who, inc = mb.Name, mb.Meta.Incarnation
		}
	}
	return who, inc
}

// errSuperseded is why a node on a replaced voting set's data stops.
type errSuperseded struct{ who, inc, own string }

func (e *errSuperseded) Error() string {
	return fmt.Sprintf("%s advertises voting set %s (recovery %d), newer than this node's %s: this node's data was declared gone by `fenced recover`; it stops and will not start on this data again",
		e.who, e.inc, quorum.IncarnationGen(e.inc), describeIncarnation(e.own))
}

func describeIncarnation(inc string) string {
	if inc == "" {
		return "(the configured voting set, never recovered)"
	}
	return fmt.Sprintf("%s (recovery %d)", inc, quorum.IncarnationGen(inc))
}

// checkSuperseded marks this node's data superseded, for good, when a
// newer voting set is seen, and returns why (nil when it is not).
func (d *Daemon) checkSuperseded() error {
	if d.cfg.DataDir == "" || d.opts.Raft.InMemory {
		return nil
	}
	who, inc := d.supersededBy()
	if who == "" {
		return nil
	}
	err := &errSuperseded{who: who, inc: inc, own: d.life.incarnation}
	text := fmt.Sprintf("%s seen at %s advertising voting set %s; this data's is %s", who, time.Now().UTC().Format(time.RFC3339), inc, describeIncarnation(d.life.incarnation))
	if werr := os.WriteFile(filepath.Join(d.cfg.DataDir, quorum.SupersededFile), []byte(text+"\n"), 0o600); werr != nil {
		return errors.Join(err, fmt.Errorf("data_dir %s: recording it: %w", d.cfg.DataDir, werr))
	}
	return err
}

// addJoiners, on the leader of a recovered voting set, adds each
// configured node that advertises this set's incarnation, alive, and is
// no voter yet. One at a time (AddVoter waits for its commit).
func (d *Daemon) addJoiners() {
	inc := d.life.incarnation
	if inc == "" || !d.raft.IsLeader() || !d.life.adding.CompareAndSwap(false, true) {
		return
	}
	servers, err := d.raft.Servers()
	if err != nil {
		d.life.adding.Store(false)
		return
	}
	var add []*config.Node
	for _, mb := range d.members.Members() {
		if mb.Name == d.self || mb.State != "alive" || mb.Meta.Incarnation != inc ||
			slices.ContainsFunc(servers, func(s quorum.RaftServer) bool { return s.ID == mb.Name }) {
			continue
		}
		if n, ok := d.cfg.NodeByName(mb.Name); ok {
			add = append(add, n)
		}
	}
	if len(add) == 0 {
		d.life.adding.Store(false)
		return
	}
	d.life.tasks.Go(func() {
		defer d.life.adding.Store(false)
		for _, n := range add {
			if err := d.raft.AddVoter(n.Name, n.Raft, 10*time.Second); err != nil {
				d.log.Warn("adding a node to the recovered voting set", "peer", n.Name, "err", err)
				return
			}
			d.log.Info("node joined the recovered voting set", "peer", n.Name, "incarnation", inc)
		}
	})
}

// stopSelf makes Run stop gracefully (release, hand over, leave) and
// return err; the first call wins.
func (d *Daemon) stopSelf(err error) {
	d.life.selfStopOnce.Do(func() {
		d.life.selfStopErr = err
		close(d.life.selfStop)
	})
}

// selfStopState is lifetime's part for stopSelf and the incarnation.
type selfStopState struct {
	incarnation  string // this node's voting set (quorum.ReadIncarnation)
	adding       atomic.Bool
	selfStop     chan struct{}
	selfStopOnce sync.Once
	selfStopErr  error
}

// openIncarnation, before raft opens: refuses data marked superseded or
// mid-recovery, reads this node's incarnation, and for a node without
// raft data looks in gossip for a recovered voting set to join (ro.Join).
func (d *Daemon) openIncarnation(cfg *config.Config, ro *quorum.RaftOptions) error {
	if err := checkDataDirMarks(cfg.DataDir); err != nil {
		return err
	}
	inc, err := quorum.ReadIncarnation(cfg.DataDir)
	if err != nil {
		return err
	}
	if inc == "" && !hasRaftData(cfg.DataDir) {
		// The survey takes up to joinSurvey: the service manager hears
		// the node is joining, and its watchdog is fed meanwhile.
		d.notify("STATUS=joining: looking in gossip for a recovered voting set")
		var fed time.Time
		seen, from, err := joinRecovered(cfg, func() {
			if w := d.opts.WatchdogInterval; w > 0 && time.Since(fed) >= w/4 {
				fed = time.Now()
				d.notify("WATCHDOG=1")
			}
		})
		if err != nil {
			return err
		}
		if seen != "" {
			if err := quorum.WriteIncarnation(cfg.DataDir, seen); err != nil {
				return fmt.Errorf("data_dir %s: %w", cfg.DataDir, err)
			}
			d.log.Info("joining a recovered voting set: waiting for its leader to add this node", "incarnation", seen, "seen_on", from)
			inc = seen
		}
	}
	// A node of a recovered set never bootstraps the configured one: the
	// survivor's log has its state, a joiner (even one restarted before
	// it was added, whose log is still empty) waits to be added.
	ro.Join = inc != ""
	d.life.incarnation = inc
	return nil
}

// closeListenersEarly closes the API and metrics listeners of a start
// that failed before raft opened.
func closeListenersEarly(api, metrics interface{ Close() error }) {
	api.Close()
	if metrics != nil {
		metrics.Close()
	}
}
