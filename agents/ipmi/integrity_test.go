package ipmi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
)

// mitm stands on the management network between an agent and a real BMC
// (go-ipmi's reference BMC, or ipmi_sim): it forwards every datagram, and
// its hooks may change a datagram, drop it, or add datagrams of its own,
// as anyone on that network can.
type mitm struct {
	conn   *net.UDPConn
	target *net.UDPAddr

	mu     sync.Mutex
	client *net.UDPAddr
	out    *net.UDPConn
	// up sees each request and returns what reaches the BMC; inject is
	// sent to the agent before it. down sees each reply and returns what
	// reaches the agent.
	up   func(b []byte) (fwd []byte, inject [][]byte)
	down func(b []byte) [][]byte
}

func startMITM(t *testing.T, target *net.UDPAddr) *mitm {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	out, err := net.DialUDP("udp", nil, target)
	if err != nil {
		t.Fatal(err)
	}
	m := &mitm{conn: c, target: target, out: out}
	t.Cleanup(func() { c.Close(); out.Close() })
	go m.carryUp()
	go m.carryDown()
	return m
}

func (m *mitm) port() int { return m.conn.LocalAddr().(*net.UDPAddr).Port }

func (m *mitm) hooks(up func([]byte) ([]byte, [][]byte), down func([]byte) [][]byte) {
	m.mu.Lock()
	m.up, m.down = up, down
	m.mu.Unlock()
}

func (m *mitm) carryUp() {
	buf := make([]byte, 2048)
	for {
		n, from, err := m.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		b := append([]byte(nil), buf[:n]...)
		m.mu.Lock()
		m.client = from
		up := m.up
		m.mu.Unlock()
		var inject [][]byte
		if up != nil {
			b, inject = up(b)
		}
		for _, d := range inject {
			m.conn.WriteToUDP(d, from)
		}
		if b != nil {
			m.out.Write(b)
		}
	}
}

func (m *mitm) carryDown() {
	buf := make([]byte, 2048)
	for {
		n, err := m.out.Read(buf)
		if err != nil {
			return
		}
		b := append([]byte(nil), buf[:n]...)
		m.mu.Lock()
		to, down := m.client, m.down
		m.mu.Unlock()
		ds := [][]byte{b}
		if down != nil {
			ds = down(b)
		}
		for _, d := range ds {
			m.conn.WriteToUDP(d, to)
		}
	}
}

// session tracks what an onlooker learns of an RMCP+ session in clear:
// the console's session ID (Open Session request) and whether the session
// carries commands yet (RAKP 4 seen).
type onlooker struct {
	mu        sync.Mutex
	consoleID uint32
	active    bool
}

func (o *onlooker) sawUp(b []byte) {
	if pt, p, ok := rmcpPlus(b); ok && pt&0x3f == typeOpenReq && len(p) >= 8 {
		o.mu.Lock()
		o.consoleID, o.active = binary.LittleEndian.Uint32(p[4:8]), false
		o.mu.Unlock()
	}
}

func (o *onlooker) sawDown(b []byte) (inSession bool) {
	pt, _, ok := rmcpPlus(b)
	o.mu.Lock()
	defer o.mu.Unlock()
	if ok && pt&0x3f == typeRAKP4 {
		o.active = true
		return false
	}
	return o.active && ok && pt&0x3f == typeIPMI
}

func (o *onlooker) id() uint32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.consoleID
}

