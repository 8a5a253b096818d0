package nemesis

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/storage/tokenstore"
	"github.com/fenced/fenced/harness/devcluster"
)

// Options describe one nemesis run.
type Options struct {
	Nodes  int   // 3 or 5
	Faults int   // how many faults to inject
	Seed   int64 // every random choice derives from it
	// Dir receives the configs, logs, the timeline and the summary; it
	// must exist and stay on the host (not on a tmpfs the nodes replace).
	Dir string
	// The binaries, absolute paths; Lab (fenced-lab, the token-checking
	// writer) defaults to fenced-lab beside Fenced.
	Fenced, Fencectl, Nemesis, Lab string
	// Timing of the cluster; zero means CITiming.
	Timing config.Timing
	// Kinds restricts the faults to these kinds (default: all that apply).
	Kinds []string
	// Escape is the negative control: the blind writer runs outside its
	// node's machine, so a power-off does not stop it.
	Escape bool
	// Tokens is the tokens profile: the storage checks tokens
	// (storage.checks_tokens) and is nothing but the token store (no
	// shared ext4; the writer writes its records only once the store
	// accepted them), and the last node has no fence topology, so a
	// takeover from it goes by lease expiry.
	Tokens bool
	// RecoveryTimeout bounds the wait for the cluster to serve again after
	// a fault is healed (default 90s).
	RecoveryTimeout time.Duration
	// Progress receives one line per fault; nil discards.
	Progress io.Writer
}

// CITiming is the CI profile: a 1.5s lease, as the daemon's cluster tests
// use on the same 2-core machines.
var CITiming = config.Timing{
	Heartbeat: config.Duration(150 * time.Millisecond), Lease: config.Duration(1500 * time.Millisecond),
	Margin: config.Duration(150 * time.Millisecond), Grace: config.Duration(1000 * time.Millisecond),
	FenceTimeout: config.Duration(5 * time.Second),
}

const mgmtHost = 254 // the switch's own address: BMCs and the store

// cluster is a running nemesis cluster.
type cluster struct {
	opts    Options
	timing  config.Timing
	net     *devcluster.Netns
	mgmt    string
	dc      *devcluster.Cluster
	nodes   []*node
	disk    *disk
	store   *tokenstore.Server
	escape  *escapeServer
	closers []func()
	obs     *observer
	tail    *blindTail

	evMu   sync.Mutex
	events []Event
	evFile *os.File
}

// Event is one thing the harness did or saw, for the timeline.
type Event struct {
	Time   time.Time `json:"t"`
	Kind   string    `json:"kind"` // power, pause, daemon, fault, heal, net, bmc, confirm, note
	Node   string    `json:"node,omitempty"`
	What   string    `json:"what"`
	Detail string    `json:"detail,omitempty"`
}

func (c *cluster) event(kind, node, what, detail string) {
	e := Event{Time: time.Now(), Kind: kind, Node: node, What: what, Detail: detail}
	c.evMu.Lock()
	defer c.evMu.Unlock()
	c.events = append(c.events, e)
	if c.evFile != nil {
		b, _ := json.Marshal(e)
		c.evFile.Write(append(b, '\n'))
	}
}

func (c *cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.opts.Dir}, elem...)...)
}

