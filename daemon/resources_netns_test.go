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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// ocfNet is a 3-node cluster of real fenced processes in network
// namespaces, each node a machine of its own (devcluster.Machines: its
// mounts and addresses outlive the daemon until its BMC powers it off),
// fenced through simulated IPMI BMCs relayed into the namespaces, running
// the group Filesystem (ext4 on a loop device every machine sees) →
// IPaddr2 (a floating IP on the nodes' bridge) → Dummy; plus a client
// namespace on the same bridge.
type ocfNet struct {
	c        *devcluster.Cluster
	ns       *devcluster.Netns
	m        *devcluster.Machines
	client   string // its namespace
	vip, mnt string
	loop     string
}

// monitor sets every resource's monitor interval (0: the agents' advice).
func newOCFNet(tb testing.TB, timing config.Timing, monitor time.Duration) *ocfNet {
	tb.Helper()
	if os.Geteuid() != 0 {
		if testing.Short() {
			tb.Skip("needs root")
		}
		tb.Fatal("needs root for network and mount namespaces and a loop device (run as root, or -short)")
	}
	needOCF(tb, "Filesystem", "IPaddr2", "Dummy")
	for _, bin := range []string{"ping", "mkfs.ext4", "e2fsck", "losetup", "nsenter", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatalf("%s not installed: %v", bin, err)
		}
	}
	dir := tb.TempDir()
	subnet := 1 + os.Getpid()%200
	ns, err := devcluster.NewNetns(fmt.Sprintf("fro%d", os.Getpid()%10000), 3, subnet)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ns.Close)
	o := &ocfNet{ns: ns, vip: fmt.Sprintf("10.213.%d.100", subnet), mnt: filepath.Join(dir, "shared")}
	if o.client, err = ns.AddHost("cl", fmt.Sprintf("10.213.%d.50", subnet)); err != nil {
		tb.Fatal(err)
	}
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		tb.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		tb.Fatalf("losetup: %v: %s", err, out)
	}
	o.loop = strings.TrimSpace(string(out))
	tb.Cleanup(func() { exec.Command("losetup", "-d", o.loop).Run() })
	os.MkdirAll(o.mnt, 0o755)
	if o.m, err = devcluster.NewMachines(ns, dir); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(o.m.Close)
	c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: dir, Bin: fencedBin, Timing: timing,
		Hosts: ns.Hosts, Wrap: o.m.Wrap, BMC: true, PowerOff: o.m.PowerOff, PowerOn: o.m.Boot,
		Configure: func(cfg *config.Config) {
			cfg.Resources = []config.Resource{
				{Name: "data", OCF: "heartbeat:Filesystem", Params: map[string]string{"device": o.loop, "directory": o.mnt, "fstype": "ext4"}},
				{Name: "vip", OCF: "heartbeat:IPaddr2", Params: map[string]string{"ip": o.vip, "cidr_netmask": "24", "nic": "eth0"}},
				{Name: "app", OCF: "heartbeat:Dummy"},
			}
			for k := range cfg.Resources {
				cfg.Resources[k].MonitorInterval = config.Duration(monitor)
			}
		}})
	if err != nil {
		tb.Fatal(err)
	}
	o.c = c
	var bmcs []*net.UDPAddr
	for _, b := range c.BMCs {
		bmcs = append(bmcs, b.Addr())
	}
	relay, err := ns.RelayUDP(bmcs)
	if err != nil {
		c.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		relay.Close()
		if tb.Failed() {
			for _, nd := range c.Nodes {
				b, _ := os.ReadFile(nd.Log)
				tb.Logf("---- %s log (last 4000 bytes) ----\n%s", nd.Name, tail(string(b), 4000))
			}
		}
	})
	if err := c.Start(); err != nil {
		tb.Fatal(err)
	}
	return o
}

// holders returns the nodes whose machine has the floating IP configured
// and those with the shared filesystem mounted.
func (o *ocfNet) holders() (vip, mounted []int, err error) {
	for i := range o.c.Nodes {
		has, err := o.m.HasAddr(i, o.vip)
		if err != nil {
			return nil, nil, err
		}
		if has {
			vip = append(vip, i)
		}
		mt, err := o.m.Mounted(i, o.mnt)
		if err != nil {
			return nil, nil, err
		}
		if mt {
			mounted = append(mounted, i)
		}
	}
	return vip, mounted, nil
}

// mac is node i's eth0 hardware address.
func (o *ocfNet) mac(i int) (string, error) {
	out, err := exec.Command("ip", "-n", o.ns.Name(i), "-o", "link", "show", "eth0").Output()
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(out))
	for k := range f {
		if f[k] == "link/ether" && k+1 < len(f) {
			return f[k+1], nil
		}
	}
	return "", fmt.Errorf("no MAC in %q", out)
}

