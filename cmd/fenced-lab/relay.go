package main

import (
	"errors"
	"net"
	"sync"
	"time"
)

// udpRelay serves a loopback-only UDP service (the IPMI simulator) on an
// address that is not loopback: each datagram received on the listening
// socket goes to the service from a socket of the client's own, and the
// service's answers go back to that client. The service tells clients apart
// by their source address, so each client keeps its own socket until it has
// been idle for relayIdle.
type udpRelay struct {
	ln      *net.UDPConn
	to      *net.UDPAddr
	mu      sync.Mutex
	clients map[string]*relayClient
	wg      sync.WaitGroup
	done    chan struct{}
}

type relayClient struct {
	conn *net.UDPConn
	last time.Time
}

// relayIdle is how long a client's socket lives without a datagram: longer
// than an IPMI session's timeout, so a session stays on one source port.
const relayIdle = 2 * time.Minute

// relayUDP listens on listen and relays to to until Close.
func relayUDP(listen string, to *net.UDPAddr) (*udpRelay, error) {
	la, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, err
	}
	r := &udpRelay{ln: ln, to: to, clients: map[string]*relayClient{}, done: make(chan struct{})}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// Addr is the address clients send to.
func (r *udpRelay) Addr() *net.UDPAddr { return r.ln.LocalAddr().(*net.UDPAddr) }

func (r *udpRelay) serve() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.ln.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		c := r.client(from)
		if c != nil {
			_, _ = c.Write(buf[:n])
		}
	}
}

// client is from's socket to the service, opened at its first datagram.
func (r *udpRelay) client(from *net.UDPAddr) *net.UDPConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for k, c := range r.clients {
		if now.Sub(c.last) > relayIdle {
			c.conn.Close()
			delete(r.clients, k)
		}
	}
	if c, ok := r.clients[from.String()]; ok {
		c.last = now
		return c.conn
	}
	select {
	case <-r.done:
		return nil
	default:
	}
	conn, err := net.DialUDP("udp", nil, r.to)
	if err != nil {
		return nil
	}
	r.clients[from.String()] = &relayClient{conn: conn, last: now}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue // e.g. the service's port refused a datagram
			}
			_, _ = r.ln.WriteToUDP(buf[:n], from)
		}
	}()
	return conn
}

// Close stops relaying and waits for its goroutines.
func (r *udpRelay) Close() {
	close(r.done)
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.clients {
		c.conn.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
