package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// BenchmarkTakeover measures primary SIGKILL → storage started on the new
// primary, split into phases, over b.N failovers on 3 nodes with simulated
// IPMI BMCs and the token-checking storage:
//
//	detect  kill → the winner starts its election (its detector, or raft's timeout)
//	elect   → epoch granted to the winner
//	prepare → fence request committed (and the old lease bounded)
//	fence   → power-off command done (the agent polls until off)
//	confirm → the engine's own read-back of the power state
//	mount   → storage started, primary acting
//
//	go test ./daemon -run '^$' -bench Takeover -benchtime 20x
//
// Cases: lease 1s; default timings with 3 (SIGKILL and SIGSTOP), 5 and 9
// nodes, and two data nodes with a witness. The paused primary of SIGSTOP
// is fenced too (its BMC's power-off kills it).
func BenchmarkTakeover(b *testing.B) {
	ms := func(n int) config.Duration { return config.Duration(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name      string
		nodes     int
		timing    config.Timing
		sig       syscall.Signal
		configure func(*config.Config)
	}{
		{"lease=1s", 3, config.Timing{Heartbeat: ms(100), Lease: ms(1000), Margin: ms(100), Grace: ms(500), FenceTimeout: ms(5000)}, syscall.SIGKILL, nil},
		{"defaults", 3, config.Timing{}, syscall.SIGKILL, nil},
		{"defaults/sigstop", 3, config.Timing{}, syscall.SIGSTOP, nil},
		{"defaults/5", 5, config.Timing{}, syscall.SIGKILL, nil},
		{"defaults/9", 9, config.Timing{}, syscall.SIGKILL, nil},
		{"defaults/2+witness", 3, config.Timing{}, syscall.SIGKILL, witnessConfig},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := devcluster.New(devcluster.Options{Nodes: tc.nodes, Dir: b.TempDir(), Bin: fencedBin, Timing: tc.timing, BMC: true, Store: true, Configure: tc.configure})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if err := c.Start(); err != nil {
				b.Fatal(err)
			}
			phases := map[string][]time.Duration{}
			order := []string{"detect", "elect", "prepare", "fence", "confirm", "mount", "total"}
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				p, e1, err := c.Primary(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.WaitWrite(ctx, p.Name, e1); err != nil {
					b.Fatal(err)
				}
				time.Sleep(time.Second)
				before := sessionCounts(c)
				kill := time.Now()
				p.Signal(tc.sig)
				q, e2, err := c.Primary(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				ph, err := takeoverPhases(ctx, q, p.Name, e2, kill)
				if err != nil {
					b.Fatalf("%v (the nodes' logs are in %s)", err, keepLogs(c))
				}
				for k, v := range ph {
					phases[k] = append(phases[k], v)
				}
				if ph["total"] > 5*time.Second {
					// An unusually slow takeover.
					b.Logf("slow takeover by %s (%v, phases %v; BMC sessions before the kill %v, now %v); the nodes' logs are in %s", q.Name, ph["total"].Round(time.Millisecond), ph, before, sessionCounts(c), keepLogs(c))
				}
				// Power the old primary back on; it rejoins as a secondary.
				c.BMCs[p.Index].SetPower(true)
				restartAndRejoin(ctx, b, p, e2)
				cancel()
			}
			b.Logf("%s, %d failovers: %s", tc.name, len(phases["total"]), phaseSummary(b, phases, order))
		})
	}
}

// keepLogs copies every node's log to a new directory outside the
// benchmark's own (which is removed at its end; and a benchmark's log
// output is cut to a few lines) and returns its path.
func keepLogs(c *devcluster.Cluster) string {
	dir, err := os.MkdirTemp("", "fenced-takeover-logs-")
	if err != nil {
		return "(not kept: " + err.Error() + ")"
	}
	for _, n := range c.Nodes {
		if lb, err := os.ReadFile(n.Log); err == nil {
			_ = os.WriteFile(filepath.Join(dir, n.Name+".log"), lb, 0o644)
		}
	}
	return dir
}

// sessionCounts is the number of sessions open on each node's BMC.
func sessionCounts(c *devcluster.Cluster) []int {
	n := make([]int, len(c.BMCs))
	for i, b := range c.BMCs {
		n[i] = b.Sessions()
	}
	return n
}

var reLogTime = regexp.MustCompile(`^time=(\S+) `)

// logTimes returns the times of q's log lines containing every needle,
// after since.
func logTimes(path string, since time.Time, needles ...string) []time.Time {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		ok := true
		for _, n := range needles {
			if !strings.Contains(line, n) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		m := reLogTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, m[1])
		if err == nil && t.After(since) {
			out = append(out, t)
		}
	}
	return out
}

