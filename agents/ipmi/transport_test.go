package ipmi

import (
	"net"
	"sync"
	"testing"
	"time"
)

// lossyEcho answers every datagram after delay, except the first copy
// of each (a request lost on the way): the agent's resend is answered.
func lossyEcho(t *testing.T, delay time.Duration) *net.UDPAddr {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var mu sync.Mutex
	seen := map[string]bool{}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			b := string(buf[:n])
			mu.Lock()
			first := !seen[b]
			seen[b] = true
			mu.Unlock()
			if first && b[0] != 'w' {
				continue
			}
			time.AfterFunc(delay, func() { c.WriteToUDP([]byte(b), from) })
		}
	}()
	return c.LocalAddr().(*net.UDPAddr)
}

// A request whose first copy was lost is answered a round trip after its
// resend. Its time since the first copy — the timeout plus a round trip
// — is not the device's round trip: taken as a sample, each loss would
// push the estimate (and the next timeouts) up by most of a timeout. Once
// the device's round trip is known, an answer that comes a round trip
// after the last copy answers that copy.
func TestResentRequestsDoNotInflateTheEstimate(t *testing.T) {
	const rtt = 5 * time.Millisecond
	addr := lossyEcho(t, rtt)
	c, err := net.DialUDP("udp", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	est := newEstimator(300 * time.Millisecond)
	tc := &timedConn{UDPConn: c, est: est, retries: 3}
	buf := make([]byte, 64)
	exchange := func(req string) {
		t.Helper()
		if _, err := tc.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		if _, err := tc.Read(buf); err != nil {
			t.Fatalf("%s: %v", req, err)
		}
	}
	exchange("warm-up") // answered at once ('w'): the device's round trip is known
	for i := range 20 {
		exchange("request " + string(rune('a'+i)))
	}
	srtt, rto, _ := est.roundTrip()
	t.Logf("after 20 requests each lost once: srtt %v, timeout %v", srtt, rto)
	if srtt > 20*rtt {
		t.Fatalf("srtt %v after 20 lost-once requests of a %v device: each resend's wait was taken for the round trip", srtt, rtt)
	}
}
