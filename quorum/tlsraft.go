package quorum

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"sync"
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
// ends of a raft connection.
func clusterTLS(key []byte, cluster, self string) (*tls.Config, error) {
	seed, err := hkdf.Key(sha256.New, key, []byte("fenced raft CA v1"), "cluster "+cluster, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("raft TLS: deriving the cluster CA: %w", err)
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
		return nil, fmt.Errorf("raft TLS: cluster CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("raft TLS: cluster CA: %w", err)
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
		Subject:      pkix.Name{CommonName: self},
		DNSNames:     []string{raftTLSName},
		NotBefore:    certNotBefore,
		NotAfter:     certNotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("raft TLS: node certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: priv}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ServerName:   raftTLSName,
	}, nil
}

// handshakeTimeout bounds how long a connecting peer may take to prove it
// holds the key; until then it holds only a goroutine and a socket.
var handshakeTimeout = 10 * time.Second

// tlsStream is a raft.StreamLayer speaking mutual TLS over TCP.
type tlsStream struct {
	ln        net.Listener
	advertise net.Addr
	conf      *tls.Config
}

func newTLSStream(bind string, advertise net.Addr, conf *tls.Config) (*tlsStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	return &tlsStream{ln: ln, advertise: advertise, conf: conf}, nil
}

// Accept returns the next connection. Its handshake runs on its first read,
// in raft's goroutine for that connection (so a slow peer delays no one
// else), within handshakeTimeout.
func (s *tlsStream) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	return &serverConn{Conn: tls.Server(c, s.conf)}, nil
}

func (s *tlsStream) Close() error { return s.ln.Close() }

// serverConn completes the TLS handshake under a deadline before the first
// read, then reads without one (raft's connections idle between calls).
type serverConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *serverConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(handshakeTimeout))
		if c.err = c.Conn.Handshake(); c.err == nil {
			c.err = c.Conn.SetDeadline(time.Time{})
		}
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(b)
}

// Dial connects to a peer; the timeout covers the TLS handshake.
func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), s.conf)
}

// Addr is the address peers reach this node at.
func (s *tlsStream) Addr() net.Addr { return s.advertise }
