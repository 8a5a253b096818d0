package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/keep"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/health"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
)

// Fence device sessions across the daemon's life.
//
// At join: a node that may fence opens the fence device sessions it should
// hold before it reports itself ready or takes primacy (sessionsPending),
// so that a failure soon after it (re)joined is fenced on a warm session,
// not after a login at fence time (five round trips on IPMI; at 300 ms each
// way that is 3 s of the takeover). Meanwhile another node, warm, takes
// over if it can; if this one leads, it keeps leadership and waits
// (tenure.Input.NotYet), rather than hand leadership to a follower raft
// picks, which may be the leader that just died. The wait is bounded by
// sessionsAtJoin, a device whose session could not be opened (its check
// failed: a dead BMC is given up after the agent's own retries, seconds)
// holds nothing back, and once the node was ready it never waits again: a
// session that a change of holder asks for later is opened as before, by
// every node alike.
//
// After a crash: every session the agents open is listed in
// data_dir/sessions.json (package keep's Journal: the device, its address,
// the session's ID on it, never a token or password), and a daemon that
// starts closes the sessions the last one left there as each device's
// checks start (health.Options.LeftOpen): on the session the first check
// opened when one is wanted, so that neither the fence it is for nor the
// node's readiness waits for a second login; else first. A SIGKILLed or
// crashed daemon's sessions otherwise keep the BMC's few slots until it
// expires them.

// sessionsAtJoin bounds how long a node that joined waits for its fence
// device sessions before it reports ready and takes primacy: the time a
// check that opens a session to keep may take (health.Options.WarmTimeout),
// enough for a login over a path of 2.5 s each way. A BMC that does not
// answer at all fails its check sooner.
const sessionsAtJoin = time.Minute

// sessionsFile is the session journal under data_dir.
const sessionsFile = "sessions.json"

// openSessionJournal opens the session journal under cfg's data_dir and
// hands it to the engine; it returns the sessions the last daemon left.
func openSessionJournal(cfg *config.Config, inMemory bool, engine *stonith.Engine, log *slog.Logger) *leftOpen {
	path := filepath.Join(cfg.DataDir, sessionsFile)
	if inMemory {
		path = "" // in-process tests: the raft log is in memory too
	}
	j, left := keep.OpenJournal(path, log)
	engine.Sessions = j
	return newLeftOpen(left)
}

// leftOpen are the sessions the last daemon left open, by device, until
// each device's are closed (closeLeft).
type leftOpen struct {
	mu   sync.Mutex
	recs map[string][]agents.SessionRecord
}

func newLeftOpen(recs []agents.SessionRecord) *leftOpen {
	l := &leftOpen{recs: map[string][]agents.SessionRecord{}}
	for _, r := range recs {
		l.recs[r.Device] = append(l.recs[r.Device], r)
	}
	return l
}

// take returns device's sessions, once.
func (l *leftOpen) take(device string) []agents.SessionRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs := l.recs[device]
	delete(l.recs, device)
	return recs
}

// devices lists the devices that have sessions left.
func (l *leftOpen) devices() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.recs))
}

