package daemon

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/alerts"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/resource"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// What the status says of quorum is what this node reaches now (issue 24):
// "3 of 3 configured nodes seen" beside "no quorum" told an admin nothing,
// and a Primary line read as current when the node could confirm nothing.

// reachWindow is how recent a gossip contact (a probe answered) must be
// for a node to count as reachable: memberlist probes one node a second,
// round-robin over the n−1 others in an order shuffled each round, so the
// same node may wait up to 2(n−1)−1 probes, and the last one's timeout.
func reachWindow(n int, lease time.Duration) time.Duration {
	return max(lease, time.Duration(2*(n-1))*time.Second)
}

// quorumOf is the quorum part of the status: configured, seen (gossip
// alive or suspect), reachable (this node; each node gossip finds alive,
// not suspect, that answered a probe within window; and the leader while
// this node hears it) and needed votes; the leader and whether this node
// hears it (it leads, or heard it by raft or beacon within detect).
// It has quorum when it hears a leader and reaches a majority.
func quorumOf(members []quorum.Member, self string, configured, needed int, leader string, leads bool, silence, detect, window time.Duration, now time.Time) api.QuorumStatus {
	q := api.QuorumStatus{Configured: configured, Needed: needed, Leader: leader}
	q.LeaderHeard = leads || leader != "" && silence < detect
	if !q.LeaderHeard && leader != "" {
		q.LeaderSilentSec = silence.Seconds()
	}
	for _, m := range members {
		alive := m.State == "alive" || m.State == "suspect"
		if alive {
			q.Seen++
		}
		switch {
		case m.Name == self:
			q.Reachable++
		case m.Name == leader && q.LeaderHeard:
			q.Reachable++
		case m.State == "alive" && !m.Contact.IsZero() && now.Sub(m.Contact) <= window:
			q.Reachable++
		}
	}
	q.Have = q.LeaderHeard && q.Reachable >= q.Needed
	return q
}

// quorumNow is quorumOf for this node now.
func (d *Daemon) quorumNow() api.QuorumStatus {
	leader, leads := d.raft.Leader(), d.raft.IsLeader()
	var silence time.Duration
	if d.detector != nil {
		silence = d.detector.Silence()
	} else if lc := d.raft.LastContact(); !lc.IsZero() {
		silence = time.Since(lc)
	}
	detect := d.cfg.Timing.Tenure().Raft().Detect
	members, configured, needed := d.members.Members(), len(d.cfg.Nodes), d.cfg.Majority()
	if d.life.incarnation != "" {
		// A recovered voting set counts its voters, not the
		// configuration: after `fenced recover` the survivor alone is
		// a majority, until the others join.
		if servers, err := d.raft.Servers(); err == nil {
			members = slices.DeleteFunc(members, func(m quorum.Member) bool {
				return !slices.ContainsFunc(servers, func(s quorum.RaftServer) bool { return s.ID == m.Name && s.Suffrage == "Voter" })
			})
			configured, needed = len(members), len(members)/2+1
		}
	}
	q := quorumOf(members, d.self, configured, needed, leader, leads, silence, detect,
		reachWindow(configured, d.cfg.Timing.Lease.D()), time.Now())
	q.Incarnation = d.life.incarnation
	return q
}

// quorumWords is a quorum as the log and the alerts say it: what this
// node reaches and what it lacks.
func quorumWords(q api.QuorumStatus) string {
	s := fmt.Sprintf("%d of %d votes reachable, %d needed", q.Reachable, q.Configured, q.Needed)
	switch {
	case q.LeaderHeard:
		s += ", leader " + q.Leader + " heard"
	case q.Leader != "":
		s += fmt.Sprintf(", leader %s not heard for %.1fs", q.Leader, q.LeaderSilentSec)
	default:
		s += ", no leader"
	}
	return s
}

