package ipmisim

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Relay is a slow or dead network path to a UDP service (a BMC) on
// loopback, in user space (netem is not available everywhere): clients send
// to Relay.Addr, the relay forwards every datagram to the target from a
// socket of its own per client, and the answers back, each datagram held
// for the delay in its direction. Datagrams keep their order in each
// direction while the delay stays the same. SetDead drops everything, as a
// BMC that stopped answering (or a cut link) does.
type Relay struct {
	conn   *net.UDPConn
	target *net.UDPAddr
	up     atomic.Int64 // client → target delay, nanoseconds
	down   atomic.Int64 // target → client delay, nanoseconds
	dead   atomic.Bool
	sent   atomic.Int64 // datagrams forwarded to the target

	stop    chan struct{} // closed by Close: held datagrams are dropped
	mu      sync.Mutex
	closed  bool
	clients map[string]*relayClient
	wg      sync.WaitGroup
}

type relayClient struct {
	from *net.UDPAddr
	out  *net.UDPConn // to the target
	up   chan heldDatagram
}

type heldDatagram struct {
	at time.Time // when it arrived
	b  []byte
}

// StartRelay relays 127.0.0.1:<free port> to target (a loopback address)
// with delay in each direction. Close stops it.
func StartRelay(target *net.UDPAddr, delay time.Duration) (*Relay, error) {
	if target == nil || !target.IP.IsLoopback() {
		return nil, fmt.Errorf("ipmisim: relay target %v: must be a loopback address", target)
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("ipmisim: relay: %w", err)
	}
	r := &Relay{conn: c, target: target, clients: map[string]*relayClient{}, stop: make(chan struct{})}
	r.SetDelay(delay)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.serve()
	}()
	return r, nil
}

// Addr is where clients send.
func (r *Relay) Addr() *net.UDPAddr { return r.conn.LocalAddr().(*net.UDPAddr) }

// Host and Port split Addr for agent parameters.
func (r *Relay) Host() string { return r.Addr().IP.String() }

// Port is the relay's UDP port.
func (r *Relay) Port() int { return r.Addr().Port }

// SetDelay sets the delay of each direction (a round trip gains twice d).
func (r *Relay) SetDelay(d time.Duration) {
	r.up.Store(int64(d))
	r.down.Store(int64(d))
}

// SetDead drops every datagram in both directions while dead is set.
func (r *Relay) SetDead(dead bool) { r.dead.Store(dead) }

// Forwarded counts the datagrams passed on to the target.
func (r *Relay) Forwarded() int { return int(r.sent.Load()) }

func (r *Relay) serve() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if r.dead.Load() {
			continue
		}
		cl, err := r.client(from)
		if err != nil {
			continue
		}
		select {
		case cl.up <- heldDatagram{at: time.Now(), b: append([]byte(nil), buf[:n]...)}:
		default: // queue full: the link drops, as a congested one does
		}
	}
}

// client returns the relay's state for one client address, starting its
// two carriers on first use.
func (r *Relay) client(from *net.UDPAddr) (*relayClient, error) {
	key := from.String()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, net.ErrClosed
	}
	if cl, ok := r.clients[key]; ok {
		return cl, nil
	}
	out, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil, err
	}
	cl := &relayClient{from: from, out: out, up: make(chan heldDatagram, 1024)}
	r.clients[key] = cl
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		for d := range cl.up {
			if !r.hold(d.at.Add(time.Duration(r.up.Load()))) {
				continue
			}
			if r.dead.Load() {
				continue
			}
			if _, err := cl.out.Write(d.b); err == nil {
				r.sent.Add(1)
			}
		}
	}()
	go func() {
		defer r.wg.Done()
		r.carryDown(cl)
	}()
	return cl, nil
}

// carryDown reads the target's answers to one client and delivers each
// after the delay, in order.
func (r *Relay) carryDown(cl *relayClient) {
	q := make(chan heldDatagram, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range q {
			if r.hold(d.at.Add(time.Duration(r.down.Load()))) && !r.dead.Load() {
				_, _ = r.conn.WriteToUDP(d.b, cl.from)
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := cl.out.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				break
			}
			// ICMP port unreachable while the target restarts: go on.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if r.dead.Load() {
			continue
		}
		select {
		case q <- heldDatagram{at: time.Now(), b: append([]byte(nil), buf[:n]...)}:
		default:
		}
	}
	close(q)
	<-done
}

// hold waits until t; false when the relay is closing.
func (r *Relay) hold(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-r.stop:
		return false
	}
}

// Close stops the relay and waits for its goroutines; datagrams still held
// are dropped.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.stop)
	err := r.conn.Close()
	for _, cl := range r.clients {
		close(cl.up)
		cl.out.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}
