package quorum

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Meta is what each node advertises about itself through gossip.
type Meta struct {
	Role    string `json:"r"`           // secondary, primary-elect, primary, demoting, stopping
	Epoch   uint64 `json:"e"`           // the highest epoch this node knows
	Storage string `json:"s"`           // stopped, starting, running, stopping, failed
	Version string `json:"v"`           // fenced version
	Raft    string `json:"f,omitempty"` // raft state: leader, follower, candidate
	// Config is the fingerprint of this node's cluster-wide configuration
	// (16 hex digits, see FingerprintOf); its per-key hashes are asked for
	// by a call. Kept short: memberlist carries at most 512 bytes of meta.
	Config string `json:"c,omitempty"`
	// Beacon is the beacon frame this node reads (beaconVersion; 0 for an
	// older version: only beacons as memberlist messages). Set by
	// Membership itself.
	Beacon int `json:"b,omitempty"`
	// Boot is the boot ID of the node's machine (fences record the boot
	// their target was in).
	Boot string `json:"o,omitempty"`
	// Ineligible says the node may not take primacy now (its unfencing
	// at start, its probe or its configuration): a leader that may not
	// hold primacy does not hand leadership to it. An older fenced never
	// sets it.
	Ineligible bool `json:"i,omitempty"`
	// Resources is the state of each resource of the group on this node,
	// one letter each in group order (see the daemon's resourceLetters):
	// the status shows where every resource runs, cluster-wide.
	Resources string `json:"x,omitempty"`
	// Incarnation is the voting set this node's data belongs to (see
	// IncarnationGen; "" for the one bootstrapped from the
	// configuration): a node on older data learns from it that it was
	// declared gone, a new node which set to join.
	Incarnation string `json:"n,omitempty"`
	// Supports is the highest cluster version this node's fenced
	// supports (ClusterVersionMax; 0 from an older version, which
	// supports only 1: see SupportsVersion). Set by Membership itself.
	Supports int `json:"cv,omitempty"`
	// Keys are the IDs of the node's cluster keys (KeyID), the primary
	// first, comma-separated; set by Membership itself (only the
	// primary's when the metadata would not fit otherwise).
	Keys string `json:"k,omitempty"`
}

// SupportsVersion is the highest cluster version the node advertising m
// supports.
func (m Meta) SupportsVersion() int { return max(m.Supports, 1) }

// Member is one configured node as this node sees it through gossip.
type Member struct {
	Name    string
	Addr    string
	State   string // alive, suspect, dead, left, unknown (never seen)
	Meta    Meta
	RTT     time.Duration
	Contact time.Time // last direct contact (probe ack or gossip update)
}

// MembershipOptions configure gossip.
type MembershipOptions struct {
	Self  string
	Peers []Peer
	// Keys are the cluster's keys (ReadKeys), the first the primary;
	// nil = unencrypted. Key alone is the same as Keys of that one key.
	Keys   [][]byte
	Key    []byte
	Logger *slog.Logger
	// Transport replaces memberlist's UDP/TCP transport (in-process tests
	// wrap the real one to cut links).
	Transport memberlist.Transport
	// Handler answers forwarded requests (see Call). It runs on its own
	// goroutine per request.
	Handler func(ctx context.Context, from, method string, body []byte) ([]byte, error)
}

