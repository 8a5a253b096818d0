package daemon_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// The outsider flood: what one node is sent, from floodSources (loopback
// addresses other than the nodes' own 127.0.0.1, standing for hosts that
// do not hold the cluster key). Bounded in count and in time.
var (
	floodSources = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9"}
	floodPlan    = struct {
		raftIdle, raftJunk, raftTLS int // idle connections; junk bytes then close; TLS clients without a certificate
		gossipIdle                  int // idle connections
		gossipHuge, gossipBig       int // streams announcing 20 MiB (memberlist's own limit) / 4 MiB of ciphertext, then sending junk
		udpPackets                  int // junk datagrams to the gossip port
		hold                        time.Duration
		descriptorLimit             uint64 // the flooded node's RLIMIT_NOFILE
	}{
		raftIdle: 2000, raftJunk: 400, raftTLS: 100,
		gossipIdle: 2500, gossipHuge: 24, gossipBig: 16,
		udpPackets: 20000,
		hold:       12 * time.Second,
		// Low enough that the flood above could exhaust it if each
		// connection kept a descriptor (production limits are higher, and
		// so would be the flood), high enough for the node's own needs.
		descriptorLimit: 4096,
	}
)

// TestOutsiderFlood floods the primary of a 3-node cluster of real fenced
// processes, on its raft and its gossip port, with idle connections and
// junk from hosts without the cluster key, and measures the primary's
// resident memory, its descriptors, and its API and metrics answering
// meanwhile. It asserts that the flood costs the node less than 64 MiB of
// memory and never exhausts its descriptors, that the API and the metrics
// endpoint keep answering, that the primary keeps its role and its epoch,
// and that what is refused is logged in a bounded number of lines.
func TestOutsiderFlood(t *testing.T) {
	metrics := make([]string, 3)
	for i := range metrics {
		p, err := devcluster.FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		metrics[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	// A longer lease than the other tests': the flood itself takes CPU
	// from the nodes on this small machine, and it is the flood's memory
	// and descriptors that this test is about.
	timing := config.Timing{Heartbeat: ms(300), Lease: ms(4000), Margin: ms(300), Grace: ms(2000), FenceTimeout: ms(5000)}
	c := startCluster(t, devcluster.Options{Nodes: 3, Timing: timing,
		NodeConfig: func(i int, cfg *config.Config) { cfg.Metrics.Listen = metrics[i] }})
	p, epoch, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	lim := unix.Rlimit{Cur: floodPlan.descriptorLimit, Max: floodPlan.descriptorLimit}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatalf("limiting %s's descriptors: %v", p.Name, err)
	}
	raftAddr := c.Config.Nodes[p.Index].Raft
	gossipAddr := c.Config.Nodes[p.Index].Gossip
	time.Sleep(time.Second) // settle after the election
	base := procSample(t, pid)
	// Peak RSS from here on (VmHWM counts from the reset).
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("resetting the peak RSS: %v", err)
	}
	logStart := fileSize(t, p.Log)

	w := watchNode(pid, p, "http://"+metrics[p.Index]+"/metrics", epoch)
	f := &flooder{done: make(chan struct{}), conns: map[net.Conn]bool{}}
	start := time.Now()
	f.run(func() { f.idle(raftAddr, floodPlan.raftIdle) })
	f.run(func() { f.idle(gossipAddr, floodPlan.gossipIdle) })
	f.run(func() { f.raftJunk(raftAddr, floodPlan.raftJunk) })
	f.run(func() { f.raftTLS(raftAddr, floodPlan.raftTLS) })
	f.run(func() { f.gossipStreams(gossipAddr, floodPlan.gossipHuge, 20<<20-1, 4<<20) })
	f.run(func() { f.gossipStreams(gossipAddr, floodPlan.gossipBig, 4<<20, 4<<20) })
	f.run(func() { f.udp(gossipAddr, floodPlan.udpPackets) })
	f.launched.Wait()
	launched := time.Since(start)
	time.Sleep(floodPlan.hold - launched)
	f.closeAll()
	time.Sleep(3 * time.Second) // recovery, still probing
	res := w.stop()
	peak := procPeakRSS(t, pid)

	// After the flood: the same node is the one primary, at the same epoch.
	p2, epoch2, err := c.Primary(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lines := newLines(t, p.Log, logStart)
	refusedLines, errorLines := 0, 0
	for _, l := range lines {
		if strings.Contains(l, "refused traffic from outside the cluster") {
			refusedLines++
			if refusedLines <= 20 {
				t.Logf("  %s", l)
			}
		}
		if strings.Contains(l, "level=ERROR") {
			errorLines++
		}
	}

	extra := int64(peak) - int64(base.rss)
	t.Logf("flood on %s for %s (launched in %s): raft %d idle, %d junk, %d TLS without certificate; gossip %d idle, %d streams announcing 20 MiB, %d announcing 4 MiB, %d junk datagrams; %d connections opened, %d failed at dial, %d bytes sent",
		p.Name, floodPlan.hold, launched.Round(time.Millisecond), floodPlan.raftIdle, floodPlan.raftJunk, floodPlan.raftTLS,
		floodPlan.gossipIdle, floodPlan.gossipHuge, floodPlan.gossipBig, floodPlan.udpPackets, f.dials.Load()-f.dialErrs.Load(), f.dialErrs.Load(), f.sent.Load())
	t.Logf("rss: before %.1f MiB, peak %.1f MiB (+%.1f MiB); descriptors: before %d, peak %d (limit %d)",
		mib(base.rss), mib(peak), float64(extra)/(1<<20), base.fds, res.peakFDs, floodPlan.descriptorLimit)
	t.Logf("api status: %d calls, %d failed, latency p50 %s p99 %s max %s; metrics: %d scrapes, %d failed, max %s",
		res.status.n(), res.statusFailed, res.status.q(0.5), res.status.q(0.99), res.status.q(1),
		res.metrics.n(), res.metricsFailed, res.metrics.q(1))
	t.Logf("log lines during the flood: %d, of which %d refusal lines, %d at ERROR", len(lines), refusedLines, errorLines)
	for _, e := range res.errs[:min(len(res.errs), 5)] {
		t.Logf("  %s", e)
	}

	if extra >= 64<<20 {
		t.Errorf("the flood cost the node %.1f MiB of memory; want less than 64 MiB", float64(extra)/(1<<20))
	}
	if res.peakFDs >= int(floodPlan.descriptorLimit) {
		t.Errorf("the flood exhausted the node's descriptors (%d of %d)", res.peakFDs, floodPlan.descriptorLimit)
	}
	if res.statusFailed > 0 || res.status.n() == 0 {
		t.Errorf("the API failed %d of %d status calls under the flood", res.statusFailed, res.status.n())
	}
	if res.metricsFailed > 0 || res.metrics.n() == 0 {
		t.Errorf("the metrics endpoint failed %d of %d scrapes under the flood", res.metricsFailed, res.metrics.n())
	}
	if res.demoted > 0 {
		t.Errorf("%s reported %d times under the flood that it was not acting as primary at epoch %d", p.Name, res.demoted, epoch)
	}
	if p2 != p || epoch2 != epoch {
		t.Errorf("after the flood the primary is %s at epoch %d; want %s at %d", p2.Name, epoch2, p.Name, epoch)
	}
	if refusedLines == 0 {
		t.Error("nothing refused was logged")
	}
	// A dozen kinds of refusal, at most one line each per 10 s, over 15 s.
	if refusedLines > 50 || errorLines > 10 {
		t.Errorf("the flood made %d refusal lines and %d ERROR lines; want at most 50 and 10", refusedLines, errorLines)
	}
}

// flooder opens the outsiders' connections and keeps them until closeAll.
type flooder struct {
	launched sync.WaitGroup // the floods still starting
	wg       sync.WaitGroup // every goroutine
	done     chan struct{}  // closeAll began
	mu       sync.Mutex
	conns    map[net.Conn]bool // open
	dials    atomic.Int64
	dialErrs atomic.Int64
	sent     atomic.Int64
	n        atomic.Int64 // round robin over the sources
}

func (f *flooder) run(fn func()) {
	f.launched.Add(1)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer f.launched.Done()
		fn()
	}()
}