// quorumStep logs a loss of quorum as soon as the status says it (this
// node once had quorum), with what was lost, and its return; and raises
// the quorum alerts: lost when it has lasted longer than a lease with
// too few votes reachable, or longer than three with no leader heard (a
// failover's election takes about one: it is alerted by its fence and its
// new primary, not as a loss of quorum); regained when both are back.
func (d *Daemon) quorumStep(now time.Time) {
	cw := &d.conf.cw
	q := d.quorumNow()
	switch {
	case q.Have:
		if !cw.quorumLostAt.IsZero() {
			d.log.Info("quorum regained", "reachable", q.Reachable, "needed", q.Needed, "leader", q.Leader,
				"lost_for", now.Sub(cw.quorumLostAt).Round(time.Millisecond))
		}
		if cw.quorumLost {
			d.alerts.Emit(alerts.Event{Name: alerts.QuorumRegained, Kind: alerts.KindAttribute, Node: d.self, Attribute: "quorum",
				Value: "regained: " + quorumWords(q)})
		}
		cw.quorumHad, cw.quorumLost, cw.quorumLostAt = true, false, time.Time{}
		cw.quorumWhy = ""
	case !cw.quorumHad:
	default:
		// Say what is missing: enough votes with no leader heard is a
		// majority that has not elected (yet), or a split. Logged when
		// the status first says no quorum, and again when what is
		// missing changes (gossip gives the dead up later than the
		// leader's silence shows).
		missing := "too few votes reachable"
		if q.Reachable >= q.Needed {
			missing = "no leader heard, though enough votes are reachable"
		}
		if cw.quorumLostAt.IsZero() {
			cw.quorumLostAt = now
		}
		if missing != cw.quorumWhy {
			cw.quorumWhy = missing
			d.log.Warn("quorum lost", "why", missing, "reachable", q.Reachable, "needed", q.Needed, "configured", q.Configured,
				"leader_heard", q.LeaderHeard, "leader", q.Leader, "leader_silent", time.Duration(q.LeaderSilentSec*float64(time.Second)).Round(time.Millisecond),
				"gossip_seen", q.Seen, "lost_for", now.Sub(cw.quorumLostAt).Round(time.Millisecond))
		}
		if !cw.quorumLost && now.Sub(cw.quorumLostAt) > d.cfg.Timing.Lease.D() && (q.Reachable < q.Needed || now.Sub(cw.quorumLostAt) > 3*d.cfg.Timing.Lease.D()) {
			cw.quorumLost = true
			d.alerts.Emit(alerts.Event{Name: alerts.QuorumLost, Kind: alerts.KindAttribute, Node: d.self, Attribute: "quorum", Value: "lost: " + quorumWords(q)})
		}
	}
}

// quorumLoop runs quorumStep four times a second, and at every change of
// leader or of gossip membership, so the log says no quorum when the
// status first does.
func (d *Daemon) quorumLoop(done <-chan struct{}) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		leader, members := d.raft.LeaderChanged(), d.members.Changed()
		d.quorumStep(time.Now())
		select {
		case <-done:
			return
		case <-t.C:
		case <-leader:
		case <-members:
		}
	}
}

// primacyChange says why the current holder got primacy, from the
// replicated state: the first grant, or how its predecessor's tenure
// ended, as the newest record of it says (fenced, released, its lease
// certainly ended, confirmed by an admin); "" when there is no holder.
func primacyChange(st quorum.State) string {
	switch {
	case st.Holder == "":
		return ""
	case st.Previous == "":
		return st.Holder + " was granted primacy (no holder before it)"
	}
	for i := len(st.History) - 1; i >= 0; i-- {
		r := st.History[i]
		if r.Target != st.Previous {
			continue
		}
		switch {
		case r.Kind == fencing.KindFence && r.Outcome == fencing.OutcomeSuccess && r.Action != fencing.ActionOn:
			return fmt.Sprintf("took over from %s, fenced by %s (%s, read back)", st.Previous, r.Executor, r.Action)
		case r.Kind == fencing.KindFence && r.Outcome == fencing.OutcomePending:
			return fmt.Sprintf("taking over from %s: fencing it", st.Previous)
		case r.Kind == fencing.KindFence:
			return fmt.Sprintf("taking over from %s: its fence %s: %s", st.Previous, r.Outcome, r.Error)
		case r.Kind == fencing.KindRelease:
			return fmt.Sprintf("took over from %s, which released the group", st.Previous)
		case r.Kind == fencing.KindConfirm:
			return fmt.Sprintf("took over from %s, confirmed stopped by an admin", st.Previous)
		case r.Kind == fencing.KindExpiry, r.Kind == fencing.KindWatchdog:
			return fmt.Sprintf("took over from %s: %s", st.Previous, r.Reason)
		}
	}
	return "took over from " + st.Previous
}