func takeoverPhases(ctx context.Context, q *devcluster.Node, old string, epoch uint64, kill time.Time) (map[string]time.Duration, error) {
	var acting []time.Time
	for ctx.Err() == nil {
		if acting = logTimes(q.Log, kill, "primary: acting", "epoch="+strconv.FormatUint(epoch, 10)); len(acting) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	h, err := historyOf(ctx, q, old)
	if err != nil {
		return nil, err
	}
	// The fence of the killed node after the kill: at this epoch, or at
	// an earlier one whose holder lost its lease before it acted (the
	// fence stands; the next holder does not fence again).
	var rec *fencing.Record
	for i := range h {
		if h[i].Kind == fencing.KindFence && h[i].Target == old && h[i].Epoch <= epoch && h[i].Outcome == fencing.OutcomeSuccess && h[i].Started.After(kill) {
			rec = &h[i]
		}
	}
	if rec == nil || len(rec.Attempts) == 0 {
		return nil, fmt.Errorf("no successful fence of %s after the kill, at epoch %d or before", old, epoch)
	}
	elected := logTimes(q.Log, kill, "elected: epoch granted", "epoch="+strconv.FormatUint(epoch, 10))
	var detected []time.Time // raft's own, or the detector's, before the grant
	for _, t := range logTimes(q.Log, kill, "starting election") {
		if len(elected) > 0 && !t.After(elected[0]) {
			detected = append(detected, t)
		}
	}
	if len(detected) == 0 {
		// The winner led already (a primary that had handed leadership
		// on, or a restarted one that did not lead yet): no election;
		// detection ends at the grant.
		detected = elected
	}
	if len(acting) == 0 || len(elected) == 0 || len(detected) == 0 {
		return nil, fmt.Errorf("%s's log lacks the takeover lines (acting %d, elected %d, election %d)", q.Name, len(acting), len(elected), len(detected))
	}
	ph := map[string]time.Duration{
		"detect": detected[len(detected)-1].Sub(kill),
		"elect":  elected[0].Sub(detected[len(detected)-1]),
		"total":  acting[0].Sub(kill),
	}
	if rec.Epoch == epoch {
		// The fence's phases, when this grant fenced (else a holder
		// before it did, then lost its lease: only the total counts).
		at := rec.Attempts[len(rec.Attempts)-1]
		ph["prepare"] = rec.Started.Sub(elected[0])
		ph["fence"] = at.Duration - at.ReadBackDuration
		ph["confirm"] = at.ReadBackDuration
		ph["mount"] = acting[0].Sub(rec.Finished)
	}
	return ph, nil
}

// BenchmarkNoFalsePositives runs an idle 3-node cluster with default
// timings while another process saturates a core, and reports the
// failovers and fences seen (there should be none).
// FENCED_SOAK_SECONDS sets the duration (default 600).
func BenchmarkNoFalsePositives(b *testing.B) {
	secs := 600
	if s, err := strconv.Atoi(os.Getenv("FENCED_SOAK_SECONDS")); err == nil {
		secs = s
	}
	for b.Loop() {
		c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: b.TempDir(), Bin: fencedBin, BMC: true, Store: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p, e1, err := c.Primary(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		stress := exec.Command("stress-ng", "--cpu", "1", "--timeout", strconv.Itoa(secs)+"s", "--quiet")
		if err := stress.Start(); err != nil {
			b.Fatalf("stress-ng: %v", err)
		}
		time.Sleep(time.Duration(secs) * time.Second)
		stress.Process.Kill()
		stress.Wait()
		st, failovers, fences := soakResult(b, c, e1)
		b.Logf("%ds with a saturated core: %d failovers (epoch %d → %d, primary %s → %s), %d fences", secs, failovers, e1, st.Primary.Epoch, p.Name, st.Primary.Node, fences)
		c.Close()
	}
}

// soakResult reports, after a soak that began at epoch e1, the failovers
// (epoch changes) and fences the cluster saw, as a running node knows them
// (the first primary may have been fenced: its BMC's power-off kills it).
func soakResult(b *testing.B, c *devcluster.Cluster, e1 uint64) (st daemon.Status, failovers, fences int) {
	b.Helper()
	var err error
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		if st, err = n.Status(context.Background()); err != nil {
			continue
		}
		h, _ := historyOf(context.Background(), n, "")
		for _, r := range h {
			if r.Kind == fencing.KindFence {
				fences++
			}
		}
		failovers = int(st.Primary.Epoch - e1)
		b.ReportMetric(float64(failovers), "failovers")
		b.ReportMetric(float64(fences), "fences")
		return st, failovers, fences
	}
	b.Fatalf("no node answers (logs in %s): %v", keepLogs(c), err)
	return
}

func historyOf(ctx context.Context, n *devcluster.Node, node string) ([]fencing.Record, error) {
	cl := n.Client()
	defer cl.Close()
	var h struct {
		Records []fencing.Record `json:"records"`
	}
	q := map[string][]string{}
	if node != "" {
		q["node"] = []string{node}
	}
	err := cl.Do(ctx, "GET", "/v1/history", q, nil, &h)
	return h.Records, err
}

// BenchmarkNoFalseFailoversLossy soaks a 3-node cluster in network
// namespaces with packet loss on every cluster link (FENCED_SOAK_LOSS
// percent, default 20, nftables numgen) and the other core saturated
// (stress-ng) for FENCED_SOAK_SECONDS (default 600), and reports failovers
// (epoch changes) and fences: both must stay 0. Needs root.
//
//	go test ./daemon -run '^$' -bench NoFalseFailoversLossy -benchtime 1x -timeout 30m
func BenchmarkNoFalseFailoversLossy(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for network namespaces")
	}
	secs, loss := 600, 20
	if s, err := strconv.Atoi(os.Getenv("FENCED_SOAK_SECONDS")); err == nil {
		secs = s
	}
	if l, err := strconv.Atoi(os.Getenv("FENCED_SOAK_LOSS")); err == nil {
		loss = l
	}
	for b.Loop() {
		ns, err := devcluster.NewNetns(fmt.Sprintf("fsk%d", os.Getpid()%10000), 3, (os.Getpid()+71)%250)
		if err != nil {
			b.Fatal(err)
		}
		c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: b.TempDir(), Bin: fencedBin, BMC: true, Hosts: ns.Hosts, Wrap: ns.Wrap})
		if err != nil {
			ns.Close()
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close(); ns.Close() }) // also after a Fatal
		var bmcs []*net.UDPAddr
		for _, bm := range c.BMCs {
			bmcs = append(bmcs, bm.Addr())
		}
		relay, err := ns.RelayUDP(bmcs)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p, e1, err := c.Primary(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		st0, err := p.Status(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		for i := range c.Nodes {
			if err := ns.Loss(i, loss); err != nil {
				b.Fatal(err)
			}
		}
		stress := exec.Command("stress-ng", "--cpu", "1", "--timeout", strconv.Itoa(secs)+"s", "--quiet")
		if err := stress.Start(); err != nil {
			b.Fatalf("stress-ng: %v", err)
		}
		time.Sleep(time.Duration(secs) * time.Second)
		stress.Process.Kill()
		stress.Wait()
		for i := range c.Nodes {
			ns.NoLoss(i)
		}
		st, failovers, fences := soakResult(b, c, e1)
		// Elections: raft terms begun (each a candidacy that moved a
		// majority's term, won or not); slow renewals: those that took
		// longer than a heartbeat, the early sign of a lease given up.
		// Of them, the detector's (a majority found the leader silent),
		// and the lonely suspicions it kept to itself.
		slow, detector, lonely := 0, 0, 0
		for _, n := range c.Nodes {
			if lb, err := os.ReadFile(n.Log); err == nil {
				slow += strings.Count(string(lb), "lease renewal slow")
				detector += strings.Count(string(lb), "leader silent for a majority: starting election")
				lonely += strings.Count(string(lb), "leader silent here, but not for a majority")
			}
		}
		b.ReportMetric(float64(st.Self.Term-st0.Self.Term), "elections")
		b.ReportMetric(float64(detector), "detector-elections")
		b.ReportMetric(float64(slow), "slow-renewals")
		b.Logf("%ds, %d%% loss on every link, a saturated core: %d failovers (epoch %d → %d, primary %s → %s), %d fences, %d elections (raft term %d → %d; %d started by the detector, %d suspicions no majority shared), %d slow renewals",
			secs, loss, failovers, e1, st.Primary.Epoch, p.Name, st.Primary.Node, fences, st.Self.Term-st0.Self.Term, st0.Self.Term, st.Self.Term, detector, lonely, slow)
		if failovers > 0 || fences > 0 {
			b.Logf("the nodes' logs are in %s", keepLogs(c))
		}
		c.Close()
		relay.Close()
		ns.Close()
	}
}

