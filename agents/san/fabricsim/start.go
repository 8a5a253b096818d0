package fabricsim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"time"
)

// Server is a running fabric simulator.
type Server struct {
	*Fabric
	// URL is the base URL, e.g. "https://127.0.0.1:40123".
	URL string
	// Addr is host:port.
	Addr string
	// CertPEM is the self-signed certificate served with TLS (nil without).
	CertPEM []byte

	srv  *http.Server
	done chan struct{}
}

// Start serves f on addr, which must be a loopback address ("127.0.0.1:0"
// picks a port). With useTLS it serves HTTPS with a fresh self-signed
// certificate for 127.0.0.1.
func Start(f *Fabric, addr string, useTLS bool) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("fabricsim: listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("fabricsim: listen address %q: only loopback addresses are allowed", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fabricsim: listen %s: %w", addr, err)
	}
	s := &Server{Fabric: f, Addr: ln.Addr().String(), done: make(chan struct{})}
	s.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	scheme := "http"
	if useTLS {
		cert, certPEM, err := selfSigned(host)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("fabricsim: certificate: %w", err)
		}
		s.CertPEM = certPEM
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	s.URL = scheme + "://" + s.Addr
	go func() {
		defer close(s.done)
		// Serve returns ErrServerClosed after Close; nothing else is expected.
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Close stops the server and waits for it.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}

func selfSigned(host string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "fabricsim"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP(host)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, certPEM, nil
}
