package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fenced/fenced/quorum"
)

// beat records that the main loop made progress. A loop that stopped
// beating stops the systemd watchdog pings, so systemd restarts the
// service (and a hardware watchdog would reset the node).
func (d *Daemon) beat() {
	d.injectedStall()
	d.life.lastBeat.Store(int64(quorum.Now()))
}

func (d *Daemon) notify(state string) {
	if d.opts.Notify != nil {
		d.opts.Notify(state)
	}
}

// lifecycle tells the service manager about the daemon: READY=1 once it
// has joined the cluster (a leader is known and this node applied the
// state up to what that leader had committed when asked) and opened the
// fence device sessions it should hold (sessionsPending), WATCHDOG=1
// while the main loop beats, STATUS= with role and epoch.
func (d *Daemon) lifecycle(done <-chan struct{}) {
	joined, ready := false, false
	var target uint64 // the leader's commit index, once learned
	var lastStatus string
	// Until it joined it looks twice a second; then the status line
	// follows the replicated state and the leader, and it beats for the
	// service watchdog (a quarter of its interval; every 5 s besides).
	w := d.opts.WatchdogInterval
	t := time.NewTimer(0)
	defer t.Stop()
	var changed, leader <-chan struct{}
	for {
		select {
		case <-done:
			return
		case <-t.C:
		case <-changed:
		case <-leader:
		}
		changed, leader = d.raft.FSM().Changed(), d.raft.LeaderChanged() // before looking: no change missed
		wait := 500 * time.Millisecond
		if ready {
			wait = 5 * time.Second
		} else {
			changed = nil
		}
		if w > 0 {
			wait = min(wait, w/4)
		}
		t.Reset(wait) // Go ≥ 1.23: no stale tick after Reset
		if !joined && target == 0 && d.raft.Leader() != "" {
			target = d.leaderCommit()
		}
		if !joined && target > 0 && d.raft.AppliedIndex() >= target {
			joined = true
			d.life.joined.Store(int64(quorum.Now()))
			d.log.Info("joined the cluster", "leader", d.raft.Leader(), "epoch", d.KnownEpoch(), "index", d.raft.AppliedIndex())
			if pending := d.sessionsPending(); len(pending) > 0 {
				d.log.Info("opening fence device sessions before reporting ready", "devices", strings.Join(pending, ","), "at_most", sessionsAtJoin)
			}
			d.nudgeControl() // the bound of sessionsPending runs from now
		}
		if joined && !ready {
			if pending := d.sessionsPending(); len(pending) == 0 {
				ready = true
				d.life.ready.Store(true)
				d.log.Info("ready", "after_join", quorum.Since(quorum.Mono(d.life.joined.Load())).Round(time.Millisecond))
				d.notify("READY=1")
				d.nudgeControl()
			}
		}
		if w := d.opts.WatchdogInterval; w > 0 && quorum.Since(quorum.Mono(d.life.lastBeat.Load())) < w/2 {
			d.notify("WATCHDOG=1")
		}
		if s := d.statusLine(joined, ready); s != lastStatus {
			lastStatus = s
			d.notify("STATUS=" + s)
		}
	}
}

// leaderCommit asks the leader for its commit index (0: no answer yet). A
// follower learns the leader from its first heartbeat, which carries no
// commit index: knowing the leader is not having its state.
func (d *Daemon) leaderCommit() uint64 {
	leader := d.raft.Leader()
	if leader == d.self {
		return d.raft.CommitIndex()
	}
	ctx, cancel := context.WithTimeout(d.life.hardCtx, time.Second)
	defer cancel()
	out, err := d.members.Call(ctx, leader, fwdCommit, nil)
	if err != nil {
		return 0
	}
	var r commitResp
	if json.Unmarshal(out, &r) != nil {
		return 0
	}
	return r.Index
}

const fwdCommit = "commit" // "what is your commit index?"

type commitResp struct {
	Index uint64 `json:"index"`
}

func (d *Daemon) answerCommit() ([]byte, error) {
	if !d.raft.IsLeader() {
		return nil, errNotLeader
	}
	return json.Marshal(commitResp{Index: d.raft.CommitIndex()})
}

func (d *Daemon) statusLine(joined, ready bool) string {
	if !joined {
		return "joining the cluster"
	}
	if !ready {
		return "joined the cluster, opening fence device sessions"
	}
	st := d.raft.FSM().Holders()
	switch role := d.Role(); role {
	case RolePrimary, RolePrimaryElect:
		if why := d.ctl.view.Load().blocked; why != "" {
			return fmt.Sprintf("%s, epoch %d, BLOCKED: %s", role, d.Epoch(), why)
		}
		return fmt.Sprintf("%s, epoch %d", role, d.Epoch())
	default:
		return fmt.Sprintf("%s, primary %s at epoch %d", role, dashIfEmpty(st.Holder), st.Epoch)
	}
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