// Membership is the gossip layer (hashicorp/memberlist): liveness of every
// configured node, their advertised Meta, and a small request/response
// channel used to forward commands to the primary.
type Membership struct {
	ml    *memberlist.Memberlist
	ready chan struct{} // closed once ml is set (memberlist delivers messages before Create returns)
	guard *gossipGuard  // the transport under ml
	opts  MembershipOptions
	log   *slog.Logger
	meta  atomic.Pointer[Meta]
	stop  chan struct{}
	wg    sync.WaitGroup
	seq   atomic.Uint64
	// ctx ends at Shutdown; forwarded requests' handlers run under it.
	ctx    context.Context
	cancel context.CancelFunc

	beacons  atomic.Pointer[func([]byte)] // the Detector's, when running
	ring     atomic.Pointer[keyRing]      // the keys; seals and opens beacon frames (SetKeys swaps it)
	mlKeys   *memberlist.Keyring          // memberlist's, nil without a key
	keysMu   sync.Mutex                   // one SetKeys at a time
	internal sync.Map                     // method → func(from string, body []byte) ([]byte, error)

	mu      sync.Mutex
	closed  bool // Shutdown began: no new handler
	contact map[string]time.Time
	rtt     map[string]time.Duration
	left    map[string]bool
	// metas are the other nodes' metadata, copied when memberlist tells
	// of them (it holds its lock then): the nodes Members lists are
	// memberlist's own, which it changes under that lock.
	metas   map[string][]byte
	addrs   map[string]*memberlist.Node // see mlEvents.touch
	reads   map[string]int              // the beacon version the node reads (Meta.Beacon)
	pending map[uint64]pendingCall
	metaCh  chan struct{}
	changed chan struct{} // closed (and replaced) when a node joins, leaves or changes its metadata
}

// JoinMembership binds the gossip address and starts joining the other
// configured nodes; it does not wait for them.
func JoinMembership(o MembershipOptions, initial Meta) (*Membership, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	self := findPeer(o.Peers, o.Self)
	if self == nil {
		return nil, fmt.Errorf("gossip: node %q is not among the configured nodes", o.Self)
	}
	host, portStr, err := net.SplitHostPort(self.Gossip)
	if err != nil {
		return nil, fmt.Errorf("gossip address %s: %w", self.Gossip, err)
	}
	port, _ := strconv.Atoi(portStr)

	m := &Membership{opts: o, log: log, stop: make(chan struct{}),
		contact: map[string]time.Time{}, rtt: map[string]time.Duration{}, left: map[string]bool{}, metas: map[string][]byte{}, addrs: map[string]*memberlist.Node{}, reads: map[string]int{},
		pending: map[uint64]pendingCall{}, metaCh: make(chan struct{}, 1), changed: make(chan struct{}), ready: make(chan struct{})}
	// Call IDs start at a random point: a late reply to a call of an
	// earlier run of this daemon then matches no call of this one.
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("gossip: call ids: %w", err)
	}
	m.seq.Store(binary.BigEndian.Uint64(seed[:]))
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.meta.Store(&initial)
	keys := o.keys()
	ring, err := newKeyRing(keys)
	if err != nil {
		m.cancel()
		return nil, err
	}
	m.ring.Store(ring)

	c := memberlist.DefaultLANConfig()
	c.Name = o.Self
	c.BindAddr = host
	c.BindPort = port
	c.AdvertiseAddr = host
	c.AdvertisePort = port
	c.Delegate = (*mlDelegate)(m)
	c.Events = (*mlEvents)(m)
	c.Ping = (*mlPing)(m)
	// With encryption, what fails before it decrypts is an outsider's:
	// logged rate-limited (see logWriter, gossipGuard).
	refused := newRefusals(log.With("component", "gossip"))
	lw := logWriter{log: log.With("component", "gossip"), level: slog.LevelDebug}
	if ring.encrypted() {
		lw.outsiders, lw.keys = refused, &m.ring
	}
	c.LogOutput = lw
	// Faster than the LAN defaults: membership feeds status and
	// forwarding; raft, not gossip, decides primacy.
	c.ProbeInterval = time.Second
	c.ProbeTimeout = 300 * time.Millisecond
	c.GossipInterval = 500 * time.Millisecond
	c.SuspicionMult = 3
	// A few small messages per second between a handful of nodes:
	// compressing them costs more CPU than it saves.
	c.EnableCompression = false
	if ring.encrypted() {
		if m.mlKeys, err = memberlist.NewKeyring(keys[1:], keys[0]); err != nil {
			m.cancel()
			return nil, fmt.Errorf("gossip keys: %w", err)
		}
		c.Keyring = m.mlKeys
	}
	guard, err := guardTransport(o, host, port, lw, refused)
	if err != nil {
		return nil, fmt.Errorf("gossip address %s: %w", self.Gossip, err)
	}
	c.Transport = guard
	m.guard = guard
	guard.setBeaconHandler(m.receiveBeacon)
	ml, err := memberlist.Create(c)
	if err != nil {
		m.cancel()
		guard.Shutdown()
		return nil, fmt.Errorf("gossip address %s: %w", self.Gossip, err)
	}
	m.ml = ml
	close(m.ready)
	m.wg.Add(2)
	go m.joinLoop()
	go m.pushMeta()
	return m, nil
}

