package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
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

// BenchmarkLongLife runs a 3-node cluster (default timings, IPMI BMCs whose
// power-off kills the node, token-checking storage) for
// FENCED_LONGLIFE_MINUTES (default 30) with a mild schedule of events, one
// every FENCED_LONGLIFE_EVENT_SECONDS (default 90): in turn a graceful
// transfer, a fence of a follower (powered on again after), another
// transfer and a SIGKILL of the primary (fenced by its successor, powered on
// again). Every 30 s it samples each node's RSS, goroutines (go_goroutines
// on its metrics endpoint), open descriptors, raft.db and snapshot size,
// and counts the log lines. It reports the growth per hour fitted over the
// second half of the run, extrapolated to a year, and the log lines per
// hour when idle and per event. It asserts nothing about the figures.
//
// The Go heap in use breathes by megabytes between collections, so its
// peak says little about a leak. Each sample therefore also asks every
// node for a heap profile with a collection first (/debug/pprof/heap?gc=1
// on its local socket) and records the bytes still allocated after it:
// the live heap, which a leak makes grow and the collector's pacing does
// not. With FENCED_LONGLIFE_PROFILES naming a directory, node1's heap
// profile is kept there every FENCED_LONGLIFE_PROFILE_MINUTES (default 15),
// for `go tool pprof -diff_base` to name what grew.
//
// The replicated history grows until it holds history.limit records (1,000
// by default, about 10 hours of this schedule): a live heap fitted before
// that rises by the history's growth (BenchmarkHistoryHeap measures it, and
// where it stops). FENCED_LONGLIFE_HISTORY sets a smaller limit, so that the
// history is at its bound within the run and the second half's fit shows
// what else, if anything, grows.
//
// node1 is never fenced nor killed (it is made primary by transfers, and
// primacy is moved off it before a kill), so its process lives through the
// whole run: memory, goroutine and descriptor growth are fitted per
// process, on those that lived through the whole second half. The data
// directories survive restarts, so disk growth is fitted on every node.
//
//	FENCED_LONGLIFE_MINUTES=30 go test ./daemon -run '^$' -bench LongLife -benchtime 1x -timeout 60m
func BenchmarkLongLife(b *testing.B) {
	minutes := envFloat("FENCED_LONGLIFE_MINUTES", 30)
	every := time.Duration(envFloat("FENCED_LONGLIFE_EVENT_SECONDS", 90) * float64(time.Second))
	sampleEvery := time.Duration(envFloat("FENCED_LONGLIFE_SAMPLE_SECONDS", 30) * float64(time.Second))
	total := time.Duration(minutes * float64(time.Minute))
	history := int(envFloat("FENCED_LONGLIFE_HISTORY", 0))
	for b.Loop() {
		metrics := make([]string, 3)
		for i := range metrics {
			port, err := devcluster.FreePort("127.0.0.1")
			if err != nil {
				b.Fatal(err)
			}
			metrics[i] = "127.0.0.1:" + strconv.Itoa(port)
		}
		c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: b.TempDir(), Bin: fencedBin, BMC: true, Store: true,
			NodeConfig: func(i int, nc *config.Config) {
				nc.Metrics.Listen = metrics[i]
				if history > 0 {
					nc.History.Limit = history
				}
			}})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		ll := &longLife{b: b, c: c, metrics: metrics, dataDirs: make([]string, 3),
			profiles: os.Getenv("FENCED_LONGLIFE_PROFILES"), profileEvery: time.Duration(envFloat("FENCED_LONGLIFE_PROFILE_MINUTES", 15) * float64(time.Minute))}
		if path := os.Getenv("FENCED_LONGLIFE_CSV"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			fmt.Fprintln(f, "seconds,node,pid,rss_mib,anon_mib,heap_inuse_mib,heap_live_mib,goroutines,fds,raft_db_mib,snapshots_mib")
			ll.csv = f
		}
		for i, n := range c.Nodes {
			ll.dataDirs[i] = filepath.Join(c.Opts.Dir, n.Name+"-data")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if _, _, err := c.Primary(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()

		t0 := time.Now()
		ll.t0 = t0
		ll.sample()
		nextSample, nextEvent := t0.Add(sampleEvery), t0.Add(every)
		for k := 0; time.Since(t0) < total; {
			now := time.Now()
			switch {
			case !now.Before(nextEvent):
				ll.event(k)
				k++
				nextEvent = nextEvent.Add(every)
			case !now.Before(nextSample):
				ll.sample()
				nextSample = nextSample.Add(sampleEvery)
			default:
				time.Sleep(min(time.Until(nextEvent), time.Until(nextSample)))
			}
		}
		ll.sample()
		ll.report(total)
		c.Close()
	}
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

// longLife is the state of one BenchmarkLongLife run.
type longLife struct {
	b        *testing.B
	c        *devcluster.Cluster
	metrics  []string // each node's metrics address
	dataDirs []string
	t0       time.Time
	samples  []llSample
	events   []llEvent
	csv      io.Writer // every sample, if FENCED_LONGLIFE_CSV names a file
	// unplanned counts nodes found down before an event: fenced by a
	// takeover the schedule did not make.
	unplanned int

	profiles     string        // directory for node1's heap profiles ("": none kept)
	profileEvery time.Duration // how often one is kept
	nextProfile  time.Duration // since t0
}

// llSample is one node's figures at one moment.
type llSample struct {
	at         time.Duration // since t0
	node       int
	pid        int
	rss        float64 // MiB
	anon       float64 // MiB: RssAnon, the process's own memory (RSS also counts mapped files: the binary, raft.db)
	heap       float64 // MiB: go_memstats_heap_inuse_bytes
	live       float64 // MiB: bytes allocated right after a forced collection
	goroutines float64
	fds        float64
	raftDB     float64 // MiB
	snapshots  float64 // MiB
}

type llEvent struct {
	kind     string
	at, done time.Time
}

// survivor is the node never fenced nor killed.
const survivor = 0

func (ll *longLife) sample() {
	at := time.Since(ll.t0)
	for i, n := range ll.c.Nodes {
		pid := n.Pid()
		if !n.Running() || pid == 0 {
			continue
		}
		s := llSample{at: at, node: i, pid: pid, rss: rssMiB(ll.b, pid)}
		if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			s.fds = float64(len(ents))
		}
		g, err := scrapeGauge(ll.metrics[i], "go_goroutines")
		if err != nil {
			ll.b.Logf("%s: %v", n.Name, err)
			continue
		}
		s.goroutines = g
		s.anon = procMiB(ll.b, pid, "RssAnon")
		if h, err := scrapeGauge(ll.metrics[i], "go_memstats_heap_inuse_bytes"); err == nil {
			s.heap = h / (1 << 20)
		}
		if live, err := ll.liveHeap(n, i == survivor); err == nil {
			s.live = live
		} else {
			ll.b.Logf("%s: %v", n.Name, err)
		}
		s.raftDB = fileMiB(filepath.Join(ll.dataDirs[i], "raft.db"))
		s.snapshots = dirMiB(filepath.Join(ll.dataDirs[i], "snapshots"))
		ll.samples = append(ll.samples, s)
		if ll.csv != nil {
			fmt.Fprintf(ll.csv, "%.0f,%s,%d,%.3f,%.3f,%.3f,%.3f,%.0f,%.0f,%.4f,%.4f\n", s.at.Seconds(), n.Name, pid,
				s.rss, s.anon, s.heap, s.live, s.goroutines, s.fds, s.raftDB, s.snapshots)
		}
	}
}