func (f *flooder) source() string {
	return floodSources[int(f.n.Add(1))%len(floodSources)]
}

func (f *flooder) dial(target string) net.Conn {
	select {
	case <-f.done:
		return nil
	default:
	}
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(f.source())}}
	f.dials.Add(1)
	c, err := d.Dial("tcp", target)
	if err != nil {
		f.dialErrs.Add(1)
		return nil
	}
	f.mu.Lock()
	f.conns[c] = true
	f.mu.Unlock()
	return c
}

// drop closes c, one of the flood's connections.
func (f *flooder) drop(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// parallel runs fn n times on 16 goroutines.
func parallel(n int, fn func()) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				fn()
			}
		}()
	}
	wg.Wait()
}

// idle opens n connections that send nothing, and keeps them: one the
// node closes is opened again a second later, until closeAll.
func (f *flooder) idle(target string, n int) {
	parallel(n, func() {
		c := f.dial(target)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				if c != nil {
					c.Read(make([]byte, 1)) // until the node (or closeAll) closes it
					f.drop(c)
				}
				select {
				case <-f.done:
					return
				case <-time.After(time.Second):
				}
				c = f.dial(target)
			}
		}()
	})
}

// raftJunk sends 4 KiB of random bytes on each of n connections.
func (f *flooder) raftJunk(target string, n int) {
	junk := make([]byte, 4096)
	rand.Read(junk)
	parallel(n, func() {
		if c := f.dial(target); c != nil {
			c.SetWriteDeadline(time.Now().Add(2 * time.Second))
			k, _ := c.Write(junk)
			f.sent.Add(int64(k))
		}
	})
}