// pendingFences are the fences and unfences the replicated history holds
// as running, with how long they have run and, from the record, their
// last device attempt; for those this node's engine runs, the step each
// device is at now.
func pendingFences(st quorum.State, steps []stonith.Step, now time.Time) []api.PendingFence {
	var out []api.PendingFence
	for _, r := range st.History {
		if r.Outcome != fencing.OutcomePending || (r.Kind != fencing.KindFence && r.Kind != fencing.KindUnfence) {
			continue
		}
		p := api.PendingFence{ID: r.ID, Kind: r.Kind, Target: r.Target, Action: r.Action, Executor: r.Executor, Epoch: r.Epoch,
			Reason: r.Reason, Runs: r.Runs, Started: wallPtr(r.Started)}
		if !r.Started.IsZero() {
			p.ElapsedSec = max(now.Sub(r.Started), 0).Seconds()
		}
		if n := len(r.Attempts); n > 0 {
			a := r.Attempts[n-1]
			p.LastAttempt = &api.FenceAttempt{Level: a.Level, Device: a.Device, Try: a.Try, Result: a.Result, ReadBack: a.ReadBack, Error: a.Error}
		}
		out = append(out, p)
	}
	for _, s := range steps {
		for i := range out {
			p := &out[i]
			// The engine's step is of the operation on the target; the
			// record it belongs to is the newest pending one of it.
			if p.Target != s.Target || p.Action != s.Action || i+1 < len(out) && slicesHasTarget(out[i+1:], s.Target, s.Action) {
				continue
			}
			p.Steps = append(p.Steps, api.FenceStep{Level: s.Level, Device: s.Device, Try: s.Try, Step: s.Step,
				ForSec: max(now.Sub(s.Since), 0).Seconds()})
		}
	}
	return out
}

func slicesHasTarget(ps []api.PendingFence, target, action string) bool {
	for _, p := range ps {
		if p.Target == target && p.Action == action {
			return true
		}
	}
	return false
}

// Resource states as gossip carries them: one letter per resource of the
// group, in group order, at most maxResourceLetters (gossip metadata is
// at most 512 bytes).
var resourceLetter = map[string]byte{
	resource.StateStopped: 's', resource.StateStarting: 't', resource.StateRunning: 'r',
	resource.StateStopping: 'p', resource.StateFailed: 'f',
}

const maxResourceLetters = 64

// resourceLetters is the group's state in gossip's form ("" with no group).
func resourceLetters(group []resource.Status) string {
	var b strings.Builder
	for i, r := range group {
		if i == maxResourceLetters {
			break
		}
		c, ok := resourceLetter[r.State]
		if !ok {
			c = '?'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// letterState is a gossiped letter's state ("" for stopped).
func letterState(c byte) string {
	for st, l := range resourceLetter {
		if l == c {
			if st == resource.StateStopped {
				return ""
			}
			return st
		}
	}
	return "unknown"
}

// resourcePlaces says where each resource of group (this node's, in group
// order: the group is cluster-wide configuration) runs: on this node from
// group itself, on the others from their gossip (letters, by node; marked
// stale with the node), and on a node gossip does not see that may still
// run the storage (unclean or unconfirmed) as unknown. A node whose
// letters do not match the group (another configuration) is left out.
//
// A node whose gossip is stale and whose newest record in the history is
// a fence read back off (fenced) runs nothing: its last gossip, from
// before it died, is not shown as running.
func resourcePlaces(self string, group []resource.Status, nodes []api.NodeStatus, letters map[string]string, fenced map[string]bool) []api.ResourcePlace {
	if len(group) == 0 {
		return nil
	}
	out := make([]api.ResourcePlace, len(group))
	for i, r := range group {
		out[i] = api.ResourcePlace{Name: r.Name, Kind: r.Kind, On: []api.ResourceOn{}}
		for _, n := range nodes {
			var state string
			switch l := letters[n.Name]; {
			case n.Name == self:
				if r.State != resource.StateStopped {
					state = r.State
				}
			case n.Down == "unclean" || n.Down == "unconfirmed":
				state = "unknown"
			case n.Gossip != "alive" && n.Gossip != "suspect", n.Stale && fenced[n.Name]:
			case len(l) == len(group) || len(group) > maxResourceLetters && len(l) == maxResourceLetters && i < maxResourceLetters:
				state = letterState(l[i])
			}
			if state != "" {
				out[i].On = append(out[i].On, api.ResourceOn{Node: n.Name, State: state, Stale: n.Stale && n.Name != self})
			}
		}
	}
	return out
}

// fencedNodes are the nodes whose newest fence or unfence record is a
// fence read back off.
func fencedNodes(st quorum.State) map[string]bool {
	out := map[string]bool{}
	done := map[string]bool{}
	for i := len(st.History) - 1; i >= 0; i-- {
		r := st.History[i]
		if done[r.Target] || (r.Kind != fencing.KindFence && r.Kind != fencing.KindUnfence) || r.Outcome != fencing.OutcomeSuccess {
			continue
		}
		done[r.Target] = true
		out[r.Target] = r.Kind == fencing.KindFence && r.Action != fencing.ActionOn
	}
	return out
}
