package quorum

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

// TestRaftStreamsAreThin: both ends of a raft connection, plain and TLS,
// have TCP_THIN_LINEAR_TIMEOUTS set (see thin.go).
func TestRaftStreamsAreThin(t *testing.T) {
	thin := func(t *testing.T, c net.Conn, side string) {
		t.Helper()
		if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS
			c = tc.NetConn()
		}
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v, rto int
		var gerr, rerr error
		rc.Control(func(fd uintptr) {
			v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_THIN_LINEAR_TIMEOUTS)
			rto, rerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MIN_US)
		})
		if gerr != nil || v != 1 {
			t.Errorf("%s: TCP_THIN_LINEAR_TIMEOUTS = %d (%v), want 1", side, v, gerr)
		}
		switch {
		case errors.Is(rerr, unix.ENOPROTOOPT):
			t.Logf("%s: this kernel has no TCP_RTO_MIN_US (Linux < 6.15): the 200 ms floor stays", side)
		case rerr != nil || time.Duration(rto)*time.Microsecond < rtoMin || time.Duration(rto)*time.Microsecond > rtoMin+10*time.Millisecond:
			// (the kernel keeps it in jiffies: 50 ms reads 52 at 250 Hz)
			t.Errorf("%s: TCP_RTO_MIN_US = %d (%v), want %d (to a jiffy)", side, rto, rerr, rtoMin/time.Microsecond)
		}
	}
	conf, err := clusterTLS([][]byte{keyA}, "prod", "a")
	if err != nil {
		t.Fatal(err)
	}
	open := map[string]func(bind string, adv net.Addr) (raft.StreamLayer, error){
		"tcp": func(bind string, adv net.Addr) (raft.StreamLayer, error) { return newTCPStream(bind, adv) },
		"tls": func(bind string, adv net.Addr) (raft.StreamLayer, error) {
			return newTLSStream(bind, adv, conf, streamGuard{})
		},
	}
	for name, open := range open {
		t.Run(name, func(t *testing.T) {
			bind := freeAddr(t)
			adv, err := net.ResolveTCPAddr("tcp", bind)
			if err != nil {
				t.Fatal(err)
			}
			s, err := open(bind, adv)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := s.Accept()
				if err != nil {
					t.Error(err)
				}
				accepted <- c
			}()
			c, err := s.Dial(raft.ServerAddress(s.Addr().String()), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			thin(t, c, "dialed")
			select {
			case a := <-accepted:
				if a != nil {
					defer a.Close()
					thin(t, a, "accepted")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no connection accepted")
			}
		})
	}
}