// keys are the options' keys, primary first (nil: plaintext).
func (o MembershipOptions) keys() [][]byte {
	if len(o.Keys) > 0 {
		return o.Keys
	}
	if o.Key != nil {
		return [][]byte{o.Key}
	}
	return nil
}

// KeyIDs are the IDs of this node's keys, the primary first (nil in
// plaintext).
func (m *Membership) KeyIDs() []string {
	return slices.Clone(m.ring.Load().keyIDs())
}

// SetKeys makes keys (primary first) this node's gossip keys while it
// runs: memberlist encrypts with keys[0] from now on and decrypts with any
// of them, and so do beacon frames. It returns whether anything changed.
// Plaintext gossip stays plaintext, and an encrypted one stays encrypted.
func (m *Membership) SetKeys(keys [][]byte) (bool, error) {
	m.keysMu.Lock()
	defer m.keysMu.Unlock()
	old := m.ring.Load()
	switch {
	case !old.encrypted() && len(keys) > 0:
		return false, errors.New("gossip keys: gossip runs in plaintext; adding a key needs a restart")
	case old.encrypted() && len(keys) == 0:
		return false, errors.New("gossip keys: no key; gossip runs encrypted and needs one")
	case sameKeys(old.keys, keys):
		return false, nil
	}
	ring, err := newKeyRing(keys)
	if err != nil {
		return false, err
	}
	if err := setMemberlistKeys(m.mlKeys, keys); err != nil {
		return false, fmt.Errorf("gossip keys: %w", err)
	}
	m.ring.Store(ring)
	var added, removed []string
	for _, id := range ring.ids {
		if !slices.Contains(old.ids, id) {
			added = append(added, id)
		}
	}
	for _, id := range old.ids {
		if !slices.Contains(ring.ids, id) {
			removed = append(removed, id)
		}
	}
	m.log.Info("gossip: keys changed", "keys", strings.Join(ring.ids, ","), "primary", ring.ids[0],
		"previous", strings.Join(old.ids, ","), "added", strings.Join(added, ","), "removed", strings.Join(removed, ","))
	select {
	case m.metaCh <- struct{}{}: // the metadata carries the key IDs
	default:
	}
	return true, nil
}

// joinLoop keeps trying to reach configured nodes that are not alive.
func (m *Membership) joinLoop() {
	defer m.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	var changed <-chan struct{}
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		case <-changed:
		}
		changed = m.Changed() // before looking: no leave missed
		alive := map[string]bool{}
		for _, n := range m.ml.Members() {
			alive[n.Name] = true
		}
		var addrs []string
		for _, p := range m.opts.Peers {
			if p.Name != m.opts.Self && !alive[p.Name] {
				addrs = append(addrs, p.Gossip)
			}
		}
		// Every second while a configured node is missing; with all
		// present, at the next leave (or every 10 s besides).
		wait := 10 * time.Second
		if len(addrs) > 0 {
			wait = time.Second
			if _, err := m.ml.Join(addrs); err != nil {
				m.log.Debug("gossip join", "err", err)
			}
		}
		t.Reset(wait)
	}
}

// SetMeta changes what this node advertises. It never blocks: the push to
// the other nodes happens on the membership's own goroutine (callers are on
// the demotion path, which must not wait for gossip).
func (m *Membership) SetMeta(meta Meta) {
	old := m.meta.Load()
	if old != nil && *old == meta {
		return
	}
	m.meta.Store(&meta)
	select {
	case m.metaCh <- struct{}{}:
	default: // a push is already pending; it will carry this value
	}
}

