package quorum

import (
	"context"
	"net"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

// Raft's connections are thin streams: a heartbeat or a small AppendEntries
// at a time, each waiting for its answer. When one of their segments is
// lost, Linux retransmits after the minimum timeout (200 ms) and doubles it
// at every further loss: three losses in a row stall the connection for
// 1.4 s, four for 3 s, longer than the lease renewal can wait
// (lease − margin). Under 20–33 % packet loss on both followers' links that
// happened within minutes: the primary gave up its lease and was elected
// again, a needless failover.
//
// TCP_THIN_LINEAR_TIMEOUTS (Linux ≥ 2.6.34) keeps the timeout linear for the
// first six retransmissions of a stream with fewer than four segments in
// flight, so a lost segment is resent every ~200 ms instead of after 200,
// 400, 800, 1600 ms. It is the option made for this traffic; bulk streams
// (a snapshot being sent) are not thin and keep the normal backoff.
//
// The retransmission timeout itself is at least 200 ms on Linux, whatever
// the round trip: on a LAN, whose round trips are well under a
// millisecond, that floor is most of what a lost segment costs, and a
// takeover makes four commits in a row. Linux ≥ 6.15 lets a socket lower
// it (TCP_RTO_MIN_US); raft's sockets ask for rtoMin. The timeout is still
// srtt + 4·rttvar when that is longer, so a slow link keeps its own.

// rtoMin is the lowest retransmission timeout raft's sockets ask for.
const rtoMin = 50 * time.Millisecond

// thinControl is a net.Dialer / net.ListenConfig Control function that sets
// TCP_THIN_LINEAR_TIMEOUTS and TCP_RTO_MIN_US on the socket. It is best
// effort: a kernel that refused either would still carry raft, with the
// usual backoff or floor.
func thinControl(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_THIN_LINEAR_TIMEOUTS, 1)
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MIN_US, int(rtoMin/time.Microsecond))
	})
}

// thinConn sets TCP_THIN_LINEAR_TIMEOUTS on an accepted connection (an
// accepted socket does not reliably inherit it from the listener).
func thinConn(c net.Conn) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	return thinControl("", "", rc)
}

// thinListen listens on bind with thin-stream sockets.
func thinListen(bind string) (net.Listener, error) {
	lc := net.ListenConfig{Control: thinControl}
	return lc.Listen(context.Background(), "tcp", bind)
}

// tcpStream is raft's plain TCP stream layer (without a cluster key), as
// raft's own TCPStreamLayer but with thin-stream sockets.
type tcpStream struct {
	ln        net.Listener
	advertise net.Addr
}

func newTCPStream(bind string, advertise net.Addr) (*tcpStream, error) {
	ln, err := thinListen(bind)
	if err != nil {
		return nil, err
	}
	return &tcpStream{ln: ln, advertise: advertise}, nil
}

// Accept returns the next connection.
func (s *tcpStream) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err == nil {
		thinConn(c)
	}
	return c, err
}

// Close stops listening.
func (s *tcpStream) Close() error { return s.ln.Close() }

// Addr is the address peers reach this node at.
func (s *tcpStream) Addr() net.Addr { return s.advertise }

// Dial connects to a peer.
func (s *tcpStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Control: thinControl}
	return hedgedDial(timeout, dialHedgeEvery, dialHedgeMost, func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", string(addr))
	})
}
