package daemon

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fenced/fenced/quorum"
)

// versionView is the cluster version as this node sees it: the committed
// one, and what holds back the next (see quorum/version.go).
type versionView struct {
	Committed int
	// Next is the version the leader may raise to now: the highest every
	// configured voter alive in gossip advertises, capped at this build's
	// (Committed when some voter is not seen or runs an older fenced).
	Next int
	// HeldBy is, when Committed is below this build's version, every
	// voter that holds it back and why ("node3 runs an older fenced").
	HeldBy []string
}

// clusterVersionOf is the rule the leader commits the cluster version by:
// every configured voter (witness included) must be alive in gossip and
// advertise support for the next version, since each is sent every entry.
func clusterVersionOf(committed int, voters []string, members []quorum.Member) versionView {
	v := versionView{Committed: committed, Next: quorum.ClusterVersionMax}
	byName := map[string]quorum.Member{}
	for _, m := range members {
		byName[m.Name] = m
	}
	for _, n := range voters {
		m, ok := byName[n]
		if !ok || m.State != "alive" && m.State != "suspect" {
			v.Next = committed
			if committed < quorum.ClusterVersionMax {
				v.HeldBy = append(v.HeldBy, n+" not seen in gossip")
			}
			continue
		}
		s := m.Meta.SupportsVersion()
		v.Next = min(v.Next, s)
		if s <= committed && committed < quorum.ClusterVersionMax {
			v.HeldBy = append(v.HeldBy, fmt.Sprintf("%s runs an older fenced", n))
		}
	}
	v.Next = max(v.Next, committed)
	return v
}

// versionView is this node's view of the cluster version.
func (d *Daemon) versionView() versionView {
	voters := make([]string, len(d.cfg.Nodes))
	for i, n := range d.cfg.Nodes {
		voters[i] = n.Name
	}
	return clusterVersionOf(d.raft.FSM().ClusterVersion(), voters, d.members.Members())
}

// versionStep, on the leader, raises the committed cluster version by one
// once every configured voter advertises support for it (configLoop runs
// it at every change of gossip membership or metadata).
func (d *Daemon) versionStep(now time.Time) {
	cw := &d.conf.cw
	if !d.raft.IsLeader() || now.Before(cw.versionAfter) {
		return
	}
	v := d.versionView()
	if v.Next <= v.Committed {
		return
	}
	next := v.Committed + 1
	if _, err := d.raft.Apply(quorum.Command{Op: quorum.OpClusterVersion, ClusterVersion: next}, d.commitTimeout()); err != nil {
		d.log.Warn("commit the cluster version", "version", next, "err", err)
		cw.versionAfter = now.Add(time.Second)
		return
	}
	d.log.Info("cluster version committed: every voter runs a fenced that supports it", "cluster_version", next)
}

// text is the status line of the cluster version: "2", or "1 (node3 runs an older
// fenced; 2 once every voter advertises it)".
func (v versionView) text() string {
	if len(v.HeldBy) == 0 {
		return fmt.Sprint(v.Committed)
	}
	return fmt.Sprintf("%d (%s; %d once every voter advertises it)", v.Committed, strings.Join(v.HeldBy, ", "), v.Committed+1)
}

// haltLoop stops the daemon when the replicated state machine halted on
// an entry of a newer fenced (quorum.HaltError): its state can follow the
// cluster's no further, so it must not act on it. It logs why once and
// asks Run to stop as gracefully as it can (the storage stopped, as on
// the loss of the quorum — a stop that fails self-fences —, its release
// forwarded to the leader), and Run then returns the halt.
func (d *Daemon) haltLoop(done <-chan struct{}) {
	for {
		changed := d.raft.FSM().Changed()
		if h := d.raft.FSM().Halted(); h != nil {
			d.log.Error("HALTED: "+h.Error()+"; this node stops acting and the daemon exits", "index", h.Index,
				"cluster_version", d.raft.FSM().ClusterVersion(), "supported", quorum.ClusterVersionMax)
			d.life.halted.Store(h)
			d.life.haltOnce.Do(func() { close(d.life.halt) })
			return
		}
		select {
		case <-done:
			return
		case <-changed:
		}
	}
}

// ErrHalted wraps the error Run returns after a halt.
var ErrHalted = errors.New("halted")
