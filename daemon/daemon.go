package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
)

// Roles a node reports.
const (
	RoleSecondary    = "secondary"
	RolePrimaryElect = "primary-elect" // raft leader with an epoch, not yet allowed to act
	RolePrimary      = "primary"
	RoleDemoting     = "demoting"
	RoleStopping     = "stopping"
)

// Resource is what the primary runs (the storage). Implementations receive
// the epoch as the fencing token.
type Resource interface {
	Start(ctx context.Context, epoch uint64, previous string) error
	Stop(ctx context.Context) error
	// Monitor returns an error when the resource is unhealthy; the primary
	// then releases it cleanly so another node takes over without fencing.
	Monitor(ctx context.Context) error
}

// Fencer fences a node for a takeover: powers it off through its topology,
// confirms by read-back and commits the record. It returns nil only on a
// confirmed fence.
type Fencer interface {
	Fence(ctx context.Context, target, reason string, epoch uint64) error
}

// Options are the parts of a Daemon that tests and the demo inject.
type Options struct {
	Logger *slog.Logger
	// Resource runs the storage; nil means no storage is configured.
	Resource Resource
	// Fencer fences previous holders; nil means the stonith engine over the
	// configured topology.
	Fencer Fencer
	// Registry resolves agents; nil means agents.Default.
	Registry *agents.Registry
	// SelfFence resets this node when a demotion cannot finish in time.
	SelfFence func(reason string)
	// Raft carries test-only raft settings: Transport replaces the TCP
	// transport, InMemory keeps the log in memory (in-process tests).
	Raft quorum.RaftOptions
	// GossipTransport replaces memberlist's transport (in-process tests).
	GossipTransport memberlist.Transport
	// Notify receives lifecycle notifications (systemd): "READY=1", ...
	Notify func(state string)
	// WatchdogInterval is the service manager's watchdog timeout (systemd
	// WATCHDOG_USEC); 0 disables WATCHDOG=1 pings.
	WatchdogInterval time.Duration
}

// Daemon is one fenced node.
type Daemon struct {
	cfg  *config.Config
	self string
	log  *slog.Logger
	opts Options

	raft    *quorum.Raft
	members *quorum.Membership
	apiLn   net.Listener
	api     *http.Server

	// Lease state, on the boot-time clock.
	leaseUntil atomic.Int64 // quorum.Mono; 0 = no lease
	role       atomic.Value // string
	epoch      atomic.Uint64
	storage    atomic.Value // string

	wg       sync.WaitGroup
	stopping atomic.Bool
	fenceMu  sync.Mutex // one fence per target at a time (see stonith)
	started  quorum.Mono

	engine       *stonith.Engine
	engineFencer *engineFencer
	metrics      *metrics
	metricsLn    net.Listener
	metricsSrv   *http.Server

	// Graceful handover: where leadership goes after the release ("" =
	// raft's choice), and the cancel of the current tenure.
	lastBeat   atomic.Int64 // quorum.Mono of the main loop's last progress
	stallAfter time.Duration
	stalled    atomic.Bool

	handoffMu    sync.Mutex
	handoffTo    *string
	tenureCancel context.CancelCauseFunc
}

// New opens every subsystem: the raft log and transport, gossip, the API
// socket. Errors name the address or path at fault.
func New(cfg *config.Config, opts Options) (*Daemon, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{cfg: cfg, self: cfg.Node, log: log.With("node", cfg.Node), opts: opts, started: quorum.Now(), stallAfter: stallFromEnv()}
	d.lastBeat.Store(int64(d.started))
	d.role.Store(RoleSecondary)
	d.storage.Store("stopped")
	if opts.SelfFence == nil {
		d.opts.SelfFence = func(reason string) { selfFence(cfg.Watchdog.Device, d.log, reason) }
	}
	peers := peersOf(cfg)
	// The cluster key encrypts gossip and roots raft's mutual TLS.
	var key []byte
	if cfg.Gossip.KeyFile != "" {
		var err error
		if key, err = quorum.ReadKey(cfg.Gossip.KeyFile); err != nil {
			return nil, err
		}
	}
	reg := opts.Registry
	if reg == nil {
		reg = agents.Default
	}
	d.engine = stonith.NewEngine(reg, d.log.With("component", "stonith"))
	d.engine.DefaultTimeout = cfg.Timing.FenceTimeout.D()
	d.engineFencer = &engineFencer{d: d, engine: d.engine}
	if d.opts.Fencer == nil {
		d.opts.Fencer = d.engineFencer
	}
	d.metrics = newMetrics(d)
	if d.opts.Resource == nil {
		// The resource group: resources, or the storage shorthand.
		g, err := newResourceGroup(cfg, d)
		if err != nil {
			return nil, err
		}
		if g != nil {
			d.opts.Resource = g
		}
	}
	if cfg.Metrics.Listen != "" {
		ml, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err != nil {
			return nil, fmt.Errorf("metrics.listen %s: %w", cfg.Metrics.Listen, err)
		}
		d.metricsLn = ml
	}

	ln, err := listenAPI(cfg.API.Socket, cfg.API.Group)
	if err != nil {
		if d.metricsLn != nil {
			d.metricsLn.Close()
		}
		return nil, err
	}
	d.apiLn = ln

	ro := opts.Raft
	ro.Self, ro.Peers, ro.DataDir = cfg.Node, peers, cfg.DataDir
	ro.Key, ro.Cluster = key, cfg.Cluster.Name
	ro.Lease, ro.HistoryLimit, ro.Logger = cfg.Timing.Lease.D(), cfg.History.Limit, d.log.With("component", "raft")
	r, err := quorum.OpenRaft(ro)
	if err != nil {
		ln.Close()
		return nil, err
	}
	d.raft = r
	m, err := quorum.JoinMembership(quorum.MembershipOptions{
		Self: cfg.Node, Peers: peers, Key: key, Transport: opts.GossipTransport,
		Logger: d.log, Handler: d.handleForward,
	}, d.meta())
	if err != nil {
		r.Shutdown()
		ln.Close()
		return nil, err
	}
	d.members = m
	d.api = &http.Server{Handler: d.apiHandler(), ReadHeaderTimeout: 5 * time.Second, ConnContext: peerContext}
	return d, nil
}

