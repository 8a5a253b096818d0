package nemesis

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// relayFaults are the faults a relay can put between its clients and its
// target: everything dropped (a dead BMC, as seen from the network), or
// every datagram or chunk delayed (a slow BMC).
type relayFaults struct {
	dead  atomic.Bool
	delay atomic.Int64 // nanoseconds
}

func (f *relayFaults) SetDead(dead bool)        { f.dead.Store(dead) }
func (f *relayFaults) SetDelay(d time.Duration) { f.delay.Store(int64(d)) }
func (f *relayFaults) Delay() time.Duration     { return time.Duration(f.delay.Load()) }
func (f *relayFaults) Dead() bool               { return f.dead.Load() }
func (f *relayFaults) clear()                   { f.SetDead(false); f.SetDelay(0) }
func (f *relayFaults) wait(arrived time.Time)   { sleepUntil(arrived.Add(f.Delay())) }
func sleepUntil(t time.Time)                    { time.Sleep(time.Until(t)) }

// udpRelay forwards datagrams from a listener in the switch namespace to a
// UDP target on the host's loopback, one upstream socket per client.
type udpRelay struct {
	relayFaults
	ln     net.PacketConn
	target *net.UDPAddr
	mu     sync.Mutex
	peers  map[string]*net.UDPConn
	wg     sync.WaitGroup
	closed atomic.Bool
}

// startUDPRelay listens on addr inside namespace ns and forwards to target.
func startUDPRelay(ns, addr, target string) (*udpRelay, error) {
	t, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, err
	}
	r := &udpRelay{target: t, peers: map[string]*net.UDPConn{}}
	if err := inNetns(ns, func() error {
		var err error
		r.ln, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		return nil, err
	}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

func (r *udpRelay) serve() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.ln.ReadFrom(buf)
		if err != nil {
			return
		}
		if r.Dead() {
			continue
		}
		up, err := r.upstream(from)
		if err != nil {
			continue
		}
		b := append([]byte(nil), buf[:n]...)
		r.send(time.Now(), func() { up.Write(b) })
	}
}

// send runs write after the relay's delay without blocking the reader;
// datagrams may be reordered only when the delay changes, as on a real
// network.
func (r *udpRelay) send(arrived time.Time, write func()) {
	d := r.Delay()
	if d <= 0 {
		write()
		return
	}
	r.wg.Add(1)
	time.AfterFunc(time.Until(arrived.Add(d)), func() {
		defer r.wg.Done()
		if !r.closed.Load() && !r.Dead() {
			write()
		}
	})
}

func (r *udpRelay) upstream(client net.Addr) (*net.UDPConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.peers[client.String()]; ok {
		return c, nil
	}
	if r.closed.Load() {
		return nil, net.ErrClosed
	}
	c, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil, err
	}
	r.peers[client.String()] = c
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if r.Dead() {
				continue
			}
			b := append([]byte(nil), buf[:n]...)
			r.send(time.Now(), func() { r.ln.WriteTo(b, client) })
		}
	}()
	return c, nil
}

func (r *udpRelay) Close() {
	r.closed.Store(true)
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.peers {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// tcpRelay forwards connections accepted in the switch namespace to a TCP
// target on the host's loopback. A dead relay accepts and then answers
// nothing (a hung service), a slow one delays every chunk.
type tcpRelay struct {
	relayFaults
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startTCPRelay(ns, addr, target string) (*tcpRelay, error) {
	r := &tcpRelay{target: target, conns: map[net.Conn]struct{}{}}
	if err := inNetns(ns, func() error {
		var err error
		r.ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return nil, err
	}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

func (r *tcpRelay) track(c net.Conn, add bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if add {
		if r.conns == nil {
			return false
		}
		r.conns[c] = struct{}{}
	} else if r.conns != nil {
		delete(r.conns, c)
	}
	return true
}

func (r *tcpRelay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(c, true) {
			c.Close()
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.track(c, false)
			defer c.Close()
			if r.Dead() {
				io.Copy(io.Discard, c)
				return
			}
			up, err := net.DialTimeout("tcp", r.target, 2*time.Second)
			if err != nil {
				return
			}
			r.track(up, true)
			defer r.track(up, false)
			defer up.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.pump(up, c)
			}()
			r.pump(c, up)
			<-done
		}()
	}
}

// pump copies src to dst, delaying each chunk by the relay's delay and
// dropping it while the relay is dead.
func (r *tcpRelay) pump(dst, src net.Conn) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	ch := make(chan chunk, 256)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now(), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		r.wait(c.at)
		if r.Dead() {
			continue
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	for range ch {
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

func (r *tcpRelay) Close() {
	err := r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return
	}
	r.wg.Wait()
}
