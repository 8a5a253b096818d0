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
	"github.com/fenced/fenced/daemon/alerts"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/driver"
	"github.com/fenced/fenced/daemon/health"
	"github.com/fenced/fenced/daemon/logring"
	"github.com/fenced/fenced/daemon/tenure"
	"github.com/fenced/fenced/daemon/unfence"
	"github.com/fenced/fenced/daemon/watchdog"
	"github.com/fenced/fenced/quorum"
	"github.com/fenced/fenced/stonith"
	"github.com/fenced/fenced/stonith/fencing"
)

// Roles a node reports (see package tenure).
const (
	RoleSecondary    = tenure.RoleSecondary
	RolePrimaryElect = tenure.RolePrimaryElect // holds an epoch, not yet allowed to act
	RolePrimary      = tenure.RolePrimary
	RoleDemoting     = tenure.RoleDemoting
	RoleStopping     = tenure.RoleStopping
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

// Options are the parts of a Daemon that tests and the demo inject.
type Options struct {
	Logger *slog.Logger
	// LogRing holds the Logger's recent lines, for the diagnostics
	// bundle when there is no journal (nil: the bundle has no log).
	LogRing *logring.Ring
	// Resource runs the storage; nil means no storage is configured.
	Resource Resource
	// Registry resolves agents; nil means agents.Default.
	Registry *agents.Registry
	// SelfFence resets this node when a demotion cannot finish in time; it
	// reports false when no reset is under way (no watchdog, sysrq
	// refused).
	SelfFence func(reason string) (resetting bool)
	// Exit ends the process after a self-fence that could not reset the
	// node (default: exit status 70, so the service manager restarts it).
	Exit func(reason string)
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
	self string
	log  *slog.Logger
	opts Options
	// cfg is the configuration the daemon started with. Read from it only
	// what a reload cannot change (config.RestartNeeded: the node list and
	// addresses, timing, storage, paths); what can (devices, fence
	// topologies, alerts) is read from config(), the current one.
	cfg  *config.Config
	conf confState

	raft     *quorum.Raft
	members  *quorum.Membership
	detector *quorum.Detector
	alerts   *alerts.Manager
	metrics  *metrics

	ctl   control   // the tenure's control loop (control.go)
	wdog  wdogState // the watchdog (watchdog.go)
	fence fenceSide // fencing others: engine, device checks, unfencing
	srv   servers   // the API socket and the metrics endpoint
	life  lifetime  // start, hard stop and the tasks that end with it

	reportMu sync.Mutex // one diagnostics part built at a time (report.go)
}

// confState is the configuration as it changes at run time (reload.go,
// clusterconfig.go).
type confState struct {
	// base is the configuration as loaded (its storage monitor interval
	// is adjusted to the resource group's): what a reload is compared
	// with.
	base *config.Config
	live atomic.Pointer[config.Config]
	// own is the fingerprint of this node's cluster-wide configuration.
	own      atomic.Pointer[ownConfig]
	reloadMu sync.Mutex // one reload at a time
	cw       configWatch
}

// control is the tenure's side: the control loop owns the driver (drv,
// loop goroutine only), runs what is sent on calls and publishes view.
type control struct {
	drv      *driver.Driver
	view     atomic.Pointer[machineSnapshot]
	calls    chan func()
	loopDone chan struct{}
	nudge    chan struct{} // wakes the loop (eligibility changed)
	changes  *changeLog    // records elections and primacy (changes.go)
	boot     string        // this machine's boot ID

	ineligibleMu sync.Mutex
	ineligible   map[string]string // source → why this node may not take primacy
	// keptLeadership: the last transfer found no node that may hold
	// primacy, and leadership stayed here (logged once).
	keptLeadership atomic.Bool
}

// wdogState is the watchdog device, armed while this node may hold the
// storage.
type wdogState struct {
	mu  sync.Mutex
	dev *watchdog.Device
	why string // why it is (not) advertised, for status
}

// fenceSide is what fences other nodes.
type fenceSide struct {
	engine    *stonith.Engine
	health    *health.Checker   // fence device checks (devicehealth.go)
	devAlerts deviceAlerts      // alerts of device health changes (alerting.go)
	unfence   *unfence.Unfencer // unfencing at start (unfencing.go)
	// leftOpen are the sessions the last daemon left open on devices,
	// closed at Run (sessions.go).
	leftOpen *leftOpen
}

// servers are the daemon's listeners.
type servers struct {
	apiLn      net.Listener
	api        *http.Server
	metricsLn  net.Listener
	metricsSrv *http.Server
}

// lifetime is the daemon's own life: when it started, its hard stop, the
// tasks that end with it and the main loop's heartbeat (faults.go).
type lifetime struct {
	// hardCtx ends at a hard stop; everything the daemon starts ends with it.
	hardCtx    context.Context
	hardCancel context.CancelFunc
	tasks      taskGroup

	// dataDir is the lock on data_dir, held until the daemon stops.
	dataDir *dataDirLock

	stopping   atomic.Bool
	started    quorum.Mono
	lastBeat   atomic.Int64 // quorum.Mono of the main loop's last progress
	joined     atomic.Int64 // quorum.Mono of joining the cluster; 0 before (lifecycle.go)
	ready      atomic.Bool  // joined, and sessions opened (lifecycle.go)
	stallAfter time.Duration

	selfStopState
	// halt is closed when the state machine halted (haltLoop): Run stops
	// and returns halted.
	halt     chan struct{}
	haltOnce sync.Once
	halted   atomic.Pointer[quorum.HaltError]
}

// New opens every subsystem: the raft log and transport, gossip, the API
// socket. Errors name the address or path at fault. The data directory is
// locked first, so that a second daemon on it is refused before it touches
// anything, with the first one's PID.
func New(cfg *config.Config, opts Options) (*Daemon, error) {
	var lock *dataDirLock
	if !opts.Raft.InMemory {
		var err error
		if lock, err = lockDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	d, err := open(cfg, opts)
	if err != nil {
		lock.release()
		return nil, err
	}
	d.life.dataDir = lock
	return d, nil
}

// open is New once the data directory is locked.
func open(cfg *config.Config, opts Options) (*Daemon, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{cfg: cfg, self: cfg.Node, log: log.With("node", cfg.Node), opts: opts,
		life: lifetime{started: quorum.Now(), stallAfter: stallFromEnv(), selfStopState: selfStopState{selfStop: make(chan struct{})}, halt: make(chan struct{})},
		ctl: control{calls: make(chan func(), 64), loopDone: make(chan struct{}),
			nudge: make(chan struct{}, 1), ineligible: map[string]string{}}}
	d.life.hardCtx, d.life.hardCancel = context.WithCancel(context.Background())
	d.ctl.changes = newChangeLog(d)
	base := *cfg
	d.conf.base = &base
	d.conf.live.Store(cfg)
	d.setOwnConfig(cfg)
	// Not eligible before its configuration was compared with the
	// cluster's (configLoop's first step, at Run).
	d.conf.cw.selfReason = "configuration not compared with the cluster's yet"
	d.ctl.ineligible["config"] = d.conf.cw.selfReason
	d.life.lastBeat.Store(int64(d.life.started))
	d.ctl.view.Store(&machineSnapshot{role: RoleSecondary, storage: tenure.StorageStopped})
	if opts.SelfFence == nil {
		d.opts.SelfFence = d.selfFence
	}
	if opts.Exit == nil {
		d.opts.Exit = func(string) { os.Exit(exitSelfFenceFailed) }
	}
	d.ctl.boot = readBootID(d.log)
	reset := d.opts.SelfFence
	d.opts.SelfFence = func(reason string) bool {
		// Started, not waited for: the reset must not wait for an alert.
		d.alertSelfFence(reason)
		return reset(reason)
	}
	peers := peersOf(cfg)
	keys, err := clusterKeys(cfg)
	if err != nil {
		return nil, err
	}
	d.fence.engine = stonith.NewEngine(d.registry(), d.log.With("component", "stonith"))
	d.fence.engine.DefaultTimeout = cfg.Timing.FenceTimeout.D()
	d.metrics = newMetrics(scrape{status: d.StatusNow, devices: func() []health.Health { return d.fence.health.All() },
		history: func() []fencing.Record { return d.raft.FSM().State().History }, resources: d.resourceStatus})
	d.alerts = newAlerts(cfg, d.log, d.metrics)
	d.fence.health = newDeviceChecker(cfg, d.log, d.fence.engine, d.deviceChecked, d.wantWarm, func(string) { d.nudgeControl() }, d.closeLeft)
	// A fence or unfence read back is a check of its device: status must
	// not call a device that just worked unreachable (issue 24).
	d.fence.engine.Confirmed = func(device string, started time.Time, took time.Duration) {
		d.fence.health.Record(device, started, took, nil, false)
	}
	d.fence.unfence = newUnfencer(cfg, d.registry(), d.fence.engine, d.KnownEpoch)
	self, _ := cfg.NodeByName(cfg.Node)
	if d.opts.Resource == nil && !self.Witness() {
		// The resource group: resources, or the storage shorthand (a
		// witness runs none).
		g, err := newResourceGroup(cfg, d.log)
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
		d.srv.metricsLn = ml
	}

	ln, err := listenAPI(cfg.API.Socket, cfg.API.Group)
	if err != nil {
		if d.srv.metricsLn != nil {
			d.srv.metricsLn.Close()
		}
		return nil, err
	}
	d.srv.apiLn = ln

	ro := opts.Raft
	if !ro.InMemory {
		if err := d.openIncarnation(cfg, &ro); err != nil {
			closeListenersEarly(ln, d.srv.metricsLn)
			return nil, err
		}
	}
	ro.Self, ro.Peers, ro.DataDir = cfg.Node, peers, cfg.DataDir
	ro.Keys, ro.Cluster = keys, cfg.Cluster.Name
	ro.HeartbeatTimeout = cfg.Timing.Tenure().Raft().HeartbeatTimeout
	ro.HistoryLimit, ro.Logger = cfg.History.Limit, d.log.With("component", "raft")
	closeListeners := func() {
		ln.Close()
		if d.srv.metricsLn != nil {
			d.srv.metricsLn.Close()
		}
	}
	r, err := quorum.OpenRaft(ro)
	if err != nil {
		closeListeners()
		return nil, err
	}
	d.raft = r
	// The raft log holds data_dir: no other daemon writes the journal.
	d.fence.leftOpen = openSessionJournal(cfg, ro.InMemory, d.fence.engine, d.log.With("component", "sessions"))
	m, err := quorum.JoinMembership(quorum.MembershipOptions{
		Self: cfg.Node, Peers: peers, Keys: keys, Transport: opts.GossipTransport,
		Logger: d.log, Handler: d.handleForward,
	}, d.meta())
	if err != nil {
		r.Shutdown()
		closeListeners()
		return nil, err
	}
	d.members = m
	// A node declared gone, started again on its data while the newer
	// voting set runs: gossip's join already brought that set's
	// advertisements; it stops before its control loop runs at all.
	if err := d.checkSuperseded(); err != nil {
		m.Shutdown()
		r.Shutdown()
		closeListeners()
		return nil, err
	}
	rt := cfg.Timing.Tenure().Raft()
	det, err := quorum.StartDetector(r, m, quorum.DetectorOptions{Detect: rt.Detect, Stagger: rt.Stagger, Log: d.log,
		Majority: cfg.Majority(),
		Order:    func(leader string) []string { return rankOrder(cfg, r.FSM().Holders().Standby, leader) }})
	if err != nil {
		m.Shutdown()
		r.Shutdown()
		closeListeners()
		return nil, err
	}
	d.detector = det
	d.srv.api = d.newAPIServer()
	if d.srv.metricsLn != nil {
		// The port is reachable from the network: cap its connections as
		// the API socket's, so a flood cannot take the daemon's descriptors.
		d.srv.metricsLn = newCapListener(d.srv.metricsLn, apiMaxConns)
		d.srv.metricsSrv = d.newMetricsServer()
	}
	return d, nil
}

// clusterKeys are the cluster keys of gossip.key_file, the primary first
// (nil in plaintext): they encrypt gossip and root raft's mutual TLS. A
// reload reads them again (reloadKeys).
func clusterKeys(cfg *config.Config) ([][]byte, error) {
	if cfg.Gossip.KeyFile == "" {
		return nil, nil
	}
	return quorum.ReadKeys(cfg.Gossip.KeyFile)
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
// after a graceful stop. After Close (a hard stop) it returns at once.
func (d *Daemon) Run(ctx context.Context) error {
	d.life.tasks.Go(func() {
		if err := d.srv.api.Serve(d.srv.apiLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("api server", "err", err)
		}
	})
	stopLoop := make(chan struct{})
	d.life.tasks.Go(func() { d.controlLoop(d.life.hardCtx, stopLoop) })
	d.life.tasks.Go(func() { d.metaLoop(d.ctl.loopDone) })
	d.life.tasks.Go(func() { d.ctl.changes.run(d.life.hardCtx.Done()) })
	d.life.tasks.Go(func() { d.fence.health.Run(d.life.hardCtx) })
	d.life.tasks.Go(func() { d.closeUnwatched(d.life.hardCtx) })
	d.life.tasks.Go(func() { d.warmLoop(d.ctl.loopDone) })
	d.life.tasks.Go(func() { d.alerts.Run(d.life.hardCtx) })
	d.life.tasks.Go(func() { d.configLoop(d.ctl.loopDone) })
	d.life.tasks.Go(func() { d.quorumLoop(d.ctl.loopDone) })
	if d.srv.metricsSrv != nil {
		d.life.tasks.Go(func() {
			if err := d.srv.metricsSrv.Serve(d.srv.metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("metrics server", "err", err)
			}
		})
	}
	d.life.tasks.Go(func() { d.lifecycle(d.ctl.loopDone) })
	d.life.tasks.Go(func() { d.haltLoop(d.ctl.loopDone) })
	if d.cfg.Gossip.Plaintext {
		d.log.Warn("gossip is not encrypted or authenticated (gossip.plaintext): anyone on the network can forge cluster messages")
	}
	d.log.Info("fenced started", "version", api.Version, "nodes", len(d.cfg.Nodes), "majority", d.cfg.Majority())

	select {
	case <-ctx.Done():
	case <-d.life.selfStop:
		d.log.Error("stopping on its own", "err", d.life.selfStopErr)
	case <-d.life.halt:
	case <-d.life.hardCtx.Done():
		// Close: a hard stop; it shuts everything down itself.
		<-d.ctl.loopDone
		d.life.tasks.Stop()
		return nil
	}
	d.log.Info("stopping: releasing primacy, leaving the cluster")
	d.notify("STOPPING=1")
	d.life.stopping.Store(true)
	// The control loop demotes (stops the storage, commits the release)
	// and ends.
	close(stopLoop)
	<-d.ctl.loopDone
	if d.raft.IsLeader() {
		if err := d.raft.TransferLeadership(); err != nil {
			d.log.Warn("leadership transfer", "err", err)
		}
	}
	d.SetMetaNow()
	d.detector.Stop()
	errs := []error{d.members.Leave(2 * time.Second)}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	errs = append(errs, d.srv.api.Shutdown(sctx))
	if d.srv.metricsSrv != nil {
		errs = append(errs, d.srv.metricsSrv.Shutdown(sctx))
	}
	d.life.hardCancel()
	errs = append(errs, d.raft.Shutdown())
	d.life.tasks.Stop()
	os.Remove(d.cfg.API.Socket)
	d.life.dataDir.release()
	d.log.Info("fenced stopped")
	if h := d.life.halted.Load(); h != nil {
		return fmt.Errorf("%w: %w", ErrHalted, h)
	}
	select {
	case <-d.life.selfStop:
		errs = append([]error{d.life.selfStopErr}, errs...)
	default:
	}
	return errors.Join(errs...)
}

// Close stops everything at once without handing anything off (hard stop,
// and cleanup in tests). A running Run returns.
func (d *Daemon) Close() error {
	d.life.stopping.Store(true)
	d.life.hardCancel()
	d.detector.Stop()
	errs := []error{d.members.Shutdown(), d.srv.api.Close(), d.raft.Shutdown()}
	if d.srv.metricsSrv != nil {
		errs = append(errs, d.srv.metricsSrv.Close())
	} else if d.srv.metricsLn != nil {
		d.srv.metricsLn.Close()
	}
	os.Remove(d.cfg.API.Socket)
	d.life.dataDir.release()
	return errors.Join(errs...)
}

// registry resolves agents: the injected one, else agents.Default.
func (d *Daemon) registry() *agents.Registry {
	if d.opts.Registry != nil {
		return d.opts.Registry
	}
	return agents.Default
}

// config is the configuration in force: the one loaded at start, or
// since the last reload.
func (d *Daemon) config() *config.Config { return d.conf.live.Load() }

// Name is this node's name.
func (d *Daemon) Name() string { return d.self }

// Role returns this node's current role.
func (d *Daemon) Role() string {
	if d.life.stopping.Load() && d.ctl.view.Load().role == RoleSecondary {
		return RoleStopping
	}
	return d.ctl.view.Load().role
}

// Acting reports whether this node may act as primary right now: it holds
// an epoch, passed the takeover gate, and its lease (last confirmed
// majority contact + lease − margin) has not run out on the boot-time
// clock. Anything the primary does is guarded by this check, so a process
// resumed from a pause re-checks before doing anything.
func (d *Daemon) Acting() bool {
	v := d.ctl.view.Load()
	return v.phase == tenure.Serving && d.now() < v.actingUntil
}

// LeaseLeft is what remains of this node's right to act (0 without one).
func (d *Daemon) LeaseLeft() time.Duration {
	v := d.ctl.view.Load()
	if v.epoch == 0 || v.actingUntil == 0 {
		return 0
	}
	return max(v.actingUntil.Sub(d.now()), 0)
}

// Storage is the storage's state on this node: stopped, starting,
// running, stopping or failed.
func (d *Daemon) Storage() string { return d.ctl.view.Load().storage }

// Epoch returns the epoch this node holds as primary(-elect), or 0.
func (d *Daemon) Epoch() uint64 { return d.ctl.view.Load().epoch }

// KnownEpoch is the highest epoch this node knows of.
func (d *Daemon) KnownEpoch() uint64 { return d.raft.FSM().Holders().Epoch }

func (d *Daemon) meta() quorum.Meta {
	m := quorum.Meta{Role: d.Role(), Storage: d.Storage(), Version: api.Version, Config: d.conf.own.Load().hash, Boot: d.ctl.boot,
		Ineligible: d.Ineligible() != "", Resources: resourceLetters(d.resourceStatus()), Incarnation: d.life.incarnation}
	if d.raft != nil {
		m.Epoch = d.raft.FSM().Holders().Epoch
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

func (d *Daemon) metaLoop(done <-chan struct{}) {
	// Role changes push the metadata themselves; this catches the rest:
	// the epoch, raft's state (a change of leader) and, every 5 s, anything
	// else.
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	// Every second: a newer voting set (this node was declared gone), and
	// on a recovered set's leader, nodes waiting to join (incarnation.go).
	sets := time.NewTicker(time.Second)
	defer sets.Stop()
	for {
		changed, leader := d.raft.FSM().Changed(), d.raft.LeaderChanged()
		d.SetMetaNow()
		select {
		case <-done:
			return
		case <-t.C:
		case <-changed:
		case <-leader:
		case <-sets.C:
			if err := d.checkSuperseded(); err != nil {
				d.stopSelf(err)
			}
			d.addJoiners()
		}
	}
}

func (d *Daemon) handleForward(ctx context.Context, from, method string, body []byte) ([]byte, error) {
	return d.forwarded(ctx, from, method, body)
}