func peersOf(cfg *config.Config) []quorum.Peer {
	peers := make([]quorum.Peer, len(cfg.Nodes))
	for i, n := range cfg.Nodes {
		peers[i] = quorum.Peer{Name: n.Name, Raft: n.Raft, Gossip: n.Gossip}
	}
	return peers
}

// Run serves until ctx is done, then stops gracefully: releases the
// storage, hands primacy to another node, leaves gossip. It returns nil
// after a graceful stop.
func (d *Daemon) Run(ctx context.Context) error {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := d.api.Serve(d.apiLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("api server", "err", err)
		}
	}()
	loopCtx, cancelLoop := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		d.controlLoop(loopCtx)
	}()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.metaLoop(loopCtx)
	}()
	if d.metricsLn != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.serveMetrics(d.metricsLn)
		}()
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.lifecycle(loopCtx)
	}()
	if d.cfg.Gossip.Plaintext {
		d.log.Warn("gossip is not encrypted or authenticated (gossip.plaintext): anyone on the network can forge cluster messages")
	}
	d.log.Info("fenced started", "version", Version, "nodes", len(d.cfg.Nodes), "majority", d.cfg.Majority())

	<-ctx.Done()
	d.log.Info("stopping: releasing primacy, leaving the cluster")
	d.notify("STOPPING=1")
	d.stopping.Store(true)
	d.role.Store(RoleStopping)
	// The control loop demotes (stops the storage, commits the release)
	// when its context ends.
	cancelLoop()
	<-loopDone
	if d.raft.IsLeader() {
		if err := d.raft.TransferLeadership(); err != nil {
			d.log.Warn("leadership transfer", "err", err)
		}
	}
	d.SetMetaNow()
	errs := []error{d.members.Leave(2 * time.Second)}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	errs = append(errs, d.api.Shutdown(sctx))
	if d.metricsSrv != nil {
		errs = append(errs, d.metricsSrv.Shutdown(sctx))
	} else if d.metricsLn != nil {
		d.metricsLn.Close()
	}
	errs = append(errs, d.raft.Shutdown())
	d.wg.Wait()
	os.Remove(d.cfg.API.Socket)
	d.log.Info("fenced stopped")
	return errors.Join(errs...)
}

// Close stops everything at once without handing anything off (hard stop,
// and cleanup in tests).
func (d *Daemon) Close() error {
	d.stopping.Store(true)
	errs := []error{d.members.Shutdown(), d.api.Close(), d.raft.Shutdown()}
	if d.metricsSrv != nil {
		errs = append(errs, d.metricsSrv.Close())
	}
	os.Remove(d.cfg.API.Socket)
	return errors.Join(errs...)
}

// Name is this node's name.
func (d *Daemon) Name() string { return d.self }

// Role returns this node's current role.
func (d *Daemon) Role() string { return d.role.Load().(string) }

// Acting reports whether this node may act as primary right now: it holds
// an epoch, passed the takeover gate, and its lease (last confirmed
// majority contact + lease − margin) has not run out on the boot-time
// clock. Anything the primary does is guarded by this check, so a process
// resumed from a pause re-checks before doing anything.
func (d *Daemon) Acting() bool {
	return d.Role() == RolePrimary && quorum.Now() < quorum.Mono(d.leaseUntil.Load())
}

// Epoch returns the epoch this node holds as primary(-elect), or 0.
func (d *Daemon) Epoch() uint64 { return d.epoch.Load() }

// KnownEpoch is the highest epoch this node knows of.
func (d *Daemon) KnownEpoch() uint64 { return d.raft.FSM().State().Epoch }

func (d *Daemon) meta() quorum.Meta {
	m := quorum.Meta{Role: d.Role(), Storage: d.storage.Load().(string), Version: Version}
	if d.raft != nil {
		m.Epoch = d.raft.FSM().State().Epoch
		m.Raft = d.raft.RaftState()
	}
	return m
}

// SetMetaNow pushes this node's advertised state.
func (d *Daemon) SetMetaNow() {
	if d.members != nil {
		d.members.SetMeta(d.meta())
	}
}

func (d *Daemon) metaLoop(ctx context.Context) {
	// Role changes push the metadata themselves; this catches the rest.
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		d.SetMetaNow()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.raft.FSM().Changed():
		}
	}
}

func (d *Daemon) handleForward(ctx context.Context, from, method string, body []byte) ([]byte, error) {
	return d.forwarded(ctx, from, method, body)
}