// pushMeta broadcasts this node's metadata whenever it changes.
func (m *Membership) pushMeta() {
	defer m.wg.Done()
	for {
		select {
		case <-m.stop:
			return
		case <-m.metaCh:
		}
		if err := m.ml.UpdateNode(time.Second); err != nil {
			m.log.Debug("gossip: update meta", "err", err)
		}
	}
}

// Members returns every configured node with its gossip state.
func (m *Membership) Members() []Member {
	seen := map[string]*memberlist.Node{}
	for _, n := range m.ml.Members() {
		seen[n.Name] = n
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.opts.Peers))
	for _, p := range m.opts.Peers {
		mb := Member{Name: p.Name, Addr: p.Gossip, State: "unknown", RTT: m.rtt[p.Name], Contact: m.contact[p.Name]}
		if n, ok := seen[p.Name]; ok {
			mb.State = "alive"
			if n.State == memberlist.StateSuspect {
				mb.State = "suspect"
			}
			mb.Meta, _ = decodeMeta(m.metas[p.Name])
		} else if m.left[p.Name] {
			mb.State = "left"
		} else if !m.contact[p.Name].IsZero() {
			mb.State = "dead"
		}
		if p.Name == m.opts.Self {
			mb.State = "alive"
			mb.Meta = *m.meta.Load()
			mb.Meta.Supports = ClusterVersionMax
			mb.Contact = time.Now()
		}
		out = append(out, mb)
	}
	return out
}

// LastMeta is the metadata node last advertised, whatever its state now
// (ok false: never seen).
func (m *Membership) LastMeta(node string) (Meta, bool) {
	if node == m.opts.Self {
		meta := *m.meta.Load()
		meta.Supports = ClusterVersionMax
		return meta, true
	}
	m.mu.Lock()
	b, ok := m.metas[node]
	m.mu.Unlock()
	if !ok {
		return Meta{}, false
	}
	meta, err := decodeMeta(b)
	return meta, err == nil
}

// Alive counts configured nodes currently alive or suspect, self included.
func (m *Membership) Alive() int {
	n := 0
	for _, mb := range m.Members() {
		if mb.State == "alive" || mb.State == "suspect" {
			n++
		}
	}
	return n
}

// Leave announces a graceful departure, then stops gossip.
func (m *Membership) Leave(timeout time.Duration) error {
	err := m.ml.Leave(timeout)
	return errors.Join(err, m.Shutdown())
}

// Shutdown stops gossip without announcing it.
func (m *Membership) Shutdown() error {
	select {
	case <-m.stop:
		return nil
	default:
	}
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	close(m.stop)
	err := m.ml.Shutdown()
	m.wg.Wait()
	return err
}

// --- forwarded requests over memberlist's reliable (TCP) messages ---

