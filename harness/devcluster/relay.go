package devcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// UDPRelay makes UDP services on the host's loopback (the simulated BMCs)
// reachable from inside the nodes' network namespaces: in each namespace it
// listens on the same loopback address and port and relays every datagram
// to the host's service and the answers back, one host-side socket per
// client address. Close stops it.
type UDPRelay struct {
	mu      sync.Mutex
	conns   []*net.UDPConn
	wg      sync.WaitGroup
	closed  bool
	clients map[string]*net.UDPConn
}

// RelayUDP relays, in every node namespace of ns, each of addrs (host
// loopback UDP addresses) to the host.
func (ns *Netns) RelayUDP(addrs []*net.UDPAddr) (*UDPRelay, error) {
	r := &UDPRelay{clients: map[string]*net.UDPConn{}}
	for i := range ns.Hosts {
		for _, a := range addrs {
			c, err := listenUDPIn("/run/netns/"+ns.Name(i), a)
			if err != nil {
				r.Close()
				return nil, fmt.Errorf("relay %s in %s: %w", a, ns.Name(i), err)
			}
			r.mu.Lock()
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.serve(c, a)
			}()
		}
	}
	return r, nil
}

// listenUDPIn opens a UDP socket bound to addr inside the network
// namespace at nsPath: the socket is created on a thread switched into the
// namespace, and keeps living there after the thread switches back.
func listenUDPIn(nsPath string, addr *net.UDPAddr) (*net.UDPConn, error) {
	target, err := os.Open(nsPath)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns: %w", err)
	}
	c, lerr := net.ListenUDP("udp", addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// This thread is stuck in the other namespace: leave it locked so
		// the runtime ends it with the goroutine instead of reusing it.
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return c, lerr
}

func (r *UDPRelay) serve(in *net.UDPConn, to *net.UDPAddr) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := in.ReadFromUDP(buf)
		if err != nil {
			return
		}
		out, err := r.client(in, from, to)
		if err != nil {
			continue
		}
		_, _ = out.Write(buf[:n])
	}
}

// client returns the host-side socket for one client of one relay,
// starting its answer loop on first use.
func (r *UDPRelay) client(in *net.UDPConn, from, to *net.UDPAddr) (*net.UDPConn, error) {
	key := fmt.Sprintf("%p|%s", in, from)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("closed")
	}
	if c, ok := r.clients[key]; ok {
		return c, nil
	}
	c, err := net.DialUDP("udp", nil, to)
	if err != nil {
		return nil, err
	}
	r.clients[key] = c
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				if !errors.Is(err, net.ErrClosed) {
					// ICMP unreachable while the service restarts: go on.
					time.Sleep(10 * time.Millisecond)
					r.mu.Lock()
					closed := r.closed
					r.mu.Unlock()
					if !closed {
						continue
					}
				}
				return
			}
			_, _ = in.WriteToUDP(buf[:n], from)
		}
	}()
	return c, nil
}

// Close stops every relay and waits for its goroutines.
func (r *UDPRelay) Close() {
	r.mu.Lock()
	r.closed = true
	for _, c := range r.conns {
		c.Close()
	}
	for _, c := range r.clients {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
