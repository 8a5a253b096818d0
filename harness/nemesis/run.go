package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Result is what a run found.
type Result struct {
	Seed       int64         `json:"seed"`
	Nodes      int           `json:"nodes"`
	Lease      time.Duration `json:"leaseNs"`
	Start      time.Time     `json:"start"`
	Duration   time.Duration `json:"durationNs"`
	Faults     []Fault       `json:"faults"`
	Violations []Violation   `json:"violations"`
	Checks     []string      `json:"checks"` // what was checked, one line each
	Stuck      int           `json:"stuck"`  // faults after which the cluster did not recover
	// Expiries counts the takeovers by lease expiry (the tokens profile).
	Expiries int    `json:"expiries"`
	Dir      string `json:"dir"`
	// Summary is the availability table, as printed.
	Summary  string `json:"summary"`
	Timeline string `json:"timeline"` // path of the HTML timeline
}

// OK reports whether the run found no violation and always recovered.
func (r *Result) OK() bool { return len(r.Violations) == 0 && r.Stuck == 0 }

// Run starts a cluster, injects o.Faults faults, checks the outcome and
// writes the summary (summary.txt, result.json) and the timeline
// (timeline.html) into o.Dir. The error is for a harness that could not
// run; what the run found is in the Result.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.RecoveryTimeout <= 0 {
		o.RecoveryTimeout = 90 * time.Second
	}
	if o.Lab == "" {
		o.Lab = filepath.Join(filepath.Dir(o.Fenced), "fenced-lab")
	}
	for _, p := range []*string{&o.Fenced, &o.Fencectl, &o.Nemesis, &o.Lab, &o.Dir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	res := &Result{Seed: o.Seed, Nodes: o.Nodes, Start: time.Now(), Dir: o.Dir}
	c, err := startCluster(ctx, o)
	if err != nil {
		return nil, err
	}
	defer c.close()
	res.Lease = c.timing.Lease.D()
	c.progress("nemesis: seed %d, %d nodes, %d faults, lease %v, dir %s", o.Seed, o.Nodes, o.Faults, res.Lease, o.Dir)
	if _, err := c.waitRecovered(ctx, o.RecoveryTimeout, nil); err != nil {
		return nil, fmt.Errorf("cluster never served: %w", err)
	}
	kinds := c.kinds()
	stuckRun := 0
	for i := 0; i < o.Faults && ctx.Err() == nil; i++ {
		if o.Tokens && i%4 == 0 {
			// The node without a fence topology primary now and then, so
			// that faults of the primary take over from it by lease
			// expiry.
			c.transferTo(ctx, c.nodes[len(c.nodes)-1])
		}
		f := c.runFault(ctx, i, kinds)
		res.Faults = append(res.Faults, f)
		line := fmt.Sprintf("fault %d/%d %-18s %-22s", i+1, o.Faults, f.Kind, groupNameS(f.Targets))
		if f.Takeover > 0 {
			line += fmt.Sprintf(" takeover %-7v", f.Takeover.Round(time.Millisecond))
		}
		line += fmt.Sprintf(" gap %v", f.Gap.Round(time.Millisecond))
		if f.Params != "" {
			line += " (" + f.Params + ")"
		}
		if f.Violation != "" {
			line += " VIOLATION: " + f.Violation
		}
		if f.Stuck != "" {
			line += " STUCK: " + f.Stuck
		}
		c.progress("%s", line)
		if f.Stuck != "" {
			res.Stuck++
			stuckRun++
			if stuckRun >= 3 {
				c.progress("nemesis: cluster stuck after 3 faults in a row; ending the run")
				break
			}
		} else {
			stuckRun = 0
		}
	}
	history, herr := c.history(ctx)
	if herr != nil {
		c.progress("nemesis: history: %v", herr)
	}
	for _, h := range history {
		if h.Kind == "lease-expiry" && h.Outcome == "success" {
			res.Expiries++
		}
	}
	segments := c.obs.segments()
	c.obs.stop()
	c.obs = nil
	// Power everything off, then look at the disk.
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.crash() }()
	}
	wg.Wait()
	if c.escape != nil {
		c.escape.Close()
	}
	c.tail.stop()
	c.tail = nil
	res.Duration = time.Since(res.Start)
	in := c.gather(history, herr)
	res.Violations, res.Checks = check(in)
	for _, f := range res.Faults {
		if f.Violation != "" {
			res.Violations = append(res.Violations, Violation{Check: "takeover gate", Detail: fmt.Sprintf("fault %d (%s): %s", f.N, f.Kind, f.Violation)})
		}
	}
	measure(res.Faults, in.blind)
	res.Summary = summarize(res, in)
	os.WriteFile(c.path("summary.txt"), []byte(res.Summary), 0o644)
	c.evMu.Lock()
	events := append([]Event(nil), c.events...)
	c.evMu.Unlock()
	res.Timeline = c.path("timeline.html")
	if err := writeTimeline(res.Timeline, res, segments, events, in); err != nil {
		c.progress("nemesis: timeline: %v", err)
	}
	if b, err := json.MarshalIndent(res, "", "  "); err == nil {
		os.WriteFile(c.path("result.json"), b, 0o644)
	}
	return res, nil
}

