// Package devcluster runs a local cluster of real fenced processes on
// loopback: the demo and the multi-process tests drive it. Each node runs in
// its own process group so that a simulated power-off can kill the node and
// everything it started.
package devcluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fenced/fenced/agents/ipmi/ipmisim"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/apiclient"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/storage/tokenstore"
)

// Options describe the cluster.
type Options struct {
	Nodes int
	// Dir holds configs, data directories, sockets and logs.
	Dir string
	// Bin is the fenced binary; NodeBin, when set and not "", node i's
	// (a cluster of mixed versions). Node.SetBin swaps it between restarts.
	Bin     string
	NodeBin func(i int) string
	// Lab is the fenced-lab binary (the storage writer the nodes' hooks
	// run); default: fenced-lab beside Bin.
	Lab string
	// Host is the loopback address nodes bind (default 127.0.0.1). With
	// Hosts set, node i binds Hosts[i] instead (network namespaces).
	Host  string
	Hosts []string
	// Timing overrides the defaults when non-zero.
	Timing config.Timing
	// Configure adjusts the generated configuration (devices, storage).
	Configure func(c *config.Config)
	// Wrap, when set, returns the command line that starts node i's
	// process (e.g. prefixed with `ip netns exec NS`).
	Wrap func(i int, argv []string) []string
	// LogLevel of the nodes (default info).
	LogLevel string
	// BMC gives every node a simulated IPMI BMC whose power-off kills the
	// node (see startBMCs); each node is fenced through its BMC.
	BMC bool
	// BMCConfig adjusts node i's simulated BMC (its session slots, ...).
	BMCConfig func(i int, c *ipmisim.BMCConfig)
	// Store runs a token-checking storage stand-in; every node's storage
	// is a writer that writes to it with its epoch.
	Store bool
	// NodeConfig adjusts node i's own configuration file (e.g. a metrics
	// address of its own).
	NodeConfig func(i int, c *config.Config)
	// PowerOff runs after a simulated BMC's power-off killed node i (the
	// machine's own state goes: see Machines); PowerOn before its
	// power-on starts the node again.
	PowerOff func(i int)
	PowerOn  func(i int) error
}

// Cluster is a set of fenced processes.
type Cluster struct {
	Opts   Options
	Config *config.Config
	Nodes  []*Node
	// BMCs[i] is node i's simulated BMC when Options.BMC is set.
	BMCs []*ipmisim.BMC
	// Store is the storage stand-in when Options.Store is set; StoreLog
	// is its log of every write attempt.
	Store    *tokenstore.Server
	StoreLog string
}

// Node is one fenced process.
type Node struct {
	Index  int
	Name   string
	Config string // config file path
	Socket string
	Log    string // log file path
	// Env is added to the process environment at Start.
	Env []string
	cl  *Cluster

	mu   sync.Mutex
	bin  string // "" = Options.Bin
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// New writes the configuration of an n-node cluster; it starts nothing.
func New(o Options) (*Cluster, error) {
	if o.Nodes < 1 {
		return nil, errors.New("devcluster: need at least one node")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	c := &Cluster{Opts: o}
	cfg := config.Default()
	cfg.Version = 1
	cfg.Cluster.Name = "dev"
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	cfg.Gossip.KeyFile = filepath.Join(o.Dir, "gossip.key")
	if err := os.WriteFile(cfg.Gossip.KeyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	cfg.Timing = mergeTiming(cfg.Timing, o.Timing)
	used := map[int]bool{}
	for i := 0; i < o.Nodes; i++ {
		host, gp, rp := o.Host, 7946, 7947
		if len(o.Hosts) > i {
			// A namespace of its own: the standard ports are free there.
			host = o.Hosts[i]
		} else {
			var err error
			if gp, err = freshPort(host, used); err != nil {
				return nil, err
			}
			if rp, err = freshPort(host, used); err != nil {
				return nil, err
			}
		}
		cfg.Nodes = append(cfg.Nodes, config.Node{
			Name:   fmt.Sprintf("node%d", i+1),
			Gossip: net.JoinHostPort(host, strconv.Itoa(gp)),
			Raft:   net.JoinHostPort(host, strconv.Itoa(rp)),
		})
	}
	if o.BMC {
		if err := c.startBMCs(cfg); err != nil {
			return nil, err
		}
	}
	if o.Store {
		if err := c.startStore(cfg); err != nil {
			c.closeBMCs()
			return nil, err
		}
	}
	if o.Configure != nil {
		o.Configure(cfg)
	}
	c.Config = cfg
	for i, n := range cfg.Nodes {
		nd := &Node{Index: i, Name: n.Name, cl: c,
			Config: filepath.Join(o.Dir, n.Name+".yaml"),
			Socket: filepath.Join(o.Dir, n.Name+".sock"),
			Log:    filepath.Join(o.Dir, n.Name+".log")}
		if o.NodeBin != nil {
			nd.bin = o.NodeBin(i)
		}
		nc := *cfg
		nc.Node = n.Name
		nc.DataDir = filepath.Join(o.Dir, n.Name+"-data")
		nc.API.Socket = nd.Socket
		if o.NodeConfig != nil {
			o.NodeConfig(i, &nc)
		}
		if err := writeYAML(nd.Config, &nc); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, nd)
	}
	return c, nil
}

func mergeTiming(base, over config.Timing) config.Timing {
	if over.Heartbeat > 0 {
		base.Heartbeat = over.Heartbeat
	}
	if over.Lease > 0 {
		base.Lease = over.Lease
	}
	if over.Margin > 0 {
		base.Margin = over.Margin
	}
	if over.Grace > 0 {
		base.Grace = over.Grace
	}
	if over.FenceTimeout > 0 {
		base.FenceTimeout = over.FenceTimeout
	}
	return base
}

func writeYAML(path string, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// freshPort is FreePort, never twice the same port for one cluster (a port
// found free is free until someone binds it).
func freshPort(host string, used map[int]bool) (int, error) {
	for {
		p, err := FreePort(host)
		if err != nil || !used[p] {
			used[p] = true
			return p, err
		}
	}
}

// FreePort returns a port free for both TCP and UDP on host (memberlist
// binds both).
func FreePort(host string) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errors.New("devcluster: no free port")
}

// Start starts every node.
func (c *Cluster) Start() error {
	for _, n := range c.Nodes {
		if err := n.Start(); err != nil {
			return err
		}
	}
	return nil
}

// LeakedSecrets returns the node logs that contain the simulated BMCs'
// password: there must be none.
func (c *Cluster) LeakedSecrets() []string {
	var leaks []string
	for _, n := range c.Nodes {
		if b, err := os.ReadFile(n.Log); err == nil && strings.Contains(string(b), BMCPassword) {
			leaks = append(leaks, n.Log)
		}
	}
	return leaks
}

// Close kills every node still running and stops the simulated BMCs.
func (c *Cluster) Close() {
	c.closeBMCs()
	for _, n := range c.Nodes {
		n.Kill()
	}
	if c.Store != nil {
		c.Store.Close()
		c.Store = nil
	}
}

// Start starts the node's process (in a new process group), appending its
// output to its log.
func (n *Node) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		select {
		case <-n.done:
		default:
			return fmt.Errorf("%s already running", n.Name)
		}
	}
	logf, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	bin := n.bin
	if bin == "" {
		bin = n.cl.Opts.Bin
	}
	argv := []string{bin, "run", "--config", n.Config, "--log-level", n.cl.Opts.LogLevel}
	if n.cl.Opts.Wrap != nil {
		argv = n.cl.Opts.Wrap(n.Index, argv)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(n.Env) > 0 {
		cmd.Env = append(os.Environ(), n.Env...)
	}
	// A session of its own: everything the node starts (storage hooks
	// put their children in process groups of their own) stays in it, so
	// a simulated power-off or pause reaches all of it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	n.cmd = cmd
	n.done = make(chan struct{})
	done := n.done
	go func() {
		err := cmd.Wait()
		logf.Close()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		close(done)
	}()
	return nil
}

// SetBin makes the node's next Start run the fenced binary at path (""
// = Options.Bin): an upgrade or a downgrade of the node between a stop and
// a start. The running process, if any, is not touched.
func (n *Node) SetBin(path string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.bin = path
}

// Bin is the fenced binary the node's next Start runs.
func (n *Node) Bin() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.bin == "" {
		return n.cl.Opts.Bin
	}
	return n.bin
}