// clientNeigh is the client's neighbour entry for the floating IP: its
// hardware address ("" when none).
func (o *ocfNet) clientNeigh() string {
	out, _ := exec.Command("ip", "-n", o.client, "neigh", "show", o.vip).Output()
	f := strings.Fields(string(out))
	for k := range f {
		if f[k] == "lladdr" && k+1 < len(f) {
			return f[k+1]
		}
	}
	return ""
}

// sampler records who holds the address and the mount every 20ms and
// every moment two did.
type sampler struct {
	o          *ocfNet
	mu         sync.Mutex
	samples    int
	violations []string
	last       [2][]int
	stop, done chan struct{}
}

func (o *ocfNet) sample() *sampler {
	s := &sampler{o: o, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			vip, mounted, err := o.holders()
			s.mu.Lock()
			s.samples++
			switch {
			case err != nil:
				s.violations = append(s.violations, "sample: "+err.Error())
			case len(vip) > 1 || len(mounted) > 1:
				s.violations = append(s.violations, fmt.Sprintf("%s: address on %v, filesystem mounted on %v", time.Now().Format("15:04:05.000"), vip, mounted))
			}
			s.last = [2][]int{vip, mounted}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) Stop() (samples int, violations []string) {
	close(s.stop)
	<-s.done
	return s.samples, s.violations
}

// pinger pings the floating IP from the client every 20ms and keeps the
// time of every reply (ping -D prints the receive time).
type pinger struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	replies []time.Time
	done    chan struct{}
}

var rePing = regexp.MustCompile(`^\[(\d+)\.(\d+)\] \d+ bytes from `)

func (o *ocfNet) ping(tb testing.TB) *pinger {
	// stdbuf: ping's output is a pipe here; each reply must reach us as
	// it comes, not in blocks.
	cmd := exec.Command("ip", "netns", "exec", o.client, "stdbuf", "-oL", "ping", "-D", "-n", "-i", "0.02", "-W", "1", o.vip)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &pinger{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			m := rePing.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			sec, _ := strconv.ParseInt(m[1], 10, 64)
			us, _ := strconv.ParseInt((m[2] + "000000")[:6], 10, 64)
			p.mu.Lock()
			p.replies = append(p.replies, time.Unix(sec, us*1000))
			p.mu.Unlock()
		}
	}()
	tb.Cleanup(p.Stop)
	return p
}

func (p *pinger) Stop() {
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
	}
	<-p.done
	p.cmd.Wait()
}

// gap returns the longest silence between replies after since, and the
// first reply after that silence.
func (p *pinger) gap(since time.Time) (gap time.Duration, resumed time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := since
	for _, r := range p.replies {
		if r.Before(since) {
			prev = r
			continue
		}
		if d := r.Sub(prev); d > gap {
			gap, resumed = d, r
		}
		prev = r
	}
	return gap, resumed
}

// repliesAfter counts replies received after t.
func (p *pinger) repliesAfter(t time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.replies {
		if r.After(t) {
			n++
		}
	}
	return n
}

// waitPrimary waits for a primary other than skip with its group running
// and the address and mount on its machine only.
func (o *ocfNet) waitPrimary(ctx context.Context, skip ...*devcluster.Node) (*devcluster.Node, uint64, error) {
	p, e, err := o.c.Primary(ctx, skip...)
	if err != nil {
		return nil, 0, err
	}
	if err := waitRunning(ctx, p); err != nil {
		return nil, 0, err
	}
	vip, mounted, err := o.holders()
	if err != nil {
		return nil, 0, err
	}
	if !slices.Equal(vip, []int{p.Index}) || !slices.Equal(mounted, []int{p.Index}) {
		return nil, 0, fmt.Errorf("primary %s acting, but the address is on %v and the filesystem mounted on %v", p.Name, vip, mounted)
	}
	return p, e, nil
}

// failover is one SIGKILL failover seen from the client.
type failover struct {
	old, new *devcluster.Node
	epoch    uint64
	gap      time.Duration // longest silence of the client's pings
	killToOK time.Duration // SIGKILL → first reply after the silence
	acting   time.Duration // SIGKILL → new primary acting (its log)
	neighOK  bool          // the client's neighbour entry moved to the new primary
}