// liveHeap asks n for a heap profile taken after a collection and returns
// the bytes still allocated then (HeapAlloc in the profile's text form).
// For node1 (keep), it also keeps the profile itself in ll.profiles when
// one is due.
func (ll *longLife) liveHeap(n *devcluster.Node, keep bool) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := n.Client()
	defer cl.Close()
	body, err := cl.Get(ctx, "/debug/pprof/heap", url.Values{"gc": {"1"}, "debug": {"1"}})
	if err != nil {
		return 0, fmt.Errorf("heap profile: %w", err)
	}
	defer body.Close()
	live := math.NaN()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				live = x / (1 << 20)
			}
		}
	}
	if math.IsNaN(live) {
		return 0, fmt.Errorf("heap profile: no HeapAlloc line")
	}
	if at := time.Since(ll.t0); keep && ll.profiles != "" && at >= ll.nextProfile {
		ll.nextProfile = at + ll.profileEvery
		raw, err := cl.Get(ctx, "/debug/pprof/heap", nil) // the collection just ran
		if err != nil {
			return live, fmt.Errorf("heap profile: %w", err)
		}
		defer raw.Close()
		f, err := os.Create(filepath.Join(ll.profiles, fmt.Sprintf("%s-heap-%04.0fmin.pb.gz", n.Name, at.Minutes())))
		if err != nil {
			return live, err
		}
		defer f.Close()
		if _, err := io.Copy(f, raw); err != nil {
			return live, err
		}
	}
	return live, nil
}