// forgedStatus is a Get Chassis Status reply saying "power off" for
// requester sequence number seq, in an RMCP+ packet addressed to console
// session id, neither signed nor encrypted.
func forgedStatus(id uint32, seq uint8) []byte {
	msg := []byte{0x81, 0x01 << 2, 0, 0x20, seq << 2, 0x01, 0x00, 0x00, 0x00, 0x00}
	msg[2] = -(msg[0] + msg[1])
	var sum byte
	for _, c := range msg[3:] {
		sum += c
	}
	msg = append(msg, -sum)
	h := []byte{0x06, 0x00, 0xff, 0x07, authTypeRMCPP, typeIPMI, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(h[6:10], id)
	binary.LittleEndian.PutUint16(h[14:16], uint16(len(msg)))
	return append(h, msg...)
}

// stripped is an authenticated reply with its integrity trailer removed
// and its authenticated bit cleared; the payload is left as it was
// (encrypted, so go-ipmi still decrypts it).
func stripped(b []byte) []byte {
	pt, p, ok := rmcpPlus(b)
	if !ok || pt&bitAuthentic == 0 {
		return b
	}
	out := append([]byte(nil), b[:payloadStart+len(p)]...)
	out[5] &^= bitAuthentic
	return out
}

func ipmiParams(port int, cipher string) agents.Params {
	return simParams("127.0.0.1", port, cipher)
}

// Anyone on the management network can answer a request with an unsigned
// packet: here 63 forged "power is off" replies, one for every requester
// sequence number, go out ahead of each request of the session, while the
// BMC ignores power-off and stays on. go-ipmi alone takes the forgery and
// the fence "succeeds" on a server that still runs; the agent must refuse
// every forged reply and report the truth (still on).
func TestForgedRepliesAreRefused(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	bmc.SetIgnorePowerOff(true)
	for _, cipher := range []string{"17", "3"} {
		t.Run("cipher"+cipher, func(t *testing.T) {
			m := startMITM(t, bmc.Addr())
			var o onlooker
			m.hooks(func(b []byte) ([]byte, [][]byte) {
				o.sawUp(b)
				o.mu.Lock()
				active := o.active
				o.mu.Unlock()
				if !active {
					return b, nil
				}
				var inj [][]byte
				for seq := uint8(1); seq <= 63; seq++ {
					inj = append(inj, forgedStatus(o.id(), seq))
				}
				return b, inj
			}, func(b []byte) [][]byte {
				o.sawDown(b)
				return [][]byte{b}
			})
			p := ipmiParams(m.port(), cipher)
			p["power_timeout"] = "1"
			a := newAgent(t, p, nil)
			err := a.Off(ctxFor(t, 20*time.Second))
			if err == nil {
				t.Fatal("off confirmed on a BMC that stayed on: a forged reply was believed")
			}
			if !strings.Contains(err.Error(), "still reads on") {
				t.Fatalf("off = %v; want the BMC's own answer (still on)", err)
			}
			if !bmc.PoweredOn() {
				t.Fatal("the BMC is off")
			}
		})
	}
}

// A BMC (or an onlooker) that answers inside the session without the
// integrity code is not believed: the read-back is unknown, and says why.
func TestRepliesWithoutIntegrityAreRefused(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	m := startMITM(t, bmc.Addr())
	var o onlooker
	var strip sync.Mutex
	stripping := false
	m.hooks(func(b []byte) ([]byte, [][]byte) { o.sawUp(b); return b, nil }, func(b []byte) [][]byte {
		in := o.sawDown(b)
		strip.Lock()
		defer strip.Unlock()
		if in && stripping {
			return [][]byte{stripped(b)}
		}
		return [][]byte{b}
	})
	p := ipmiParams(m.port(), "17")
	p["command_timeout"] = "0.3"
	p["command_retries"] = "1"
	a := newAgent(t, p, nil)
	wantStatus(t, a, agents.StateOn) // the session works while replies are signed
	strip.Lock()
	stripping = true
	strip.Unlock()
	_, err := a.Status(ctxFor(t, 20*time.Second))
	if err == nil {
		t.Fatal("status taken from a reply without its integrity code")
	}
	if !agents.IsUnknown(err) || !strings.Contains(err.Error(), "no integrity code") {
		t.Fatalf("status = %v; want unknown, naming the missing integrity code", err)
	}
}

// A reply of the session recorded earlier and sent again is refused:
// sixty-three "power is off" replies recorded while the node was off (one
// for every requester sequence number) are replayed in place of each
// answer once it is on. go-ipmi alone takes the one whose sequence
// number matches.
func TestReplayedRepliesAreRefused(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: false})
	m := startMITM(t, bmc.Addr())
	var o onlooker
	var mu sync.Mutex
	var recorded [][]byte
	replaying := false
	m.hooks(func(b []byte) ([]byte, [][]byte) { o.sawUp(b); return b, nil }, func(b []byte) [][]byte {
		in := o.sawDown(b)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case in && replaying:
			return recorded
		case in:
			recorded = append(recorded, b)
		}
		return [][]byte{b}
	})
	a := newAgent(t, ipmiParams(m.port(), "17"), nil)
	for i := 0; i < 64; i++ {
		wantStatus(t, a, agents.StateOff)
	}
	bmc.SetPower(true)
	mu.Lock()
	replaying = true
	mu.Unlock()
	st, err := a.Status(ctxFor(t, 20*time.Second))
	if err == nil && st == agents.StateOff {
		t.Fatal("a replayed reply was believed: status off while the BMC is on")
	}
	if !strings.Contains(err.Error(), "a replay") {
		t.Fatalf("status = %v, %v; want refused as a replay", st, err)
	}
}