// killPrimary SIGKILLs primary p (daemon and agents: its machine stays up
// until the new primary's fence powers it off), waits for the new primary
// and the client's pings to come back, and powers p on again.
func (o *ocfNet) killPrimary(ctx context.Context, pg *pinger, p *devcluster.Node, e1 uint64) (failover, error) {
	f := failover{old: p}
	kill := time.Now()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return f, err
	}
	q, e2, err := o.waitPrimary(ctx, p)
	if err != nil {
		return f, err
	}
	if e2 <= e1 {
		return f, fmt.Errorf("epoch %d not above %d", e2, e1)
	}
	f.new, f.epoch = q, e2
	newMAC, err := o.mac(q.Index)
	if err != nil {
		return f, err
	}
	acting := logTimes(q.Log, kill, "primary: acting", "epoch="+strconv.FormatUint(e2, 10))
	if len(acting) == 0 {
		return f, fmt.Errorf("%s's log does not say it acts at epoch %d", q.Name, e2)
	}
	f.acting = acting[0].Sub(kill)
	// The silence lies between the fence and the new primary's address:
	// measure once replies come from the new primary (after it acts).
	for ctx.Err() == nil && pg.repliesAfter(acting[0]) < 5 {
		time.Sleep(20 * time.Millisecond)
	}
	if ctx.Err() != nil {
		return f, fmt.Errorf("the client's pings did not resume on %s: %w", q.Name, ctx.Err())
	}
	gap, resumed := pg.gap(kill)
	f.gap, f.killToOK = gap, resumed.Sub(kill)
	f.neighOK = o.clientNeigh() == newMAC
	// Power the old primary back on: a fresh machine rejoins as a
	// secondary and learns the epoch.
	o.c.BMCs[p.Index].SetPower(true)
	if err := o.m.Boot(p.Index); err != nil {
		return f, err
	}
	if !p.Running() {
		if err := p.Start(); err != nil {
			return f, err
		}
	}
	for ctx.Err() == nil {
		if st, err := p.Status(ctx); err == nil && st.Self.KnownEpoch >= e2 {
			return f, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return f, fmt.Errorf("%s did not rejoin: %w", p.Name, ctx.Err())
}

// TestFloatingIPFailoverNetns: the real Filesystem, IPaddr2 and Dummy
// agents on three fenced processes in network namespaces, default timings.
// A client on the same bridge pings the floating IP every 20ms through
// two SIGKILL failovers of the primary: at every sample the address and
// the filesystem are on at most one machine (and on exactly the primary's
// once it acts), the pings resume on the new primary, whose gratuitous ARP
// (send_arp) moved the client's neighbour entry; after the last failover
// the filesystem is clean (e2fsck -n). Needs root. About 40s.
func TestFloatingIPFailoverNetns(t *testing.T) {
	o := newOCFNet(t, config.Timing{}, 0)
	ctx := ctxT(t, 3*time.Minute)
	p, e, err := o.waitPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := o.sample()
	pg := o.ping(t)
	for ctx.Err() == nil && pg.repliesAfter(time.Now().Add(-time.Second)) < 10 {
		time.Sleep(20 * time.Millisecond)
	}
	for round := 1; round <= 2; round++ {
		// Something on the filesystem from this tenure, for fsck to check.
		if _, err := o.m.Exec(p.Index, "sh", "-c", fmt.Sprintf("dd if=/dev/urandom of=%s/tenure-%d bs=64k count=16 status=none && sync", o.mnt, e)); err != nil {
			t.Fatal(err)
		}
		f, err := o.killPrimary(ctx, pg, p, e)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("failover %d: %s → %s (epoch %d): client's pings silent %s, SIGKILL → pings answered %s, SIGKILL → primary acting %s; neighbour entry moved: %v",
			round, f.old.Name, f.new.Name, f.epoch, f.gap.Round(time.Millisecond), f.killToOK.Round(time.Millisecond), f.acting.Round(time.Millisecond), f.neighOK)
		if !f.neighOK {
			t.Errorf("the client's neighbour entry for %s is %q, not %s's MAC: no gratuitous ARP reached it", o.vip, o.clientNeigh(), f.new.Name)
		}
		p, e = f.new, f.epoch
	}
	samples, violations := s.Stop()
	if samples < 100 {
		t.Errorf("only %d samples", samples)
	}
	for _, v := range violations {
		t.Errorf("SAFETY: %s", v)
	}
	t.Logf("%d samples of the address and the mount on every machine", samples)
	pg.Stop()
	// Power everything off (the mounts go with the machines), then check
	// the filesystem the tenures wrote.
	o.c.Close()
	o.m.Close()
	if out, err := exec.Command("e2fsck", "-n", "-f", o.loop).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -n %s: %v\n%s", o.loop, err, out)
	}
}
