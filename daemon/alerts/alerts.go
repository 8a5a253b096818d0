// Package alerts runs alert agents on cluster events, through the interface
// Pacemaker's alert agents use: the agent is a program run once per
// recipient, told about the event in CRM_alert_* environment variables
// (kind, node, desc, task, rc, timestamp, recipient, sequence, version, …)
// and its parameters as further environment variables, so the sample agents
// Pacemaker ships (alert_file.sh.sample, alert_smtp.sh.sample,
// alert_snmp.sh.sample) and agents written for them run unmodified.
//
// Alerts never delay what raised them (the control loop, the fencer, the
// device checker): Emit only puts the event in a bounded queue and returns;
// when the queue is full the event is dropped, counted and logged. One
// dispatcher goroutine (Run) takes events from the queue and starts the
// runs, at most MaxRunning at once; each run is a process group of its own,
// killed as a group at its timeout, and each is logged with its outcome.
package alerts

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Event names: what happened. Each belongs to one Group.
const (
	FenceStarted      = "fence-started"
	FenceSucceeded    = "fence-succeeded"
	FenceFailed       = "fence-failed"
	TakeoverBlocked   = "takeover-blocked"
	TakeoverUnblocked = "takeover-unblocked"
	PrimaryChanged    = "primary-changed"
	DeviceChanged     = "device-health-changed"
	ConfigMismatch    = "config-mismatch"
	ConfigMatch       = "config-match"
	QuorumLost        = "quorum-lost"
	QuorumRegained    = "quorum-regained"
	SelfFence         = "self-fence"
)

// Groups an alert selects its events by (the config's alerts[].events).
const (
	GroupFence     = "fence"
	GroupTakeover  = "takeover"
	GroupPrimary   = "primary"
	GroupDevice    = "device"
	GroupConfig    = "config"
	GroupQuorum    = "quorum"
	GroupSelfFence = "self-fence"
)

// Groups lists every group, in the order the documentation gives them.
var Groups = []string{GroupFence, GroupTakeover, GroupPrimary, GroupDevice, GroupConfig, GroupQuorum, GroupSelfFence}

var groupOf = map[string]string{
	FenceStarted: GroupFence, FenceSucceeded: GroupFence, FenceFailed: GroupFence,
	TakeoverBlocked: GroupTakeover, TakeoverUnblocked: GroupTakeover,
	PrimaryChanged: GroupPrimary, DeviceChanged: GroupDevice,
	ConfigMismatch: GroupConfig, ConfigMatch: GroupConfig,
	QuorumLost: GroupQuorum, QuorumRegained: GroupQuorum,
	SelfFence: GroupSelfFence,
}

// GroupOf is the group of event name ("" if unknown).
func GroupOf(name string) string { return groupOf[name] }

// Pacemaker's alert kinds (CRM_alert_kind). Every event is given the kind
// whose fields fit it, so agents that only know Pacemaker's kinds (the
// SNMP sample sends traps for these four only) handle it.
const (
	KindNode      = "node"      // a node's state: desc is the new state ("primary")
	KindFencing   = "fencing"   // a fence operation: node is the target, task the action, rc the result
	KindResource  = "resource"  // not used by fenced
	KindAttribute = "attribute" // a named value of a node changed: attribute_name, attribute_value
)

// Event is one thing that happened, in the terms of Pacemaker's alert
// interface. Empty fields are not passed (agents test for unset
// variables, e.g. the SNMP sample's ${CRM_alert_rc=…}).
type Event struct {
	Name string // FenceStarted, …
	Kind string // KindFencing, …
	// Node is the node the event is about (CRM_alert_node).
	Node string
	Desc string // CRM_alert_desc
	Task string // CRM_alert_task (fencing: off, reboot, on)
	// RC is the result code (CRM_alert_rc) when HasRC: 0 success, 1
	// failure, 2 outcome unknown.
	RC    int
	HasRC bool
	// Attribute and Value are CRM_alert_attribute_name and _value.
	Attribute, Value string
	// Epoch, when not 0, is passed as FENCED_EPOCH.
	Epoch uint64
	// Time is when it happened (CRM_alert_timestamp); zero: when emitted.
	Time time.Time
	// seq is CRM_alert_node_sequence, set by Emit.
	seq uint64
}

// Agent is one configured alert agent.
type Agent struct {
	Name string
	Path string
	// Timeout kills a run (its process group); 0 = DefaultTimeout.
	Timeout time.Duration
	// TimestampFormat formats CRM_alert_timestamp (see FormatTimestamp);
	// "" = DefaultTimestampFormat.
	TimestampFormat string
	// Params become environment variables of the agent's runs.
	Params map[string]string
	// Groups selects the events (nil: all).
	Groups     []string
	Recipients []Recipient
}

// Recipient is one destination of an agent: the agent runs once per
// recipient, with CRM_alert_recipient set to Value. Zero Timeout and empty
// TimestampFormat take the agent's.
type Recipient struct {
	Value           string
	Timeout         time.Duration
	TimestampFormat string
}

// Defaults, as Pacemaker's.
const (
	DefaultTimeout         = 30 * time.Second
	DefaultTimestampFormat = "%H:%M:%S.%06N"
)

