package ipmisim

import (
	"net"
	"testing"
	"time"
)

// The relay holds each datagram for its delay in each direction, keeps
// their order, and drops everything while dead.
func TestRelay(t *testing.T) {
	echo, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := echo.ReadFromUDP(buf)
			if err != nil {
				return
			}
			echo.WriteToUDP(buf[:n], from)
		}
	}()
	r, err := StartRelay(echo.LocalAddr().(*net.UDPAddr), 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.DialUDP("udp", nil, r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	for _, m := range []string{"a", "b", "c"} {
		c.Write([]byte(m))
	}
	buf := make([]byte, 100)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for _, want := range []string{"a", "b", "c"} {
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
		}
	}
	if rtt := time.Since(start); rtt < 200*time.Millisecond || rtt > time.Second {
		t.Fatalf("round trip %v through a relay of 100ms each way", rtt)
	}
	if r.Forwarded() != 3 {
		t.Fatalf("forwarded %d", r.Forwarded())
	}

	r.SetDead(true)
	c.Write([]byte("lost"))
	c.SetReadDeadline(time.Now().Add(400 * time.Millisecond))
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("a dead relay answered %q", buf[:n])
	}
	r.SetDead(false)
	r.SetDelay(0)
	c.Write([]byte("back"))
	c.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "back" {
		t.Fatalf("after recovery: %q, %v", buf[:n], err)
	}
}