// raftTLS starts TLS handshakes without a client certificate.
func (f *flooder) raftTLS(target string, n int) {
	parallel(n, func() {
		if c := f.dial(target); c != nil {
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			tc.SetDeadline(time.Now().Add(3 * time.Second))
			tc.Handshake()
		}
	})
}

// gossipStreams opens n streams whose header announces an encrypted
// message of announce bytes, and sends up to send bytes of junk on each.
func (f *flooder) gossipStreams(target string, n int, announce uint32, send int) {
	chunk := make([]byte, 64<<10)
	rand.Read(chunk)
	parallel(n, func() {
		c := f.dial(target)
		if c == nil {
			return
		}
		head := []byte{10, 0, 0, 0, 0} // encryptMsg, length
		binary.BigEndian.PutUint32(head[1:], announce)
		c.SetWriteDeadline(time.Now().Add(floodPlan.hold))
		if _, err := c.Write(head); err != nil {
			return
		}
		for left := send; left > 0; left -= len(chunk) {
			k, err := c.Write(chunk[:min(left, len(chunk))])
			f.sent.Add(int64(k))
			if err != nil {
				return
			}
		}
	})
}

// udp sends n datagrams of 1400 bytes: half random, half shaped like an
// encrypted memberlist packet (version 1) so that they reach decryption.
func (f *flooder) udp(target string, n int) {
	dst, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return
	}
	var socks []*net.UDPConn
	for _, s := range floodSources {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(s)})
		if err == nil {
			socks = append(socks, u)
			defer u.Close()
		}
	}
	if len(socks) == 0 {
		return
	}
	buf := make([]byte, 1400)
	for i := range n {
		select {
		case <-f.done:
			return
		default:
		}
		rand.Read(buf)
		if i%2 == 0 {
			buf[0] = 1
		}
		if k, err := socks[i%len(socks)].WriteToUDP(buf, dst); err == nil {
			f.sent.Add(int64(k))
		}
		if i%500 == 499 {
			time.Sleep(50 * time.Millisecond) // about 10k a second
		}
	}
}