// Options configure a Manager.
type Options struct {
	// Self is the node the manager runs on (FENCED_NODE); Cluster its
	// cluster's name (FENCED_CLUSTER).
	Self, Cluster string
	Logger        *slog.Logger
	// QueueSize bounds the events waiting for a run (default 256).
	QueueSize int
	// MaxRunning bounds the agent processes running at once (default 4).
	MaxRunning int
	// Observe, when set, is told of every finished run: the agent's name
	// and the result (ok, failed, timeout, error).
	Observe func(agent, result string)
	// Dropped, when set, is called for every event dropped because the
	// queue was full.
	Dropped func()
	// Now is the wall clock (default time.Now).
	Now func() time.Time
}

// Manager queues events and runs the configured agents on them. Its
// methods are safe for concurrent use; Emit never blocks.
type Manager struct {
	o      Options
	log    *slog.Logger
	queue  chan Event
	agents atomic.Pointer[[]Agent]
	seq    atomic.Uint64
	sem    chan struct{}

	dropMu     sync.Mutex
	dropped    int       // since the last drop was logged
	dropLogged time.Time // when it was
	dropTotal  atomic.Uint64
}

// New returns a manager running agents; Run starts its dispatcher.
func New(o Options, agents []Agent) *Manager {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 256
	}
	if o.MaxRunning <= 0 {
		o.MaxRunning = 4
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	m := &Manager{o: o, log: o.Logger, queue: make(chan Event, o.QueueSize), sem: make(chan struct{}, o.MaxRunning)}
	m.Configure(agents)
	return m
}

// Configure replaces the agents (a live reload). Runs already started
// finish as they were configured.
func (m *Manager) Configure(agents []Agent) {
	a := slices.Clone(agents)
	m.agents.Store(&a)
}

// Agents returns the configured agents.
func (m *Manager) Agents() []Agent { return *m.agents.Load() }

// Emit queues ev for the agents that select it and returns at once. When
// the queue is full the event is dropped: counted, and logged at most once
// every 10 seconds with the number dropped since.
func (m *Manager) Emit(ev Event) {
	if m == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = m.o.Now()
	}
	// Numbered here, in the order the events happened: a dropped event
	// leaves a gap the agents can see.
	ev.seq = m.seq.Add(1)
	select {
	case m.queue <- ev:
	default:
		m.drop(ev)
	}
}

// DroppedTotal is the number of events dropped since start.
func (m *Manager) DroppedTotal() uint64 { return m.dropTotal.Load() }

func (m *Manager) drop(ev Event) {
	m.dropTotal.Add(1)
	if m.o.Dropped != nil {
		m.o.Dropped()
	}
	m.dropMu.Lock()
	defer m.dropMu.Unlock()
	m.dropped++
	if now := time.Now(); now.Sub(m.dropLogged) >= 10*time.Second {
		m.log.Warn("alert queue full: events dropped", "dropped", m.dropped, "event", ev.Name, "queue", cap(m.queue))
		m.dropped, m.dropLogged = 0, now
	}
}

// Run takes events from the queue and runs the agents on them until ctx
// ends, then kills the runs still going and returns once they ended.
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var ev Event
		select {
		case <-ctx.Done():
			return
		case ev = <-m.queue:
		}
		for _, r := range m.runsFor(ev) {
			select {
			case m.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-m.sem }()
				m.run(ctx, r)
			}()
		}
	}
}

// Urgent starts the runs for ev at once and does not wait for them: for
// the moment just before this node resets itself (self-fence), when
// nothing queued would run any more. The processes may not live long.
func (m *Manager) Urgent(ev Event) {
	if m == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = m.o.Now()
	}
	ev.seq = m.seq.Add(1)
	for _, r := range m.runsFor(ev) {
		m.start(r)
	}
}

// runSpec is one run: an agent, for one recipient (or none), on one event.
type runSpec struct {
	agent     Agent
	recipient *Recipient
	ev        Event
	timeout   time.Duration
	tsFormat  string
}

// runsFor lists the runs ev calls for: every agent that selects its group,
// once per recipient (once without one when it has none).
func (m *Manager) runsFor(ev Event) []runSpec {
	var out []runSpec
	for _, a := range m.Agents() {
		if len(a.Groups) > 0 && !slices.Contains(a.Groups, groupOf[ev.Name]) {
			continue
		}
		base := runSpec{agent: a, ev: ev, timeout: a.Timeout, tsFormat: a.TimestampFormat}
		if base.timeout <= 0 {
			base.timeout = DefaultTimeout
		}
		if base.tsFormat == "" {
			base.tsFormat = DefaultTimestampFormat
		}
		if len(a.Recipients) == 0 {
			out = append(out, base)
			continue
		}
		for i := range a.Recipients {
			r := base
			r.recipient = &a.Recipients[i]
			if t := r.recipient.Timeout; t > 0 {
				r.timeout = t
			}
			if f := r.recipient.TimestampFormat; f != "" {
				r.tsFormat = f
			}
			out = append(out, r)
		}
	}
	return out
}