// BenchmarkTakeoverLossy measures failover after a real SIGKILL of the
// primary in a 3-node cluster in network namespaces (its group an OCF
// Dummy, which checks no tokens: every takeover fences), default timings,
// without loss and with FENCED_BENCH_LOSS percent (default 33) of the
// packets lost on each direction of every cluster link (nftables numgen),
// BMCs behind the namespaces' relay. It reports p50 and p99 of each phase
// and asserts nothing about time. Needs root.
//
//	go test ./daemon -run '^$' -bench TakeoverLossy -benchtime 10x -timeout 60m
func BenchmarkTakeoverLossy(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for network namespaces")
	}
	loss := 33
	if l, err := strconv.Atoi(os.Getenv("FENCED_BENCH_LOSS")); err == nil {
		loss = l
	}
	for _, pct := range []int{0, loss} {
		b.Run(fmt.Sprintf("loss=%d%%", pct), func(b *testing.B) {
			ns, err := devcluster.NewNetns(fmt.Sprintf("ftl%d", os.Getpid()%10000), 3, (os.Getpid()+pct+113)%250)
			if err != nil {
				b.Fatal(err)
			}
			// A resource that checks no tokens (OCF Dummy, its state file
			// each node's own): every takeover must fence, none may go by
			// lease expiry.
			dir := b.TempDir()
			c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: dir, Bin: fencedBin, BMC: true, Hosts: ns.Hosts, Wrap: ns.Wrap,
				NodeConfig: func(i int, cfg *config.Config) {
					cfg.Resources = []config.Resource{{Name: "dummy", OCF: "heartbeat:Dummy",
						NodeParams: map[string]string{"state": filepath.Join(dir, cfg.Node+".dummy.state")}}}
				}})
			if err != nil {
				ns.Close()
				b.Fatal(err)
			}
			var bmcs []*net.UDPAddr
			for _, bm := range c.BMCs {
				bmcs = append(bmcs, bm.Addr())
			}
			relay, err := ns.RelayUDP(bmcs)
			if err != nil {
				c.Close()
				ns.Close()
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close(); relay.Close(); ns.Close() })
			if err := c.Start(); err != nil {
				b.Fatal(err)
			}
			if pct > 0 {
				for i := range c.Nodes {
					if err := ns.Loss(i, pct); err != nil {
						b.Fatal(err)
					}
				}
			}
			phases := map[string][]time.Duration{}
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				p, e1, err := c.Primary(ctx)
				if err != nil {
					b.Fatalf("%v (logs in %s)", err, keepLogs(c))
				}
				// Every node up and caught up first: a kill while one of
				// three is still starting leaves no majority to take over
				// (a node of the first run once started 18 s late).
				for _, n := range c.Nodes {
					waitCaughtUp(ctx, n, e1)
				}
				time.Sleep(2 * time.Second)
				kill := time.Now()
				p.Signal(syscall.SIGKILL)
				q, e2, err := c.Primary(ctx, p)
				if err != nil {
					b.Fatalf("%v (logs in %s)", err, keepLogs(c))
				}
				ph, err := takeoverPhases(ctx, q, p.Name, e2, kill)
				if err != nil {
					b.Fatalf("%v (logs in %s)", err, keepLogs(c))
				}
				for k, v := range ph {
					phases[k] = append(phases[k], v)
				}
				c.BMCs[p.Index].SetPower(true)
				restartAndRejoin(ctx, b, p, e2)
				cancel()
			}
			b.Logf("%d%% loss, %d failovers after SIGKILL: %s (logs in %s)", pct, len(phases["total"]),
				phaseSummary(b, phases, []string{"detect", "elect", "prepare", "fence", "confirm", "mount", "total"}), keepLogs(c))
		})
	}
}

