package daemon_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/fenced/fenced/quorum"
)

// cuttableTransport wraps memberlist's network transport and drops traffic
// to and from blocked addresses: a gossip partition.
type cuttableTransport struct {
	inner *memberlist.NetTransport
	addr  string
	mu    sync.Mutex
	cut   map[string]bool
	out   chan *memberlist.Packet
}

func newCuttable(nt *memberlist.NetTransport) *cuttableTransport {
	ip, port, _ := nt.FinalAdvertiseAddr("", 0)
	c := &cuttableTransport{inner: nt, addr: net.JoinHostPort(ip.String(), strconv.Itoa(port)), cut: map[string]bool{}, out: make(chan *memberlist.Packet, 256)}
	go func() {
		for p := range nt.PacketCh() {
			if !c.blocked(p.From.String()) {
				c.out <- p
			}
		}
	}()
	return c
}

func (c *cuttableTransport) block(addr string) {
	c.mu.Lock()
	c.cut[addr] = true
	c.mu.Unlock()
}

func (c *cuttableTransport) unblockAll() {
	c.mu.Lock()
	c.cut = map[string]bool{}
	c.mu.Unlock()
}

func (c *cuttableTransport) blocked(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut[addr]
}

var errCut = errors.New("partitioned")

func (c *cuttableTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return c.inner.FinalAdvertiseAddr(ip, port)
}
func (c *cuttableTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.blocked(addr) {
		return time.Now(), nil // lost on the wire
	}
	return c.inner.WriteTo(b, addr)
}
func (c *cuttableTransport) PacketCh() <-chan *memberlist.Packet { return c.out }
func (c *cuttableTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if c.blocked(addr) {
		time.Sleep(min(timeout, 50*time.Millisecond))
		return nil, errCut
	}
	return c.inner.DialTimeout(addr, timeout)
}
func (c *cuttableTransport) StreamCh() <-chan net.Conn { return c.inner.StreamCh() }
func (c *cuttableTransport) Shutdown() error           { return c.inner.Shutdown() }

// event is one storage start or stop, on the boot-time clock.
type event struct {
	at    quorum.Mono
	node  string
	epoch uint64
	kind  string // start, stop, power-lost
}

type eventLog struct {
	mu     sync.Mutex
	events []event
}

func (l *eventLog) add(e event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) all() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.events...)
}

// recordingResource stands for the storage: it records when it runs.
type recordingResource struct {
	node  string
	log   *eventLog
	mu    sync.Mutex
	epoch uint64
	on    bool
}

func (r *recordingResource) Start(_ context.Context, epoch uint64, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.epoch = true, epoch
	r.log.add(event{at: quorum.Now(), node: r.node, epoch: epoch, kind: "start"})
	return nil
}

func (r *recordingResource) Stop(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.on = false
		r.log.add(event{at: quorum.Now(), node: r.node, epoch: r.epoch, kind: "stop"})
	}
	return nil
}

func (r *recordingResource) Monitor(context.Context) error { return nil }

func (r *recordingResource) powerLost() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.on = false
		r.log.add(event{at: quorum.Now(), node: r.node, epoch: r.epoch, kind: "power-lost"})
	}
}

// overlaps reports two nodes running the storage at the same time.
func overlaps(events []event) error {
	running := map[string]uint64{}
	for _, e := range events {
		switch e.kind {
		case "start":
			for n, ep := range running {
				if n != e.node {
					return errors.New("storage started on " + e.node + " while " + n + " (epoch " + strconv.FormatUint(ep, 10) + ") still ran it")
				}
			}
			running[e.node] = e.epoch
		default:
			delete(running, e.node)
		}
	}
	return nil
}