// closeLeft closes the sessions the last daemon left open on dev, within
// the device's timeout: through k, the device's kept agent (the device
// checks call it as a device's watch starts, health.Options.LeftOpen: on
// the session k holds, if any), or with an agent built from the device's
// configuration as it stands now (k nil: Run, at start, for the devices no
// check watches). Whatever could not be closed is logged and forgotten:
// the device expires it.
func (d *Daemon) closeLeft(ctx context.Context, dev string, k health.Keeper) {
	recs := d.fence.leftOpen.take(dev)
	if len(recs) == 0 {
		return
	}
	log := d.log.With("component", "sessions", "device", dev)
	journal := d.fence.engine.Sessions
	forget := func() {
		for _, r := range recs {
			journal.Closed(r)
		}
	}
	t, ok := deviceTarget(d.config(), dev)
	if !ok {
		log.Warn("sessions a previous run left open on a device no longer configured: not closed; the device expires them", "sessions", len(recs))
		forget()
		return
	}
	start := time.Now()
	var failed map[agents.SessionRecord]error
	var err error
	if kc, ok := k.(keptCloser); ok {
		failed, err = kc.CloseSessions(ctx, recs)
	} else {
		failed, err = d.fence.engine.CloseSessions(ctx, t, recs)
	}
	if ctx.Err() != nil {
		return // stopping: the journal keeps them for the next start
	}
	switch {
	case err != nil:
		log.Warn("could not close the sessions a previous run left open; the device expires them", "sessions", len(recs), "err", err)
	case len(failed) > 0:
		var why []string
		for r, e := range failed {
			why = append(why, r.ID+": "+e.Error())
		}
		slices.Sort(why)
		log.Warn("could not close some sessions a previous run left open; the device expires them",
			"closed", len(recs)-len(failed), "failed", strings.Join(why, "; "))
	default:
		log.Info("closed the sessions a previous run left open", "sessions", len(recs), "took", time.Since(start).Round(time.Millisecond))
	}
	forget()
}

// keptCloser is a kept agent that closes sessions (stonith.Kept).
type keptCloser interface {
	CloseSessions(context.Context, []agents.SessionRecord) (map[agents.SessionRecord]error, error)
}

// closeUnwatched closes, in parallel, the sessions left open on devices
// that no check of this node watches.
func (d *Daemon) closeUnwatched(ctx context.Context) {
	var wg sync.WaitGroup
	for _, dev := range d.fence.leftOpen.devices() {
		if d.fence.health.Watches(dev) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.closeLeft(ctx, dev, nil)
		}()
	}
	wg.Wait()
}

// deviceTarget is how dev is reached: its first mapping in the topology.
func deviceTarget(cfg *config.Config, dev string) (stonith.Target, bool) {
	for _, n := range cfg.Nodes {
		for _, lvl := range topology(cfg, n.Name) {
			for _, t := range lvl.Devices {
				if t.Device == dev {
					return t, true
				}
			}
		}
	}
	return stonith.Target{}, false
}

// sessionsPending lists what this node waits for before it takes primacy
// (tenure.Input.NotYet: a leader keeps leadership meanwhile) and reports
// ready, nothing once it has: before it joined, the cluster's state, when its own copy names
// a holder (it was part of a cluster that may need fencing); once joined,
// the devices whose session it should hold now (wantWarm) but neither
// holds nor has tried to open since it started. Nothing once
// sessionsAtJoin has passed since it joined (or, not joined, since it
// started).
func (d *Daemon) sessionsPending() []string {
	if d.fence.health == nil || d.raft == nil || d.life.ready.Load() {
		return nil
	}
	devs := d.fence.health.All()
	if len(devs) == 0 {
		return nil // a witness, or a node that fences nobody
	}
	j := d.life.joined.Load()
	if j == 0 {
		v := d.raft.FSM().Holders()
		if quorum.Since(d.life.started) >= sessionsAtJoin || (v.Holder == "" && len(v.Formers) == 0) {
			return nil
		}
		return []string{joiningFirst}
	}
	if quorum.Since(quorum.Mono(j)) >= sessionsAtJoin {
		return nil
	}
	var pending []string
	for _, h := range devs {
		if (h.KeepsSession || !h.Started) && h.Session != health.SessionHeld && !h.WarmTried && d.wantWarm(h.Device) {
			pending = append(pending, h.Device)
		}
	}
	return pending
}

// joiningFirst is what sessionsPending waits for before the node joined.
const joiningFirst = "the cluster's state"

// sessionsReason is why this node does not take primacy yet for want of
// its sessions ("" = no such reason).
func (d *Daemon) sessionsReason() string {
	pending := d.sessionsPending()
	switch {
	case len(pending) == 0:
		return ""
	case pending[0] == joiningFirst:
		return fmt.Sprintf("joining the cluster, then opening fence device sessions (at most %s)", sessionsAtJoin)
	}
	return fmt.Sprintf("opening fence device sessions (%s), at most %s after joining", strings.Join(pending, ", "), sessionsAtJoin)
}