// restartAndRejoin starts node p's daemon again and waits until it knows
// epoch e (it rejoined as a secondary).
func restartAndRejoin(ctx context.Context, b *testing.B, p *devcluster.Node, e uint64) {
	b.Helper()
	if err := p.Start(); err != nil {
		b.Fatal(err)
	}
	waitCaughtUp(ctx, p, e)
}

// waitCaughtUp waits until node p knows epoch e (or ctx ends).
func waitCaughtUp(ctx context.Context, p *devcluster.Node, e uint64) {
	for ctx.Err() == nil {
		if st, err := p.Status(ctx); err == nil && st.Self.KnownEpoch >= e {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// phaseSummary reports p50 and p99 of each phase in order as metrics and
// returns them as text.
func phaseSummary(b *testing.B, phases map[string][]time.Duration, order []string) string {
	var summary []string
	for _, k := range order {
		v := phases[k]
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		p50, p99 := v[len(v)/2], v[(len(v)*99+99)/100-1]
		b.ReportMetric(float64(p50.Microseconds())/1000, k+"-p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, k+"-p99-ms")
		summary = append(summary, fmt.Sprintf("%s p50 %s p99 %s", k, p50.Round(time.Millisecond), p99.Round(time.Millisecond)))
	}
	return strings.Join(summary, "; ")
}