// scrapeGauge reads one unlabelled gauge from a Prometheus text endpoint.
func scrapeGauge(addr, name string) (float64, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, fmt.Errorf("metrics %s: %w", addr, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return 0, fmt.Errorf("metrics %s: no %s", addr, name)
}

func fileMiB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}

func dirMiB(dir string) float64 {
	var sum int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				sum += fi.Size()
			}
		}
		return nil
	})
	return float64(sum) / (1 << 20)
}

// event runs the k-th event of the mild schedule and waits until the
// cluster has a primary writing again and every node runs.
func (ll *longLife) event(k int) {
	b, c := ll.b, ll.c
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p, e1, err := c.Primary(ctx)
	if err != nil {
		b.Fatalf("event %d: %v (logs in %s)", k, err, keepLogs(c))
	}
	// A takeover outside the schedule (a primary silent for a majority on
	// a loaded machine) fences a node the schedule did not: start it again
	// and let every node catch up, so the next event finds three.
	for _, n := range c.Nodes {
		if !n.Running() {
			ll.unplanned++
			b.Logf("%6.1f min: %s is down, fenced outside the schedule: powered on and started again", time.Since(ll.t0).Minutes(), n.Name)
			c.BMCs[n.Index].SetPower(true)
			restartAndRejoin(ctx, b, n, e1)
		}
		waitCaughtUp(ctx, n, e1)
	}
	ev := llEvent{at: time.Now()}
	switch k % 4 {
	case 0, 2:
		ev.kind = "transfer"
		// Round the nodes, so that each is primary in turn.
		target := c.Nodes[(p.Index+1)%len(c.Nodes)]
		ll.transfer(ctx, k, target)
	case 1:
		ev.kind = "fence"
		var victim *devcluster.Node
		for _, n := range c.Nodes {
			if n != p && n.Index != survivor {
				victim = n
			}
		}
		ll.fence(ctx, k, p, victim)
		c.BMCs[victim.Index].SetPower(true)
		restartAndRejoin(ctx, b, victim, e1)
	case 3:
		ev.kind = "kill"
		if p.Index == survivor {
			// Move primacy off node1 first: its process must live on.
			ll.transfer(ctx, k, c.Nodes[survivor+1])
			ev.at = time.Now()
			if p, e1, err = c.Primary(ctx); err != nil {
				b.Fatalf("event %d: %v (logs in %s)", k, err, keepLogs(c))
			}
		}
		_ = p.Signal(syscall.SIGKILL)
		_, e2, err := c.Primary(ctx, p)
		if err != nil || e2 <= e1 {
			b.Fatalf("event %d: takeover after the kill of %s: %v (epoch %d → %d; logs in %s)", k, p.Name, err, e1, e2, keepLogs(c))
		}
		// Its successor fenced it through its BMC; power it on again.
		waitFenced(ctx, b, c, p)
		c.BMCs[p.Index].SetPower(true)
		restartAndRejoin(ctx, b, p, e2)
	}
	q, e, err := c.Primary(ctx)
	if err != nil {
		b.Fatalf("event %d (%s): %v (logs in %s)", k, ev.kind, err, keepLogs(c))
	}
	if _, err := c.WaitWrite(ctx, q.Name, e); err != nil {
		b.Fatalf("event %d (%s): %s at epoch %d does not write: %v (logs in %s)", k, ev.kind, q.Name, e, err, keepLogs(c))
	}
	ev.done = time.Now()
	ll.events = append(ll.events, ev)
	b.Logf("%6.1f min: %s done in %v, primary %s epoch %d", time.Since(ll.t0).Minutes(), ev.kind, ev.done.Sub(ev.at).Round(time.Millisecond), q.Name, e)
}