func (c *cluster) progress(format string, args ...any) {
	if c.opts.Progress != nil {
		fmt.Fprintf(c.opts.Progress, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}
}

// startCluster builds the namespaces, the disk, the store, the BMCs and
// the machines, and waits for a primary that writes.
func startCluster(ctx context.Context, o Options) (c *cluster, err error) {
	if o.Nodes != 3 && o.Nodes != 5 {
		return nil, fmt.Errorf("nemesis: %d nodes: want 3 or 5", o.Nodes)
	}
	c = &cluster{opts: o, timing: o.Timing}
	if c.timing == (config.Timing{}) {
		c.timing = CITiming
	}
	defer func() {
		if err != nil {
			c.close()
			c = nil
		}
	}()
	if c.evFile, err = os.Create(c.path("events.jsonl")); err != nil {
		return c, err
	}
	// Unique per run on a shared machine: namespaces, veths and the subnet.
	id := os.Getpid() % 10000
	prefix := fmt.Sprintf("nm%d", id)
	if c.net, err = devcluster.NewNetns(prefix, o.Nodes, id%200+20); err != nil {
		return c, err
	}
	c.closers = append(c.closers, c.net.Close)
	sw := c.net.Switch()
	subnet := c.net.Hosts[0][:len(c.net.Hosts[0])-len(".1")]
	c.mgmt = fmt.Sprintf("%s.%d", subnet, mgmtHost)
	if err := run("ip", "-n", sw, "addr", "add", c.mgmt+"/24", "dev", "br0"); err != nil {
		return c, err
	}
	// Slow links: a spare port on the bridge per node, and no offloads
	// anywhere, so frames carried through user space are complete.
	disableOffloads(sw, "br0")
	for i := range o.Nodes {
		free, bridged := spareNames(prefix, i)
		for _, step := range [][]string{
			{"ip", "-n", sw, "link", "add", free, "type", "veth", "peer", "name", bridged},
			{"ip", "-n", sw, "link", "set", bridged, "master", "br0", "up"},
			{"ip", "-n", sw, "link", "set", free, "up"},
		} {
			if err := run(step...); err != nil {
				return c, err
			}
		}
		for _, ifc := range []struct{ ns, name string }{{c.net.Name(i), "eth0"}, {sw, c.net.Veth(i)}, {sw, free}, {sw, bridged}} {
			if err := disableOffloads(ifc.ns, ifc.name); err != nil {
				return c, err
			}
		}
	}
	if c.disk, err = newDisk(c.path("disk.img"), 256); err != nil {
		return c, err
	}
	c.closers = append(c.closers, c.disk.Close)
	c.event("note", "", "disk", c.disk.Device+" ext4")

	if c.store, err = tokenstore.Start("127.0.0.1:0", c.path("store.log")); err != nil {
		return c, err
	}
	storeRelay, err := startTCPRelay(sw, net.JoinHostPort(c.mgmt, "8090"), c.store.URL[len("http://"):])
	if err != nil {
		return c, err
	}
	c.closers = append(c.closers, func() { storeRelay.Close(); c.store.Close() })

	hc := hookConfig{Dir: c.path("hooks"), NodesDir: c.path("nodes"), Nemesis: o.Nemesis, Lab: o.Lab,
		Blind: c.path("blind.log"), StoreURL: "http://" + net.JoinHostPort(c.mgmt, "8090"), Interval: "20ms"}
	if o.Tokens {
		hc.Shared = c.path("shared-records")
	}
	if o.Escape {
		hc.Escape = c.path("escape.sock")
		if c.escape, err = startEscapeServer(hc.Escape, o.Nemesis, c.path("escaped-writers.log")); err != nil {
			return c, err
		}
		c.closers = append(c.closers, c.escape.Close)
	}
	hooks, err := writeHooks(hc)
	if err != nil {
		return c, err
	}
	pwFile := c.path("bmc-password")
	if err := os.WriteFile(pwFile, []byte(devcluster.BMCPassword+"\n"), 0o600); err != nil {
		return c, err
	}
	for i := range o.Nodes {
		n := &node{i: i, name: fmt.Sprintf("node%d", i+1), ns: c.net.Name(i), ip: c.net.Hosts[i], cl: c,
			bmcKind: bmcKinds[i%len(bmcKinds)]}
		n.bmcPort = 6230 + i
		if n.bmcKind == bmcRedfish {
			n.bmcPort = 8440 + i
		}
		free, _ := spareNames(prefix, i)
		n.line = &delayLine{ns: sw, port: c.net.Veth(i), spare: free}
		if err := os.MkdirAll(c.path("nodes", n.name, "run"), 0o755); err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, n)
	}
	c.dc, err = devcluster.New(devcluster.Options{
		Nodes: o.Nodes, Dir: o.Dir, Bin: o.Fenced, Hosts: c.net.Hosts, Timing: c.timing, LogLevel: "info",
		Configure: func(cfg *config.Config) {
			cfg.Cluster.Name = "nemesis"
			cfg.Devices = map[string]config.Device{}
			for i, n := range c.nodes {
				dev := n.name + "-bmc"
				cfg.Devices[dev] = n.device(c.mgmt, pwFile)
				cfg.Nodes[i].Fence = []config.Level{{Devices: []config.DeviceRef{{Device: dev}}}}
			}
			cfg.Storage = config.Storage{
				Mount:           &config.Mount{Device: c.disk.Device, Mountpoint: c.path("mnt"), FSType: "ext4", Options: "noatime"},
				Hooks:           config.Hooks{Start: hooks.start, Stop: hooks.stop, Monitor: hooks.monitor},
				MonitorInterval: config.Duration(2 * c.timing.Heartbeat.D()),
			}
			if o.Tokens {
				cfg.Storage.Mount, cfg.Storage.ChecksTokens = nil, true
				cfg.Nodes[len(cfg.Nodes)-1].Fence = nil
			}
			cfg.History.Limit = config.MaxHistory // a long run (1,000 faults) records about 1,000
		},
	})
	if err != nil {
		return c, err
	}
	for i, n := range c.nodes {
		n.dn = c.dc.Nodes[i]
		n.specPath = c.path(n.name + ".machine.json")
		n.spec = MachineSpec{Node: n.name, Netns: n.ns, Log: n.dn.Log, RunDir: c.path("nodes", n.name, "run"), Self: o.Nemesis,
			Argv: []string{o.Fenced, "run", "--config", n.dn.Config, "--log-level", "info"}}
	}
	for _, n := range c.nodes {
		if err := n.startBMC(ctx, c.mgmt); err != nil {
			return c, fmt.Errorf("%s: %s BMC: %w", n.name, n.bmcKind, err)
		}
	}
	c.tail = newBlindTail(c.path("blind.log"))
	c.obs = newObserver(c)
	return c, nil
}

func (c *cluster) close() {
	if c.obs != nil {
		c.obs.stop()
	}
	if c.tail != nil {
		c.tail.stop()
	}
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		n.line.stop()
		wg.Add(1)
		go func() { defer wg.Done(); n.close() }()
	}
	wg.Wait()
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
	if c.evFile != nil {
		c.evFile.Close()
	}
}

func (c *cluster) byName(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// DefaultTiming is the daemon's default timing (lease 3s), for long runs.
func DefaultTiming() config.Timing { return config.Default().Timing }