type rpcMsg struct {
	ID     uint64          `json:"id"`
	Reply  bool            `json:"reply,omitempty"`
	From   string          `json:"from"`
	Method string          `json:"method,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
	Err    string          `json:"err,omitempty"`
	Kind   string          `json:"kind,omitempty"` // of Err: see RemoteError
	// Datagram: asked by CallDatagram, over UDP; the reply goes the same
	// way (an older version ignores it and replies over TCP).
	Datagram bool `json:"dg,omitempty"`
}

// RemoteError is what a call's handler on the other node returned: its
// text, and its kind when the handler's error has one (an ErrorKind()
// string method), so the caller can answer as the other node would have.
type RemoteError struct {
	Node, Kind, Msg string
}

func (e *RemoteError) Error() string { return e.Msg }

// setInternal routes requests for method to h (nil: no more) instead of
// the daemon's Handler: quorum's own requests (the Detector's).
func (m *Membership) setInternal(method string, h func(from string, body []byte) ([]byte, error)) {
	if h == nil {
		m.internal.Delete(method)
		return
	}
	m.internal.Store(method, h)
}

func (m *Membership) setBeaconHandler(h func([]byte)) {
	if h == nil {
		m.beacons.Store(nil)
		return
	}
	m.beacons.Store(&h)
}

// peer returns this node's own copy of where member name is (nil when it
// is not a live member): memberlist's Node structs change under it.
func (m *Membership) peer(name string) *memberlist.Node {
	if !hasMember(m.ml.Members(), name) {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addrs[name]
}

// pendingCall is a call waiting for its reply, from the node it asked.
type pendingCall struct {
	node string
	ch   chan rpcMsg
}

// ErrNoRoute is returned by Call when the node is not reachable by gossip.
var ErrNoRoute = errors.New("node not reachable")

// Call sends a request to node and waits for its answer.
func (m *Membership) Call(ctx context.Context, node, method string, body []byte) ([]byte, error) {
	return m.call(ctx, node, method, body, 0)
}

// CallDatagram is Call over gossip's UDP, for a small request whose
// answer is wanted within a moment even under heavy packet loss: the
// request goes as a best-effort datagram, again every `every` until the
// answer comes or ctx ends, and the answer comes back as a datagram too.
// (Call's reliable stream opens a TCP connection per message, and a lost
// SYN alone costs a second.) The handler may run once per copy that
// arrives: it must not mind.
func (m *Membership) CallDatagram(ctx context.Context, node, method string, body []byte, every time.Duration) ([]byte, error) {
	return m.call(ctx, node, method, body, max(every, time.Millisecond))
}

// call is Call (every 0: once, over the reliable stream) and CallDatagram
// (a datagram every `every`).
func (m *Membership) call(ctx context.Context, node, method string, body []byte, every time.Duration) ([]byte, error) {
	what := "forward to"
	if every > 0 {
		what = "ask"
	}
	target := m.peer(node)
	if target == nil {
		return nil, fmt.Errorf("%s %s: %w", what, node, ErrNoRoute)
	}
	id := m.seq.Add(1)
	ch := make(chan rpcMsg, 1)
	m.mu.Lock()
	m.pending[id] = pendingCall{node: node, ch: ch}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.pending, id)
		m.mu.Unlock()
	}()
	msg, err := json.Marshal(rpcMsg{ID: id, From: m.opts.Self, Method: method, Body: body, Datagram: every > 0})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, node, err)
	}
	var resend <-chan time.Time
	if every > 0 {
		tick := time.NewTicker(every)
		defer tick.Stop()
		resend = tick.C
		if err := m.ml.SendBestEffort(target, msg); err != nil {
			m.log.Debug("gossip: datagram call", "to", node, "err", err)
		}
	} else if err := m.sendMsg(target, msg); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, node, err)
	}
	for {
		select {
		case r := <-ch:
			if r.Err != "" {
				return nil, &RemoteError{Node: node, Kind: r.Kind, Msg: r.Err}
			}
			return r.Body, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("%s %s: %w", what, node, ctx.Err())
		case <-resend:
			if err := m.ml.SendBestEffort(target, msg); err != nil {
				m.log.Debug("gossip: datagram call", "to", node, "err", err)
			}
		}
	}
}

func (m *Membership) handleMsg(b []byte) {
	if len(b) > 0 && b[0] == beaconMagic {
		if h := m.beacons.Load(); h != nil {
			(*h)(b)
		}
		return
	}
	msg, err := decodeRPC(b)
	if err != nil {
		m.log.Warn("gossip: message refused", "err", err)
		return
	}
	if msg.Reply {
		m.mu.Lock()
		call, ok := m.pending[msg.ID]
		m.mu.Unlock()
		switch {
		case !ok:
		case msg.From != call.node:
			// Only the node asked answers: a reply from another (a
			// call of an earlier run's ID, say) could end a lease
			// bound early.
			m.log.Warn("gossip: reply refused: not from the node asked", "id", msg.ID, "asked", call.node, "from", msg.From)
		default:
			select {
			case call.ch <- msg:
			default:
			}
		}
		return
	}
	handler := m.opts.Handler
	if h, ok := m.internal.Load(msg.Method); ok {
		f := h.(func(string, []byte) ([]byte, error))
		handler = func(_ context.Context, from, _ string, body []byte) ([]byte, error) { return f(from, body) }
	}
	if handler == nil {
		return
	}
	// Handlers are owned: none starts once Shutdown began, and Shutdown
	// cancels and waits for the running ones.
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		// A request can arrive while memberlist.Create is still running
		// (its listeners start inside it): the reply needs m.ml (a node
		// restarted into a busy cluster crashed on it).
		select {
		case <-m.ready:
		case <-m.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Minute)
		defer cancel()
		body, err := handler(ctx, msg.From, msg.Method, msg.Body)
		reply := rpcMsg{ID: msg.ID, Reply: true, From: m.opts.Self, Body: body}
		if err != nil {
			reply.Err = err.Error()
			var k interface{ ErrorKind() string }
			if errors.As(err, &k) {
				reply.Kind = k.ErrorKind()
			}
		}
		out := encodeReply(reply)
		n := m.peer(msg.From)
		if n == nil || msg.Datagram && m.ml.SendBestEffort(n, out) == nil {
			return
		}
		if err := m.sendMsg(n, out); err != nil {
			m.log.Warn("gossip: reply", "to", msg.From, "err", err)
		}
	}()
}

type mlDelegate Membership

func (d *mlDelegate) NodeMeta(limit int) []byte {
	meta := *d.meta.Load()
	meta.Beacon = beaconVersion
	meta.Supports = ClusterVersionMax
	ids := d.ring.Load().keyIDs()
	meta.Keys = strings.Join(ids, ",")
	b, _ := json.Marshal(meta)
	if len(b) > limit && meta.Resources != "" {
		// A group too large to advertise where each resource runs still
		// advertises the rest (status then shows its resources unknown).
		meta.Resources = ""
		b, _ = json.Marshal(meta)
	}
	if len(b) > limit && len(ids) > 1 {
		meta.Keys = ids[0] // the primary's, the one the others must hold
		b, _ = json.Marshal(meta)
	}
	if len(b) > limit {
		return nil
	}
	return b
}
func (d *mlDelegate) NotifyMsg(b []byte)              { (*Membership)(d).handleMsg(append([]byte(nil), b...)) }
func (d *mlDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d *mlDelegate) LocalState(bool) []byte          { return nil }
func (d *mlDelegate) MergeRemoteState([]byte, bool)   {}

type mlEvents Membership

// Changed returns a channel closed when a node next joins, leaves or
// changes its metadata; any number of goroutines may wait on it.
func (m *Membership) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// changedLocked wakes Changed's waiters; m.mu is held.
func (m *Membership) changedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (e *mlEvents) touch(n *memberlist.Node, left bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer (*Membership)(e).changedLocked()
	e.contact[n.Name] = time.Now()
	e.left[n.Name] = left
	e.metas[n.Name] = append([]byte(nil), n.Meta...)
	meta, _ := decodeMeta(n.Meta)
	e.reads[n.Name] = meta.Beacon
	// A copy of where the node is, for sending to it: memberlist updates
	// its own Node structs in place, under its lock, while they are in use.
	e.addrs[n.Name] = &memberlist.Node{Name: n.Name, Addr: append(net.IP(nil), n.Addr...), Port: n.Port}
}
func (e *mlEvents) NotifyJoin(n *memberlist.Node) {
	e.touch(n, false)
	e.log.Info("gossip: node joined", "peer", n.Name)
}
func (e *mlEvents) NotifyLeave(n *memberlist.Node) {
	// memberlist reports both a graceful leave and a death here; it marks
	// a graceful one with StateLeft.
	e.mu.Lock()
	e.left[n.Name] = n.State == memberlist.StateLeft
	(*Membership)(e).changedLocked()
	e.mu.Unlock()
	e.log.Info("gossip: node gone", "peer", n.Name, "left", n.State == memberlist.StateLeft)
}
func (e *mlEvents) NotifyUpdate(n *memberlist.Node) { e.touch(n, false) }

type mlPing Membership

func (p *mlPing) AckPayload() []byte { return nil }
func (p *mlPing) NotifyPingComplete(n *memberlist.Node, rtt time.Duration, _ []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.contact[n.Name] = time.Now()
	p.rtt[n.Name] = rtt
}