func (ll *longLife) transfer(ctx context.Context, k int, target *devcluster.Node) {
	cl := ll.c.Nodes[survivor].Client()
	defer cl.Close()
	if err := cl.Do(ctx, "POST", "/v1/transfer", nil, daemon.AdminRequest{Node: target.Name}, nil); err != nil {
		ll.b.Fatalf("event %d: transfer to %s: %v (logs in %s)", k, target.Name, err, keepLogs(ll.c))
	}
	for ctx.Err() == nil {
		if q, _, err := ll.c.Primary(ctx); err == nil && q == target {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	ll.b.Fatalf("event %d: transfer to %s never landed (logs in %s)", k, target.Name, keepLogs(ll.c))
}

func (ll *longLife) fence(ctx context.Context, k int, p, victim *devcluster.Node) {
	cl := p.Client()
	defer cl.Close()
	var rec fencing.Record
	if err := cl.Do(ctx, "POST", "/v1/fence", nil, daemon.AdminRequest{Node: victim.Name, Reason: "long life"}, &rec); err != nil {
		ll.b.Fatalf("event %d: fence %s: %v (logs in %s)", k, victim.Name, err, keepLogs(ll.c))
	}
	waitFenced(ctx, ll.b, ll.c, victim)
}

// waitFenced waits until n's BMC reads off and its process is gone.
func waitFenced(ctx context.Context, b *testing.B, c *devcluster.Cluster, n *devcluster.Node) {
	for ctx.Err() == nil {
		if !c.BMCs[n.Index].PoweredOn() && !n.Running() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("%s never fenced (logs in %s)", n.Name, keepLogs(c))
}

// eventWindow is how long after an event starts its log lines count as
// the event's (a takeover, the fenced node's restart and rejoin take a
// few seconds; the rest is margin).
const eventWindow = 30 * time.Second

func (ll *longLife) report(total time.Duration) {
	b := ll.b
	half := total / 2

	// Per process: memory, goroutines, descriptors on the processes that
	// lived through the whole second half.
	type series struct {
		node, pid int
		s         []llSample
	}
	var procs []*series
	byPid := map[int]*series{}
	before := map[int]bool{} // processes already running in the first half
	for _, s := range ll.samples {
		if s.at < half {
			before[s.pid] = true
			continue
		}
		if byPid[s.pid] == nil {
			byPid[s.pid] = &series{node: s.node, pid: s.pid}
			procs = append(procs, byPid[s.pid])
		}
		byPid[s.pid].s = append(byPid[s.pid].s, s)
	}
	last := ll.samples[len(ll.samples)-1].at
	var worstRSSYear, worstRSSSlope, worstGor, worstFD, worstHeap, worstLive, worstLiveYear float64
	fitted := 0
	for _, p := range procs {
		if !before[p.pid] || p.s[len(p.s)-1].at < last-time.Minute || len(p.s) < 3 {
			continue // restarted in the second half, or ended early
		}
		fitted++
		name := ll.c.Nodes[p.node].Name
		rss0, rssH := fitPerHour(p.s, func(s llSample) float64 { return s.rss })
		a0, aH := fitPerHour(p.s, func(s llSample) float64 { return s.anon })
		h0, hH := fitPerHour(p.s, func(s llSample) float64 { return s.heap })
		l0, lH := fitPerHour(p.s, func(s llSample) float64 { return s.live })
		liveYear, liveHow := yearOf(p.s, func(s llSample) float64 { return s.live }, lH)
		g0, gH := fitPerHour(p.s, func(s llSample) float64 { return s.goroutines })
		f0, fH := fitPerHour(p.s, func(s llSample) float64 { return s.fds })
		rssYear, rssHow := yearOf(p.s, func(s llSample) float64 { return s.rss }, rssH)
		b.Logf("%s (pid %d, %d samples over the second half): RSS %.1f MiB %+.2f MiB/h (a year: %.0f MiB, %s), of it anonymous %.1f MiB %+.2f MiB/h; Go heap in use %.2f MiB %+.3f MiB/h, live after a collection %.2f MiB %+.3f MiB/h (a year: %.1f MiB, %s); goroutines %.0f %+.1f/h; descriptors %.0f %+.2f/h",
			name, p.pid, len(p.s), rss0, rssH, rssYear, rssHow, a0, aH, h0, hH, l0, lH, liveYear, liveHow, g0, gH, f0, fH)
		worstHeap = max(worstHeap, hH)
		worstLive, worstLiveYear = max(worstLive, lH), max(worstLiveYear, liveYear)
		worstRSSYear, worstRSSSlope = max(worstRSSYear, rssYear), max(worstRSSSlope, rssH)
		worstGor, worstFD = max(worstGor, gH), max(worstFD, fH)
	}
	if fitted == 0 {
		b.Fatalf("no process lived through the second half")
	}

	// Disk per node, restarts or not: the data directory stays.
	var worstDiskYear, worstDiskSlope float64
	for i, n := range ll.c.Nodes {
		var s []llSample
		for _, x := range ll.samples {
			if x.node == i && x.at >= half {
				s = append(s, x)
			}
		}
		if len(s) < 3 {
			continue
		}
		db0, dbH := fitPerHour(s, func(s llSample) float64 { return s.raftDB })
		sn0, snH := fitPerHour(s, func(s llSample) float64 { return s.snapshots })
		diskYear, diskHow := yearOf(s, func(s llSample) float64 { return s.raftDB + s.snapshots }, dbH+snH)
		b.Logf("%s: raft.db %.2f MiB %+.3f MiB/h, snapshots %.3f MiB %+.4f MiB/h (last %.2f + %.3f MiB; first snapshot at %s); a year: %.1f MiB (%s)",
			n.Name, db0, dbH, sn0, snH, s[len(s)-1].raftDB, s[len(s)-1].snapshots, firstSnapshot(ll.samples, i), diskYear, diskHow)
		worstDiskYear, worstDiskSlope = max(worstDiskYear, diskYear), max(worstDiskSlope, dbH+snH)
	}

	// Log lines: idle hours are the time outside every event's window.
	var stamps []time.Time
	for _, n := range ll.c.Nodes {
		stamps = append(stamps, logLineTimes(n.Log)...)
	}
	idleRate, perKind := logRates(stamps, ll.t0, ll.t0.Add(last), ll.events, eventWindow)
	logBytes := 0.0
	for _, n := range ll.c.Nodes {
		logBytes += fileMiB(n.Log)
	}
	counts := map[string]int{}
	for _, e := range ll.events {
		counts[e.kind]++
	}
	b.Logf("log: %.0f lines/h idle (3 nodes together); per event, beyond idle: transfer %.0f (%d), fence of a follower %.0f (%d), kill of the primary %.0f (%d); %.2f MiB of logs in %v",
		idleRate, perKind["transfer"], counts["transfer"], perKind["fence"], counts["fence"], perKind["kill"], counts["kill"], logBytes, last.Round(time.Second))
	verdict := func(v float64) string {
		if v < 100 {
			return "under 100 MiB"
		}
		return "OVER 100 MiB"
	}
	b.Logf("a year: RSS %.0f MiB (%s), live Go heap %.1f MiB (%s), disk %.1f MiB (%s); load average %s", worstRSSYear, verdict(worstRSSYear), worstLiveYear, verdict(worstLiveYear), worstDiskYear, verdict(worstDiskYear), loadAvg())

	b.ReportMetric(float64(ll.unplanned), "unplanned-takeovers")
	b.ReportMetric(worstRSSSlope, "rss-MiB/h")
	b.ReportMetric(worstRSSYear, "rss-year-MiB")
	b.ReportMetric(worstHeap, "heap-MiB/h")
	b.ReportMetric(worstLive, "live-heap-MiB/h")
	b.ReportMetric(worstLiveYear, "live-heap-year-MiB")
	b.ReportMetric(worstGor, "goroutines/h")
	b.ReportMetric(worstFD, "fds/h")
	b.ReportMetric(worstDiskSlope, "disk-MiB/h")
	b.ReportMetric(worstDiskYear, "disk-year-MiB")
	b.ReportMetric(idleRate, "idle-log-lines/h")
	b.ReportMetric(perKind["kill"], "log-lines/failover")
	b.ReportMetric(float64(len(ll.events)), "events")
}

// yearOf extrapolates v to a year from the second half's samples s.
// A straight line through a quarter of an hour makes a year out of any
// warm-up or noise (the Go heap breathes by megabytes between
// collections; raft.db grows until the first compaction, then bolt reuses
// the pages it freed). So it first asks whether v still grows: if the
// later half of s peaks no higher than the earlier half (within 2 %, and
// 0.05 MiB or one unit), v is flat and a year holds its peak; otherwise
// the line is extended from the last sample.
func yearOf(s []llSample, v func(llSample) float64, perHour float64) (float64, string) {
	const year = 365.25 * 24
	mid := len(s) / 2
	peak := func(s []llSample) float64 {
		m := math.Inf(-1)
		for _, x := range s {
			m = max(m, v(x))
		}
		return m
	}
	early, late := peak(s[:mid]), peak(s[mid:])
	if late <= early+max(early*0.02, 0.05) {
		return max(early, late), fmt.Sprintf("flat: peak %.2f in the last quarter, %.2f in the one before", late, early)
	}
	return v(s[len(s)-1]) + max(perHour, 0)*year, fmt.Sprintf("still growing: peak %.2f in the last quarter, %.2f in the one before; the line extended", late, early)
}

// firstSnapshot is when node i's data directory first held a snapshot
// ("none" if it never did).
func firstSnapshot(samples []llSample, i int) string {
	for _, x := range samples {
		if x.node == i && x.snapshots > 0 {
			return (x.at.Round(time.Second)).String()
		}
	}
	return "none"
}

// fitPerHour fits v(s) = a + slope·t by least squares and returns the
// fitted value at the first sample and the slope per hour.
func fitPerHour(s []llSample, v func(llSample) float64) (start, perHour float64) {
	xs := make([]float64, len(s))
	ys := make([]float64, len(s))
	for i, x := range s {
		xs[i], ys[i] = x.at.Hours(), v(x)
	}
	a, slope := linearFit(xs, ys)
	return a + slope*xs[0], slope
}

// linearFit returns the intercept and slope of the least-squares line.
func linearFit(xs, ys []float64) (intercept, slope float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return sy / n, 0
	}
	slope = (n*sxy - sx*sy) / d
	return (sy - slope*sx) / n, slope
}

// logLineTimes returns the time of every line of a node's log; a line
// without a time of its own (a panic's trace, say) takes the one before.
func logLineTimes(path string) []time.Time {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []time.Time
	var prev time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := reLogTime.FindStringSubmatch(sc.Text()); m != nil {
			if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
				prev = t
			}
		}
		if !prev.IsZero() {
			out = append(out, prev)
		}
	}
	return out
}