func groupNameS(s []string) string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

func (c *cluster) kinds() []kindDef {
	var out []kindDef
	for _, k := range kindDefs {
		if len(c.nodes) < k.minNodes {
			continue
		}
		if len(c.opts.Kinds) > 0 {
			found := false
			for _, want := range c.opts.Kinds {
				found = found || want == k.name
			}
			if !found {
				continue
			}
		}
		out = append(out, k)
	}
	return out
}

// runFault injects fault i, heals it and waits for recovery. Every random
// choice of fault i comes from its own generator seeded from the run's seed
// and i, so a run replays fault by fault whatever the timing did before.
func (c *cluster) runFault(ctx context.Context, i int, kinds []kindDef) Fault {
	rng := rand.New(rand.NewSource(c.opts.Seed*1_000_003 + int64(i)))
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	pick := rng.Intn(total)
	var k kindDef
	for _, k = range kinds {
		if pick < k.weight {
			break
		}
		pick -= k.weight
	}
	f := Fault{N: i + 1, Kind: k.name}
	r := &faultRun{c: c, ctx: ctx, rng: rng, f: &f, lease: c.timing.Lease.D()}
	// The primary as its API says and as the blind log shows must agree.
	for deadline := time.Now().Add(10 * time.Second); ; {
		prim, epoch := c.obs.primary()
		rec, ok := c.tail.last()
		if prim != nil && ok && rec.Node == prim.name && rec.Epoch == epoch && time.Since(rec.Time) < time.Second {
			r.prim, r.node, r.epoch = prim, prim.name, epoch
			break
		}
		if time.Now().After(deadline) {
			f.Stuck = "no primary writing before the fault"
			return f
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.Primary, f.Epoch = r.node, r.epoch
	f.Start = time.Now()
	c.event("fault", "", k.name, fmt.Sprintf("fault %d", f.N))
	if err := k.run(r); err != nil {
		r.note("harness: %v", err)
	}
	c.healAll(ctx, r)
	f.Healed = time.Now()
	c.event("heal", "", k.name, fmt.Sprintf("fault %d", f.N))
	if rec, ok := r.newTenure(); ok {
		f.Takeover, f.NewWriter = rec.Time.Sub(f.Start), fmt.Sprintf("%s@%d", rec.Node, rec.Epoch)
	}
	at, err := c.waitRecovered(ctx, c.opts.RecoveryTimeout, r)
	f.Recovered = at
	if err != nil {
		f.Stuck = err.Error()
		f.Recovered = time.Now()
	}
	if rec, ok := r.newTenure(); ok && f.Takeover == 0 {
		f.Takeover, f.NewWriter = rec.Time.Sub(f.Start), fmt.Sprintf("%s@%d", rec.Node, rec.Epoch)
	}
	f.Blocked = f.Blocked || c.obs.blockedBetween(f.Start, f.Recovered)
	f.Gap = c.tail.gap(f.Start, f.Recovered)
	c.event("recovered", "", k.name, fmt.Sprintf("fault %d", f.N))
	// A quiet moment before the next fault.
	r.sleep(r.between(0.1, 0.5))
	return f
}

// block cuts the links of the given pairs, in both directions.
func (c *cluster) block(pairs [][2]*node) error {
	cut := map[*node]map[string]bool{}
	for _, p := range pairs {
		for k, n := range []*node{p[0], p[1]} {
			if cut[n] == nil {
				cut[n] = map[string]bool{}
			}
			cut[n][p[1-k].ip] = true
		}
	}
	for n, peers := range cut {
		n.rules.blocked = nil
		for ip := range peers {
			n.rules.blocked = append(n.rules.blocked, ip)
		}
		if err := c.apply(n); err != nil {
			return err
		}
	}
	c.event("net", "", "partition", fmt.Sprint(len(pairs), " links cut"))
	return nil
}

func (c *cluster) setLoss(n *node, pct int) error {
	n.rules.lossPct = pct
	c.event("net", n.name, "loss", fmt.Sprintf("%d%%", pct))
	return c.apply(n)
}

func (c *cluster) apply(n *node) error {
	n.rules.peers = nil
	for _, o := range c.nodes {
		if o != n {
			n.rules.peers = append(n.rules.peers, o.ip)
		}
	}
	return applyRules(n.ns, n.rules)
}

// healAll removes every fault: links, BMCs, pauses, and powers on what is
// off (with the clock offsets of a new boot) and restarts a daemon that is
// not running.
func (c *cluster) healAll(ctx context.Context, r *faultRun) {
	var errs []error
	for _, n := range c.nodes {
		n.setLying(false)
		n.faults.clear()
		if err := n.line.stop(); err != nil {
			errs = append(errs, err)
		}
		if len(n.rules.blocked) > 0 || n.rules.lossPct > 0 {
			n.rules = netRules{}
			if err := c.apply(n); err != nil {
				errs = append(errs, err)
			}
		}
		n.thaw()
	}
	for _, n := range c.nodes {
		if err := c.healNode(ctx, r, n); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		r.note("heal: %v", err)
	}
}

// healNode powers n on if it is off (with the clock offsets of a new boot)
// or starts its daemon again if the machine runs without it, as the
// machine's service manager would.
func (c *cluster) healNode(ctx context.Context, r *faultRun, n *node) error {
	if !n.on() {
		mono, boot := r.offsets()
		return n.powerOn(ctx, mono, boot)
	}
	if p := n.procs(); p.init != 0 && p.daemonPid(c.opts.Fenced) == 0 {
		time.Sleep(100 * time.Millisecond)
		if p.daemonPid(c.opts.Fenced) == 0 {
			return n.restartDaemon()
		}
	}
	return nil
}

// waitRecovered waits until every machine runs its daemon, exactly one node
// acts as primary and its writer wrote in the last second, and returns when.
//
// A node can go off after the heal: a successor fences a node that was
// just restarted, as it must. Like an administrator, the harness powers it
// on again (after a moment, so a fence in progress can finish).
func (c *cluster) waitRecovered(ctx context.Context, limit time.Duration, r *faultRun) (time.Time, error) {
	deadline := time.Now().Add(limit)
	why := ""
	downSince := map[*node]time.Time{}
	for {
		why = c.unhealthy()
		if why == "" {
			return time.Now(), nil
		}
		for _, n := range c.nodes {
			down := !n.on()
			if !down {
				if p := n.procs(); p.init != 0 && p.daemonPid(c.opts.Fenced) == 0 {
					down = true
				}
			}
			if !down {
				delete(downSince, n)
				continue
			}
			if t, ok := downSince[n]; !ok {
				downSince[n] = time.Now()
			} else if time.Since(t) > c.timing.Lease.D() && r != nil {
				c.healNode(ctx, r, n)
				delete(downSince, n)
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("not recovered after %v: %s", limit, why)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *cluster) unhealthy() string {
	snap := c.obs.snapshot()
	now := time.Now()
	var acting []string
	var pn string
	var pe uint64
	for _, n := range c.nodes {
		s, ok := snap[n.name]
		switch {
		case !n.on():
			return n.name + " is off"
		case !ok || now.Sub(s.at) > time.Second:
			return n.name + " not observed"
		case !s.ok:
			return n.name + ": " + s.seg.State
		case s.st.Primary.Blocked:
			return "takeover blocked: " + s.st.Primary.Reason
		}
		if s.st.Self.Acting {
			acting = append(acting, n.name)
			pn, pe = n.name, s.st.Self.Epoch
		}
	}
	if len(acting) != 1 {
		return fmt.Sprintf("%d nodes acting as primary %v", len(acting), acting)
	}
	if !c.tail.wroteSince(pn, pe, now.Add(-time.Second)) {
		return fmt.Sprintf("primary %s (epoch %d) not writing", pn, pe)
	}
	return ""
}

// historyDoc is `fencectl history -o json`.
type historyDoc struct {
	SchemaVersion int             `json:"schemaVersion"`
	Records       []HistoryRecord `json:"records"`
}

// HistoryRecord is the part of a fence history record the checker reads.
type HistoryRecord struct {
	ID       uint64    `json:"id"`
	Kind     string    `json:"kind"`
	Target   string    `json:"target"`
	Action   string    `json:"action"`
	Executor string    `json:"executor"`
	Epoch    uint64    `json:"epoch"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Outcome  string    `json:"outcome"`
	Error    string    `json:"error"`
}

// At is when the record took effect.
func (h HistoryRecord) At() time.Time {
	if !h.Finished.IsZero() {
		return h.Finished
	}
	return h.Started
}

// history asks every node with `fencectl history -o json` and keeps the
// longest answer (the most up-to-date replica), also saved as history.json.
// transferTo asks for primacy to move to n (best effort: a node that is
// down or not eligible just stays where it is).
func (c *cluster) transferTo(ctx context.Context, n *node) {
	for _, via := range c.nodes {
		if !via.on() || via.isPaused() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(cctx, c.opts.Fencectl, "-s", via.dn.Socket, "-o", "json", "transfer", n.name).CombinedOutput()
		cancel()
		if err == nil {
			c.event("note", n.name, "transfer", "via "+via.name)
			if _, err := c.waitRecovered(ctx, c.opts.RecoveryTimeout, nil); err != nil {
				c.progress("nemesis: after the transfer to %s: %v", n.name, err)
			}
			return
		}
		c.progress("nemesis: transfer to %s via %s: %v: %s", n.name, via.name, err, strings.TrimSpace(string(out)))
		return
	}
}

func (c *cluster) history(ctx context.Context) ([]HistoryRecord, error) {
	var best []byte
	var bestDoc historyDoc
	var last error
	for try := 0; try < 3 && best == nil; try++ {
		for _, n := range c.nodes {
			if !n.on() {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			out, err := exec.CommandContext(cctx, c.opts.Fencectl, "-s", n.dn.Socket, "-o", "json", "history").Output()
			cancel()
			if err != nil {
				last = fmt.Errorf("fencectl history on %s: %w", n.name, err)
				continue
			}
			var doc historyDoc
			if err := json.Unmarshal(out, &doc); err != nil {
				last = fmt.Errorf("fencectl history on %s: %w", n.name, err)
				continue
			}
			if best == nil || len(doc.Records) > len(bestDoc.Records) {
				best, bestDoc = out, doc
			}
		}
		if best == nil {
			time.Sleep(time.Second)
		}
	}
	if best == nil {
		return nil, last
	}
	os.WriteFile(c.path("history.json"), best, 0o644)
	return bestDoc.Records, nil
}
