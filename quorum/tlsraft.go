package quorum

import (
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Raft traffic is protected with mutual TLS whose trust root is derived
// from the cluster key (the gossip key every node already holds): the key
// and the cluster name determine an Ed25519 CA key; each node signs a fresh
// certificate with it at start. A peer is accepted only if its certificate
// chains to that CA, so only holders of the key take part in elections and
// replication; the trust model is corosync's shared authkey, with no
// certificates to distribute or renew. Validity runs from 2000 to 2200 so
// that no clock jump can make a peer's certificate look expired.
const raftTLSName = "fenced-raft"

var (
	certNotBefore = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	certNotAfter  = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// clusterTLS returns the TLS settings of node self in cluster, for both
// ends of a raft connection, under keys (the primary first): the node's
// certificate is signed by the primary's CA, and a peer's is accepted if
// it chains to any key's CA (a rotation: see keyring.go).
func clusterTLS(keys [][]byte, cluster, self string) (*tls.Config, error) {
	return clusterTLSSupporting(keys, cluster, self, ClusterVersionMax)
}

// supportsPrefix, in a node certificate's organizational unit, names the
// highest cluster version the node supports (absent: an older fenced,
// version 1). The certificate is signed by the cluster CA, so a peer's
// claim is as trusted as its key, and it is bound to the very connection
// the guard admits (gossip metadata may lag a restart).
const supportsPrefix = "fenced-cluster-version-max="

// clusterTLSSupporting is clusterTLS for a node advertising supports.
func clusterTLSSupporting(keys [][]byte, cluster, self string, supports int) (*tls.Config, error) {
	if len(keys) == 0 {
		return nil, errors.New("raft TLS: no cluster key")
	}
	pool := x509.NewCertPool()
	var (
		ca    *x509.Certificate
		caKey ed25519.PrivateKey
	)
	for i, key := range keys {
		c, k, err := clusterCA(key, cluster)
		if err != nil {
			return nil, err
		}
		pool.AddCert(c)
		if i == 0 {
			ca, caKey = c, k
		}
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("raft TLS: node key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, fmt.Errorf("raft TLS: serial: %w", err)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: self, OrganizationalUnit: []string{supportsPrefix + strconv.Itoa(supports)}},
		DNSNames:     []string{raftTLSName},
		NotBefore:    certNotBefore,
		NotAfter:     certNotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("raft TLS: node certificate: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: priv}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ServerName:   raftTLSName,
	}, nil
}

// clusterCA is the CA of key in cluster: its key is derived from both, and
// its certificate is the same on every node (Ed25519 signs
// deterministically), each key's with a key identifier of its own.
func clusterCA(key []byte, cluster string) (*x509.Certificate, ed25519.PrivateKey, error) {
	seed, err := hkdf.Key(sha256.New, key, []byte("fenced raft CA v1"), "cluster "+cluster, ed25519.SeedSize)
	if err != nil {
		return nil, nil, fmt.Errorf("raft TLS: deriving the cluster CA: %w", err)
	}
	caKey := ed25519.NewKeyFromSeed(seed)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fenced cluster " + cluster},
		NotBefore:             certNotBefore,
		NotAfter:              certNotAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("raft TLS: cluster CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, fmt.Errorf("raft TLS: cluster CA: %w", err)
	}
	return ca, caKey, nil
}

// handshakeTimeout bounds how long a connecting peer may take to prove it
// holds the key; until then it holds only a goroutine, a socket and one of
// the places raftAdmit allows.
var handshakeTimeout = 10 * time.Second

// raftAdmit caps the raft connections still in their TLS handshake (see
// admitLimits). Once the handshake is done the peer holds the key; only
// then does raft get the connection and allocate its buffers (256 KiB for
// reading, 4 KiB for writing). A handshake in progress costs a goroutine
// and the TLS state, about 10 KiB (measured), so 64 strangers hold under
// 1 MiB. A
// configured node opens a handful of connections (replication, heartbeat,
// pipeline, votes, snapshots), all at start or after a link breaks.
var raftAdmit = admitLimits{PerSource: 8, Total: 64, PerKnown: 64}

// tlsStream is a raft.StreamLayer speaking mutual TLS over TCP. It accepts
// on its own goroutine and runs each handshake on another, under the
// admission's caps and handshakeTimeout, and hands raft only connections
// whose peer proved it holds the cluster key. (raft's own accept loop
// starts a reader with its buffers for every connection it gets, and runs
// a handshake only on the first read: an outsider's idle connections would
// each cost that memory.)
type tlsStream struct {
	ln        net.Listener
	advertise net.Addr
	// conf is read at each handshake, so that a change of keys (setConf)
	// applies to new connections and leaves the established ones be.
	conf    atomic.Pointer[streamConf]
	admit   *admission
	refused *refusals
	log     *slog.Logger
	timeout time.Duration // handshakeTimeout when the stream was made

	ready chan net.Conn // handshake done, waiting for raft's Accept
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	mu      sync.Mutex
	shut    bool                  // Close began
	pending map[net.Conn]struct{} // in their handshake; closed at Close

	guard      func(peer string, supports int) string // streamGuard.Admit
	peerWarned map[string]time.Time                   // refusedPeer's last line per peer and reason
	connsMu    sync.Mutex
	conns      map[*keyedConn]struct{} // established (accepted or dialled), until closed
}

// streamGuard says whose connections the stream layer favours (the
// configured nodes' addresses) and where it reports what it refuses.
type streamGuard struct {
	Known map[netip.Addr]bool
	Log   *slog.Logger
	// Admit, when set, says why a peer that completed the handshake (its
	// certificate's name, and the highest cluster version it supports)
	// may not talk raft with this node ("" = it may); checked both ways,
	// on connections accepted and dialled.
	Admit func(peer string, supports int) string
	// KeyIDs are the IDs of the keys conf is made of, the primary first.
	KeyIDs []string
}

// setConf makes conf (of the keys ids) the settings of the connections
// made or accepted from now on; established ones keep theirs.
func (s *tlsStream) setConf(conf *tls.Config, ids []string) {
	s.conf.Store(newStreamConf(conf, ids))
}

// streamConf is the TLS settings of a stream and the IDs of the keys they
// are made of (for the refusals' lines).
type streamConf struct {
	tls     *tls.Config
	ids     string // "a1b2c3d4, e5f6a7b8"
	primary string
}

func newStreamConf(conf *tls.Config, ids []string) *streamConf {
	sc := &streamConf{tls: conf, ids: strings.Join(ids, ", ")}
	if len(ids) > 0 {
		sc.primary = ids[0]
	}
	return sc
}

func newTLSStream(bind string, advertise net.Addr, conf *tls.Config, g streamGuard) (*tlsStream, error) {
	ln, err := thinListen(bind)
	if err != nil {
		return nil, err
	}
	log := g.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &tlsStream{ln: ln, advertise: advertise,
		admit: newAdmission(raftAdmit, g.Known), refused: newRefusals(log), log: log, timeout: handshakeTimeout,
		ready: make(chan net.Conn), stop: make(chan struct{}), pending: map[net.Conn]struct{}{},
		guard: g.Admit, peerWarned: map[string]time.Time{}, conns: map[*keyedConn]struct{}{}}
	s.conf.Store(newStreamConf(conf, g.KeyIDs))
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// acceptLoop accepts connections, refuses those over the caps at once (so
// a flood holds no descriptor longer than it takes to close it), and
// starts a handshake for the others.
func (s *tlsStream) acceptLoop() {
	defer s.wg.Done()
	var delay time.Duration
	var warned time.Time
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.stop:
				return
			default:
			}
			// Out of descriptors (or another transient error): wait
			// rather than spin; the caps make this rare.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			if time.Since(warned) >= refusalEvery {
				warned = time.Now()
				s.log.Warn("raft: accepting connections", "err", err)
			}
			select {
			case <-s.stop:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		thinConn(c)
		release, reason := s.admit.admit(c.RemoteAddr())
		if reason != "" {
			c.Close()
			s.refused.note("raft", reason, c.RemoteAddr().String(), "")
			continue
		}
		s.mu.Lock()
		if s.shut {
			s.mu.Unlock()
			release()
			c.Close()
			return
		}
		s.pending[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.handshake(c, release)
	}
}

// handshake completes the TLS handshake of raw within handshakeTimeout and
// hands the connection to raft.
func (s *tlsStream) handshake(raw net.Conn, release func()) {
	defer s.wg.Done()
	sc := s.conf.Load()
	tc := tls.Server(raw, sc.tls)
	raw.SetDeadline(time.Now().Add(s.timeout))
	err := tc.Handshake()
	if err == nil {
		err = raw.SetDeadline(time.Time{})
	}
	s.mu.Lock()
	delete(s.pending, raw)
	s.mu.Unlock()
	release()
	if err != nil {
		raw.Close()
		select {
		case <-s.stop:
			return // closed at shutdown: not the peer's doing
		default:
		}
		refusal := sc.keyRefusal(err)
		if refusal == "" && brokenOff(err) && s.admit.isKnown(raw.RemoteAddr()) {
			// A cluster node's dial that gave up (a lossy link; the
			// losers of a hedged dial): not a stranger's traffic.
			s.log.Debug("raft: a cluster node's connection ended during its TLS handshake", "from", raw.RemoteAddr().String(), "err", err)
			return
		}
		reason := "TLS handshake failed (no or wrong cluster key)"
		if refusal != "" {
			reason = refusal
		} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			reason = "no TLS handshake within " + s.timeout.String()
		} else if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			reason = "closed before completing the TLS handshake"
		}
		s.refused.note("raft", reason, raw.RemoteAddr().String(), err.Error())
		return
	}
	if s.admitted(tc) != nil {
		return
	}
	kc := s.track(tc)
	select {
	case s.ready <- kc:
	case <-s.stop:
		kc.Close()
	}
}

// brokenOff reports whether a handshake ended because the connection did:
// closed, reset or timed out, rather than refused over its contents.
func brokenOff(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.As(err, &ne) && ne.Timeout()
}

// keyedConn is an established raft connection, known to its stream until
// it is closed (closeRemoved looks at its peer's certificate).
type keyedConn struct {
	*tls.Conn
	s    *tlsStream
	once sync.Once
}

func (c *keyedConn) Close() error {
	c.once.Do(func() {
		c.s.connsMu.Lock()
		delete(c.s.conns, c)
		c.s.connsMu.Unlock()
	})
	return c.Conn.Close()
}

func (s *tlsStream) track(tc *tls.Conn) *keyedConn {
	kc := &keyedConn{Conn: tc, s: s}
	s.connsMu.Lock()
	s.conns[kc] = struct{}{}
	s.connsMu.Unlock()
	return kc
}

// closeRemoved closes the established connections whose peer's certificate
// chains to none of this node's keys now (it was made under a key since
// removed), unless keep(peer) says the peer holds keys it can connect
// again with: a rotation's connections stay, a node left with only a
// removed key loses them. It returns the peers whose connections it
// closed, each once.
func (s *tlsStream) closeRemoved(keep func(peer string) bool) []string {
	roots := s.conf.Load().tls.RootCAs
	s.connsMu.Lock()
	conns := make([]*keyedConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.connsMu.Unlock()
	var closed []string
	for _, c := range conns {
		certs := c.ConnectionState().PeerCertificates
		if len(certs) == 0 {
			continue
		}
		inter := x509.NewCertPool()
		for _, ic := range certs[1:] {
			inter.AddCert(ic)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		peer := certs[0].Subject.CommonName
		if err == nil || keep(peer) {
			continue
		}
		c.Close()
		if !slices.Contains(closed, peer) {
			closed = append(closed, peer)
		}
	}
	return closed
}

// Accept returns the next connection whose peer completed the handshake.
func (s *tlsStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.ready:
		return c, nil
	case <-s.stop:
		return nil, net.ErrClosed
	}
}

// Close stops accepting, aborts the handshakes in progress and waits for
// their goroutines.
func (s *tlsStream) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		err = s.ln.Close()
		s.mu.Lock()
		s.shut = true
		for c := range s.pending {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
		s.refused.close()
	})
	return err
}

// Dial connects to a peer; the timeout covers the TLS handshake. A peer
// refused for its keys, or refusing this node's, is logged as the
// accepting side logs it (raft itself retries, at DEBUG).
func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	sc := s.conf.Load()
	d := tls.Dialer{NetDialer: &net.Dialer{Control: thinControl}, Config: sc.tls}
	nc, err := hedgedDial(timeout, dialHedgeEvery, dialHedgeMost, func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", string(addr))
	})
	if err != nil {
		if r := sc.keyRefusal(err); r != "" {
			s.refused.note("raft-dial", r, string(addr), err.Error())
		}
		return nil, err
	}
	c := nc.(*tls.Conn)
	if err := s.admitted(c); err != nil {
		return nil, err
	}
	return s.track(c), nil
}

