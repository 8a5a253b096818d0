package quorum

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Until a connection proves that its peer holds the cluster key (raft: the
// TLS handshake; gossip: a frame that decrypts), it is an outsider's, and
// an outsider must not be able to make the node hold more than a few
// megabytes or a few hundred descriptors, whatever it sends. An admission
// caps such connections per source address and in total. Addresses of the
// configured nodes have caps of their own, so that a flood from elsewhere
// never crowds out the cluster's own connections: a key holder's traffic
// keeps flowing under the flood.
//
// A peer is recognised by its source address only (TCP cannot be spoofed
// without a route back); a node whose connections leave from an address
// other than the one configured for it is treated as a stranger, which
// works as long as no flood fills the strangers' share.
type admitLimits struct {
	PerSource int // unauthenticated connections from one address that is no configured node's
	Total     int // from all such addresses together
	PerKnown  int // from one configured node's address
}

// admission counts the unauthenticated connections a port holds.
// Safe for concurrent use.
type admission struct {
	lim   admitLimits
	known map[netip.Addr]bool

	mu        sync.Mutex
	bySource  map[netip.Addr]int
	strangers int
}

// Refusal reasons (stable words: they appear in the log).
const (
	refusedPerSource = "too many unauthenticated connections from this address"
	refusedTotal     = "too many unauthenticated connections from outside the cluster"
)

func newAdmission(lim admitLimits, known map[netip.Addr]bool) *admission {
	return &admission{lim: lim, known: known, bySource: map[netip.Addr]int{}}
}

// sourceOf is the IP address a connection comes from (the zero Addr when
// the transport does not say: all such share one count).
func sourceOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap()
	}
	if a != nil {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			return ap.Addr().Unmap()
		}
	}
	return netip.Addr{}
}

// admit reserves a place for a connection from addr. It returns a release
// func (call it exactly once, when the connection is authenticated or
// closed), or a reason when a limit is reached.
func (a *admission) admit(addr net.Addr) (release func(), reason string) {
	src := sourceOf(addr)
	known := a.known[src]
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case known && a.bySource[src] >= a.lim.PerKnown:
		return nil, refusedPerSource
	case !known && a.bySource[src] >= a.lim.PerSource:
		return nil, refusedPerSource
	case !known && a.strangers >= a.lim.Total:
		return nil, refusedTotal
	}
	a.bySource[src]++
	if !known {
		a.strangers++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.bySource[src]--; a.bySource[src] <= 0 {
				delete(a.bySource, src)
			}
			if !known {
				a.strangers--
			}
		})
	}, ""
}

// isKnown reports whether addr is one of the configured nodes' addresses.
func (a *admission) isKnown(addr net.Addr) bool { return a.known[sourceOf(addr)] }

// held is the number of connections currently admitted (tests).
func (a *admission) held() (total, strangers int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.bySource {
		total += n
	}
	return total, a.strangers
}

// knownAddrs returns the IP addresses of the configured nodes' host:port
// addresses picked by addrOf. Names are resolved once, briefly; a name
// that does not resolve leaves that node a stranger to the limits (it is
// still served, see admitLimits).
func knownAddrs(peers []Peer, addrOf func(Peer) string) map[netip.Addr]bool {
	known := map[netip.Addr]bool{}
	for _, p := range peers {
		host, _, err := net.SplitHostPort(addrOf(p))
		if err != nil {
			continue
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			known[ip.Unmap()] = true
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		cancel()
		if err != nil {
			continue
		}
		for _, ip := range ips {
			known[ip.Unmap()] = true
		}
	}
	return known
}

// byteBudget bounds the bytes that unauthenticated gossip streams may make
// the node buffer, all together. Safe for concurrent use.
type byteBudget struct {
	mu   sync.Mutex
	left int64
}

func newByteBudget(n int64) *byteBudget { return &byteBudget{left: n} }

// take reserves n bytes; it reports false (and reserves nothing) when
// fewer are left.
func (b *byteBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

// give returns n bytes taken before.
func (b *byteBudget) give(n int64) {
	b.mu.Lock()
	b.left += n
	b.mu.Unlock()
}
