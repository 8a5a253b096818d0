package redfishsim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is a simulator listening on an address.
type Server struct {
	*Sim
	// URL is the base URL clients connect to ("https://127.0.0.1:PORT").
	URL string
	// Addr is the host:port listened on.
	Addr string
	// CACertPEM is the certificate of the CA that signed the server's
	// certificate (TLS only): what a client passes as its CA file.
	CACertPEM []byte

	srv       *http.Server
	done      chan error
	closeOnce sync.Once
	closeErr  error
}

// Start serves a new simulator on addr ("" means 127.0.0.1:0, a free
// loopback port), over HTTPS with a freshly generated certificate when
// useTLS is set, else plain HTTP.
func Start(addr string, useTLS bool, opts Options) (*Server, error) {
	sim, err := New(opts)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redfishsim: listen %s: %w", addr, err)
	}
	s := &Server{
		Sim:  sim,
		Addr: ln.Addr().String(),
		srv: &http.Server{
			Handler:           sim,
			ReadHeaderTimeout: 10 * time.Second,
			// BMCs speak HTTP/1.1; an empty map also keeps Hijack (used to
			// drop connections) available under TLS.
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
			// Handshake failures (a client refusing our certificate) are
			// expected in tests: debug lines, not stderr noise.
			ErrorLog: slog.NewLogLogger(sim.log.Handler(), slog.LevelDebug),
		},
		done: make(chan error, 1),
	}
	scheme := "http"
	if useTLS {
		host, _, _ := net.SplitHostPort(s.Addr)
		caPEM, cert, err := selfSignedPair(host)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("redfishsim: certificate: %w", err)
		}
		s.CACertPEM = caPEM
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	s.URL = scheme + "://" + s.Addr
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

// Close stops the server at once and stops pending power transitions. It
// may be called more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		err := s.srv.Close()
		if serr := <-s.done; err == nil {
			err = serr
		}
		s.Sim.Close()
		s.closeErr = err
	})
	return s.closeErr
}

// selfSignedPair makes a CA and a server certificate it signs for host,
// localhost, 127.0.0.1 and ::1, the way a BMC ships a self-signed one.
func selfSignedPair(host string) (caPEM []byte, cert tls.Certificate, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: "redfishsim CA", Organization: []string{"fenced test BMC"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour * 365),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, cert, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, cert, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, cert, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano() + 1),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour * 365),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, cert, err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: crypto.Signer(key)}
	return caPEM, cert, nil
}