// keyRefusal is the refusal reason of a handshake that failed over the
// keys: the peer's certificate chains to none of this node's keys, or the
// peer refused this node's; "" for any other failure.
func (sc *streamConf) keyRefusal(err error) string {
	var ua x509.UnknownAuthorityError
	switch {
	case errors.As(err, &ua):
		return "TLS handshake refused: the peer's certificate is signed with none of this node's keys (ids " + sc.ids + "): the peer's key was removed or never added"
	case strings.Contains(err.Error(), "remote error: tls: unknown certificate authority"),
		strings.Contains(err.Error(), "remote error: tls: bad certificate"):
		return "TLS handshake refused by the peer: it does not hold this node's primary key (id " + sc.primary + "): add it on the peer, or this node's key was removed there"
	}
	return ""
}

// Addr is the address peers reach this node at.
func (s *tlsStream) Addr() net.Addr { return s.advertise }

// peerOf is the node name and the highest supported cluster version a
// verified peer certificate states.
func peerOf(cs tls.ConnectionState) (string, int) {
	if len(cs.PeerCertificates) == 0 {
		return "", 1
	}
	c := cs.PeerCertificates[0]
	v := 1
	for _, ou := range c.Subject.OrganizationalUnit {
		if n, err := strconv.Atoi(strings.TrimPrefix(ou, supportsPrefix)); err == nil && strings.HasPrefix(ou, supportsPrefix) && n > 1 {
			v = n
		}
	}
	return c.Subject.CommonName, v
}

// admitted applies the guard's Admit to a connection whose handshake is
// done; a refused one is closed and logged (once per peer and reason in
// refusalEvery).
func (s *tlsStream) admitted(tc *tls.Conn) error {
	if s.guard == nil {
		return nil
	}
	peer, v := peerOf(tc.ConnectionState())
	why := s.guard(peer, v)
	if why == "" {
		return nil
	}
	tc.Close()
	s.refusedPeer(peer, why, tc.RemoteAddr().String())
	return fmt.Errorf("raft: %s (%s) refused: %s", peer, tc.RemoteAddr(), why)
}

// refusedPeer logs that a cluster member's raft connection was refused,
// at most once per peer and reason in refusalEvery: it holds the key, so
// this is an admin's matter, not an outsider's.
func (s *tlsStream) refusedPeer(peer, why, from string) {
	s.mu.Lock()
	k := peer + "\x00" + why
	last, ok := s.peerWarned[k]
	if ok && time.Since(last) < refusalEvery {
		s.mu.Unlock()
		return
	}
	s.peerWarned[k] = time.Now()
	s.mu.Unlock()
	s.log.Warn("raft: refused a connection of a cluster node", "peer", peer, "from", from, "reason", why)
}
