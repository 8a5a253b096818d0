package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// BenchmarkFailover measures SIGKILL of the primary → a new primary acting,
// with the default timings, over b.N failovers in one cluster (the killed
// node is restarted and rejoins between runs). Reported: median and worst.
//
//	go test ./daemon -run '^$' -bench Failover -benchtime 20x
func BenchmarkFailover(b *testing.B) {
	for _, n := range []int{3, 5} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			c, err := devcluster.New(devcluster.Options{Nodes: n, Dir: b.TempDir(), Bin: fencedBin})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if err := c.Start(); err != nil {
				b.Fatal(err)
			}
			var times []time.Duration
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				p, e1, err := c.Primary(ctx)
				if err != nil {
					b.Fatal(err)
				}
				// Let the cluster settle so every follower has a fresh leader
				// contact, as in steady state.
				time.Sleep(time.Second)
				p.Kill()
				t0 := time.Now()
				_, e2, err := c.Primary(ctx, p)
				if err != nil || e2 <= e1 {
					b.Fatalf("failover: %v (epoch %d → %d)", err, e1, e2)
				}
				times = append(times, time.Since(t0))
				restartAndRejoin(ctx, b, p, e2)
				cancel()
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Milliseconds()), "median-ms")
			b.ReportMetric(float64(times[len(times)-1].Milliseconds()), "worst-ms")
			d := config.Default().Timing
			b.Logf("%d nodes, %d failovers: median %s, worst %s (lease %s + margin %s)", n, len(times), times[len(times)/2], times[len(times)-1], d.Lease, d.Margin)
		})
	}
}

// BenchmarkIdle measures each node's resident memory and CPU use over an
// idle minute of a 3-node cluster (FENCED_IDLE_SECONDS overrides 60).
func BenchmarkIdle(b *testing.B) { benchIdle(b, nil) }

// BenchmarkIdleWitness: the same with node3 a witness (which should fit on
// a small VM); its own RSS and CPU are reported apart.
func BenchmarkIdleWitness(b *testing.B) { benchIdle(b, witnessConfig) }

func benchIdle(b *testing.B, configure func(*config.Config)) {
	secs := 60
	if s, err := strconv.Atoi(os.Getenv("FENCED_IDLE_SECONDS")); err == nil {
		secs = s
	}
	for b.Loop() {
		c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: b.TempDir(), Bin: fencedBin, Configure: configure})
		if err != nil {
			b.Fatal(err)
		}
		if e := os.Getenv("FENCED_BENCH_ENV"); e != "" {
			for _, n := range c.Nodes {
				n.Env = append(n.Env, strings.Fields(e)...)
			}
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, _, err := c.Primary(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		time.Sleep(2 * time.Second)
		start := map[string]float64{}
		for _, n := range c.Nodes {
			start[n.Name] = cpuSeconds(b, n.Pid())
		}
		time.Sleep(time.Duration(secs) * time.Second)
		var maxRSS, maxCPU float64
		for _, n := range c.Nodes {
			cpu := (cpuSeconds(b, n.Pid()) - start[n.Name]) / float64(secs) * 100
			rss := rssMiB(b, n.Pid())
			b.Logf("%s: RSS %.1f MiB (anonymous %.1f, file-backed %.1f), CPU %.2f %% of a core", n.Name, rss,
				procMiB(b, n.Pid(), "RssAnon"), procMiB(b, n.Pid(), "RssFile"), cpu)
			if configure != nil && n.Index == witness {
				b.ReportMetric(rss, "witness-rss-MiB")
				b.ReportMetric(cpu, "witness-cpu-%")
				continue
			}
			maxRSS, maxCPU = max(maxRSS, rss), max(maxCPU, cpu)
		}
		b.ReportMetric(maxRSS, "max-rss-MiB")
		b.ReportMetric(maxCPU, "max-cpu-%")
		c.Close()
	}
}

func cpuSeconds(b *testing.B, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	tck, _ := exec.Command("getconf", "CLK_TCK").Output()
	hz, _ := strconv.ParseFloat(strings.TrimSpace(string(tck)), 64)
	if hz == 0 {
		hz = 100
	}
	return (ut + st) / hz
}

func rssMiB(b *testing.B, pid int) float64 { return procMiB(b, pid, "VmRSS") }

// procMiB is one of /proc/PID/status's kB fields (VmRSS, RssAnon, RssFile)
// in MiB.
func procMiB(b *testing.B, pid int, field string) float64 {
	return float64(procStatusKB(b, pid, field)) / 1024
}