// Asked for suite 17, the BMC answers with suite 3's algorithms (here an
// onlooker changed the request, so the BMC itself agrees to the weaker
// suite): the agent refuses at once and names both, as ipmitool -C 17 does.
func TestCipherDowngradeIsRefused(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	m := startMITM(t, bmc.Addr())
	m.hooks(func(b []byte) ([]byte, [][]byte) {
		if pt, p, ok := rmcpPlus(b); ok && pt&0x3f == typeOpenReq && len(p) >= 32 {
			b = append([]byte(nil), b...)
			q := b[payloadStart:]
			q[12], q[20], q[28] = 0x01, 0x01, 0x01 // RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128
		}
		return b, nil
	}, nil)
	a := newAgent(t, ipmiParams(m.port(), "17"), nil)
	_, err := a.Status(ctxFor(t, 20*time.Second))
	if err == nil {
		t.Fatal("status worked on a session downgraded to suite 3")
	}
	msg := err.Error()
	if !errors.Is(err, agents.ErrFailed) || errors.Is(err, agents.ErrAuth) || agents.IsUnknown(err) {
		t.Fatalf("downgrade = %v; want a failure that is not an authentication failure", err)
	}
	for _, want := range []string{"SHA256", "SHA1", "asked for", "answered"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("downgrade error %q does not name %q", msg, want)
		}
	}
}

// A BMC whose RAKP 2 carries no key exchange authentication code never
// showed it knows the password. The agent says so, instead of "wrong
// password" (an empty code only happened to compare unequal).
func TestRAKPWithoutPasswordCheckIsRefused(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	m := startMITM(t, bmc.Addr())
	m.hooks(nil, func(b []byte) [][]byte {
		if pt, p, ok := rmcpPlus(b); ok && pt&0x3f == typeRAKP2 && len(p) > 40 && p[1] == 0 {
			b = append([]byte(nil), b[:payloadStart+40]...)
			binary.LittleEndian.PutUint16(b[14:16], 40)
		}
		return [][]byte{b}
	})
	a := newAgent(t, ipmiParams(m.port(), "17"), nil)
	_, err := a.Status(ctxFor(t, 20*time.Second))
	if err == nil {
		t.Fatal("status worked without the BMC proving it knows the password")
	}
	if errors.Is(err, agents.ErrAuth) || !strings.Contains(err.Error(), "skipped the password check") {
		t.Fatalf("RAKP 2 without a code = %v; want it named, not taken for a wrong password", err)
	}
}

// Real sessions pass the guard untouched: every reply of go-ipmi's BMC
// and of ipmi_sim verifies, and none is refused.
func TestTrustedSessionsPass(t *testing.T) {
	bmc := startBMC(t, ipmisim.BMCConfig{PoweredOn: true})
	sim := startOpenIPMI(t, ipmisim.OpenIPMIConfig{})
	for _, tc := range []struct {
		name   string
		port   int
		cipher string
	}{{"reference-17", bmc.Port(), "17"}, {"reference-3", bmc.Port(), "3"}, {"ipmi_sim-3", sim.Port, "3"}} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAgent(t, ipmiParams(tc.port, tc.cipher), nil)
			for i := 0; i < 5; i++ {
				wantStatus(t, a, agents.StateOn)
			}
			s, ok, err := a.held.Take(context.Background())
			if err != nil || !ok {
				t.Fatalf("no held session: %v", err)
			}
			defer s.release()
			g := s.conn.guard
			g.mu.Lock()
			defer g.mu.Unlock()
			if !g.active || g.seq < 5 || g.total != 0 || !bytes.Equal(g.kuid[:8], []byte("password")) {
				t.Fatalf("guard: active %v, last sequence %d, %d refused", g.active, g.seq, g.total)
			}
		})
	}
}

// The guard reads datagrams from the network before anything else: no
// datagram, in any state of the session, may make it panic, and none that
// is not signed with the session's key passes once the session is up.
func FuzzGuard(f *testing.F) {
	f.Add(forgedStatus(7, 3), uint8(0))
	f.Add(stripped(forgedStatus(7, 3)), uint8(1))
	f.Add([]byte{0x06, 0x00, 0xff, 0x07, 0x06, 0x13, 0, 0, 0, 0, 0, 0, 0, 0, 40, 0}, uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, state uint8) {
		g := newGuard(nil, "bmc", "admin", "password", nil)
		g.asked, g.consoleID = true, 7
		g.want = algorithms{0x03, 0x04, 0x01}
		g.got = g.want
		switch state % 3 {
		case 1:
			g.active, g.k1 = true, bytes.Repeat([]byte{1}, 32)
		case 2:
			g.outbound(b)
		}
		drop, _ := g.inbound(b)
		if state%3 == 1 && !drop {
			t.Fatalf("an unsigned datagram passed: %x", b)
		}
	})
}