// Pid returns the process id (0 if never started).
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Running reports whether the process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to every process of the node's session: the node as a
// machine (the daemon and whatever its storage runs).
func (n *Node) Signal(sig syscall.Signal) error {
	pid := n.Pid()
	if pid == 0 {
		return fmt.Errorf("%s not started", n.Name)
	}
	pids := sessionPids(pid)
	if len(pids) == 0 {
		pids = []int{pid}
	}
	var errs []error
	for _, p := range pids {
		if err := syscall.Kill(p, sig); err != nil && err != syscall.ESRCH {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sessionPids lists the processes whose session id is sid.
func sessionPids(sid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces): state,
		// ppid, pgrp, session, ...
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 3 && f[3] == strconv.Itoa(sid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Kill is a power-off: SIGKILL to the process group, then wait.
func (n *Node) Kill() {
	if !n.Running() {
		return
	}
	_ = n.Signal(syscall.SIGKILL)
	n.Wait(5 * time.Second)
}

// Wait waits up to d for the process to exit and reports whether it did.
func (n *Node) Wait(d time.Duration) bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// ExitErr is the process's exit error after it ended.
func (n *Node) ExitErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// Status asks the node's API for its status.
func (n *Node) Status(ctx context.Context) (api.Status, error) {
	var st api.Status
	c := apiclient.New(n.Socket)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := c.Do(ctx, "GET", "/v1/status", nil, nil, &st)
	return st, err
}

// Client returns an API client for the node.
func (n *Node) Client() *apiclient.Client { return apiclient.New(n.Socket) }

// Other returns a node that is none of skip (the last such in Nodes), or
// nil.
func (c *Cluster) Other(skip ...*Node) *Node {
	var other *Node
	for _, n := range c.Nodes {
		if !contains(skip, n) {
			other = n
		}
	}
	return other
}

// Primary polls the running nodes until exactly one reports that it is
// acting as primary with a lease, and returns it with its epoch. Nodes in
// skip are not asked (e.g. a paused one).
func (c *Cluster) Primary(ctx context.Context, skip ...*Node) (*Node, uint64, error) {
	for {
		var found []*Node
		var epoch uint64
		for _, n := range c.Nodes {
			if contains(skip, n) || !n.Running() {
				continue
			}
			st, err := n.Status(ctx)
			if err == nil && st.Self.Acting {
				found = append(found, n)
				epoch = st.Self.Epoch
			}
		}
		if len(found) == 1 {
			return found[0], epoch, nil
		}
		if len(found) > 1 {
			names := ""
			for _, f := range found {
				names += " " + f.Name
			}
			return nil, 0, fmt.Errorf("more than one node acting as primary:%s", names)
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("no primary: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func contains(ns []*Node, n *Node) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}