func (f *flooder) closeAll() {
	close(f.done)
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// nodeWatch samples a node's descriptors and probes its API and metrics
// until stop.
type nodeWatch struct {
	stopCh chan struct{}
	wg     sync.WaitGroup
	res    watchResult
}

type watchResult struct {
	peakFDs                     int
	status, metrics             durations
	statusFailed, metricsFailed int
	demoted                     int // status answers saying the node was not acting at the epoch
	errs                        []string
}

type durations []time.Duration

func (d durations) n() int { return len(d) }

// q is the q-quantile (0..1).
func (d durations) q(q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))].Round(time.Millisecond)
}

func watchNode(pid int, n *devcluster.Node, metricsURL string, epoch uint64) *nodeWatch {
	w := &nodeWatch{stopCh: make(chan struct{})}
	var mu sync.Mutex
	fail := func(what string, err error) {
		mu.Lock()
		w.res.errs = append(w.res.errs, fmt.Sprintf("%s: %v", what, err))
		mu.Unlock()
	}
	loop := func(every time.Duration, fn func()) {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				fn()
				select {
				case <-w.stopCh:
					return
				case <-t.C:
				}
			}
		}()
	}
	loop(100*time.Millisecond, func() {
		if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			mu.Lock()
			w.res.peakFDs = max(w.res.peakFDs, len(ents))
			mu.Unlock()
		}
	})
	loop(250*time.Millisecond, func() {
		// A connection of its own each time, as fencectl makes.
		cl := n.Client()
		defer cl.Close()
		// A generous timeout: this tells "answers" from "hangs", it
		// measures no latency bound.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var st daemon.Status
		t0 := time.Now()
		err := cl.Do(ctx, "GET", "/v1/status", nil, nil, &st)
		d := time.Since(t0)
		mu.Lock()
		defer mu.Unlock()
		w.res.status = append(w.res.status, d)
		switch {
		case err != nil:
			w.res.statusFailed++
			w.res.errs = append(w.res.errs, fmt.Sprintf("status: %v", err))
		case !st.Self.Acting || st.Self.Epoch != epoch:
			w.res.demoted++
			w.res.errs = append(w.res.errs, fmt.Sprintf("status: role %s acting %v epoch %d", st.Self.Role, st.Self.Acting, st.Self.Epoch))
		}
	})
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	loop(500*time.Millisecond, func() {
		t0 := time.Now()
		resp, err := hc.Get(metricsURL)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		d := time.Since(t0)
		mu.Lock()
		w.res.metrics = append(w.res.metrics, d)
		if err != nil {
			w.res.metricsFailed++
		}
		mu.Unlock()
		if err != nil {
			fail("metrics", err)
		}
	})
	return w
}

func (w *nodeWatch) stop() watchResult {
	close(w.stopCh)
	w.wg.Wait()
	return w.res
}

type procStat struct {
	rss uint64 // bytes
	fds int
}

func procSample(t *testing.T, pid int) procStat {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return procStat{rss: procStatusKB(t, pid, "VmRSS") << 10, fds: len(ents)}
}

func procPeakRSS(t *testing.T, pid int) uint64 { return procStatusKB(t, pid, "VmHWM") << 10 }

// procStatusKB reads a "Name: N kB" field of /proc/PID/status.
func procStatusKB(t testing.TB, pid int, field string) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status: no %s", pid, field)
	return 0
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// newLines returns the lines of path after offset.
func newLines(t *testing.T, path string, offset int64) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if offset > int64(len(b)) {
		offset = 0
	}
	return strings.Split(strings.TrimSpace(string(b[offset:])), "\n")
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