// logRates splits the log lines between start and end into those within
// window of an event's start and the rest: it returns the idle lines per
// hour, and per kind of event the mean lines of its window beyond what
// idle would have written in it.
func logRates(stamps []time.Time, start, end time.Time, events []llEvent, window time.Duration) (idlePerHour float64, perEvent map[string]float64) {
	slices.SortFunc(stamps, func(a, b time.Time) int { return a.Compare(b) })
	count := func(from, to time.Time) int {
		i, _ := slices.BinarySearchFunc(stamps, from, func(a, b time.Time) int { return a.Compare(b) })
		j, _ := slices.BinarySearchFunc(stamps, to, func(a, b time.Time) int { return a.Compare(b) })
		return j - i
	}
	inEvents, evTime := 0, time.Duration(0)
	type acc struct{ lines, n int }
	kinds := map[string]*acc{}
	for _, e := range events {
		to := e.at.Add(max(window, e.done.Sub(e.at)))
		l := count(e.at, to)
		inEvents += l
		evTime += to.Sub(e.at)
		if kinds[e.kind] == nil {
			kinds[e.kind] = &acc{}
		}
		kinds[e.kind].lines += l
		kinds[e.kind].n++
	}
	idleTime := end.Sub(start) - evTime
	if idleTime > 0 {
		idlePerHour = float64(count(start, end)-inEvents) / idleTime.Hours()
	}
	perEvent = map[string]float64{}
	for k, a := range kinds {
		perEvent[k] = float64(a.lines)/float64(a.n) - idlePerHour*window.Hours()
	}
	return idlePerHour, perEvent
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// TestLongLifeFits: the benchmark's arithmetic on known figures.
func TestLongLifeFits(t *testing.T) {
	a, s := linearFit([]float64{0, 1, 2, 3}, []float64{5, 7, 9, 11})
	if a != 5 || s != 2 {
		t.Errorf("fit of 5+2t: %v + %v·t", a, s)
	}
	if _, s := linearFit([]float64{1, 1}, []float64{3, 5}); s != 0 {
		t.Errorf("fit with one abscissa: slope %v", s)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var stamps []time.Time
	// One line a minute for an hour, and 50 more in the window of an event
	// at minute 10.
	for m := range 60 {
		stamps = append(stamps, t0.Add(time.Duration(m)*time.Minute+time.Second))
	}
	for i := range 50 {
		stamps = append(stamps, t0.Add(10*time.Minute+time.Duration(i)*100*time.Millisecond))
	}
	ev := []llEvent{{kind: "kill", at: t0.Add(10 * time.Minute), done: t0.Add(10*time.Minute + 5*time.Second)}}
	idle, per := logRates(stamps, t0, t0.Add(time.Hour), ev, time.Minute)
	// 59 idle lines in 59 idle minutes; the event's minute has 51 lines,
	// one of them idle's.
	if idle < 59.9 || idle > 60.1 || per["kill"] < 49.9 || per["kill"] > 50.1 {
		t.Errorf("idle %v lines/h, kill %v lines (want 60, 50)", idle, per["kill"])
	}
}
