package ipmi

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/crypto"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/agents/ipmi/ipmisim"
)

func cryptoAuthCode(auth types.AuthType, password string, sid, seq uint32, msg []byte) []byte {
	return crypto.AuthCodeMultiSession(auth, []byte(password), sid, seq, msg)
}

// onlooker15 follows an IPMI v1.5 session in clear: its ID, as the
// agent's requests carry it once the session is set up.
type onlooker15 struct {
	mu  sync.Mutex
	sid uint32
}

func (o *onlooker15) sawUp(b []byte) {
	if _, _, sid, _, _, ok := lan15(b); ok && sid != 0 {
		o.mu.Lock()
		o.sid = sid
		o.mu.Unlock()
	}
}

// inSession: b is a reply of the session the requests carry.
func (o *onlooker15) inSession(b []byte) bool {
	_, _, sid, _, _, ok := lan15(b)
	o.mu.Lock()
	defer o.mu.Unlock()
	return ok && sid != 0 && sid == o.sid
}

func (o *onlooker15) id() uint32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sid
}

// forgedStatus15 is a Get Chassis Status reply saying "power off" for
// requester sequence number rq, in v1.5 framing addressed to session sid
// with a high session sequence number, under auth type auth with an
// AuthCode of zeros (whoever forges it does not know the password).
func forgedStatus15(sid uint32, rq uint8, auth types.AuthType) []byte {
	msg := forgedStatus(0, rq)[payloadStart:]
	b := []byte{0x06, 0x00, 0xff, 0x07, byte(auth), 0xf0, 0xff, 0xff, 0xff, 0, 0, 0, 0}
	b[9], b[10], b[11], b[12] = byte(sid), byte(sid>>8), byte(sid>>16), byte(sid>>24)
	if auth != types.AuthTypeNone {
		b = append(b, make([]byte, 16)...)
	}
	return append(append(b, byte(len(msg))), msg...)
}

func v15Params(port int) agents.Params {
	p := simParams("127.0.0.1", port, "3")
	p["lanplus"] = "0"
	p["command_timeout"] = "0.3"
	p["command_retries"] = "1"
	return p
}

// Against ipmi_sim over IPMI v1.5, forged "power is off" replies — under
// auth type none, and under MD5 with a code made without the password —
// go out ahead of every request of the session, one for each requester
// sequence number. go-ipmi alone takes the first; the agent must refuse
// them and read the BMC's own answer (on).
func TestV15ForgedRepliesAreRefused(t *testing.T) {
	sim := startOpenIPMI(t, ipmisim.OpenIPMIConfig{})
	for _, auth := range []types.AuthType{types.AuthTypeNone, types.AuthTypeMD5} {
		t.Run(auth15Name(auth), func(t *testing.T) {
			m := startMITM(t, &net.UDPAddr{IP: net.ParseIP(sim.Host), Port: sim.Port})
			var o onlooker15
			m.hooks(func(b []byte) ([]byte, [][]byte) {
				o.sawUp(b)
				if o.id() == 0 {
					return b, nil
				}
				var inj [][]byte
				for rq := uint8(1); rq <= 63; rq++ {
					inj = append(inj, forgedStatus15(o.id(), rq, auth))
				}
				return b, inj
			}, nil)
			a := newAgent(t, v15Params(m.port()), nil)
			wantStatus(t, a, agents.StateOn)
			if o.id() == 0 {
				t.Fatal("the onlooker saw no session: nothing was forged")
			}
		})
	}
}

// Replies of the session recorded while the host was off are replayed in
// place of every answer once it is on: each verifies (it is the BMC's),
// and each is refused as a replay.
func TestV15ReplayedRepliesAreRefused(t *testing.T) {
	sim := startOpenIPMI(t, ipmisim.OpenIPMIConfig{StartOff: true})
	m := startMITM(t, &net.UDPAddr{IP: net.ParseIP(sim.Host), Port: sim.Port})
	var o onlooker15
	var mu sync.Mutex
	var recorded [][]byte
	recording, replaying := true, false
	m.hooks(func(b []byte) ([]byte, [][]byte) { o.sawUp(b); return b, nil }, func(b []byte) [][]byte {
		in := o.inSession(b)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case in && replaying:
			return recorded
		case in && recording:
			recorded = append(recorded, b)
		}
		return [][]byte{b}
	})
	p := v15Params(m.port())
	p["power_timeout"] = "10"
	a := newAgent(t, p, nil)
	for range 16 {
		wantStatus(t, a, agents.StateOff)
	}
	mu.Lock()
	recording = false
	mu.Unlock()
	if err := a.On(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	replaying = true
	mu.Unlock()
	st, err := a.Status(ctxFor(t, 20*time.Second))
	if err == nil && st == agents.StateOff {
		t.Fatal("a replayed reply was believed: status off while the host is on")
	}
	if err == nil || !agents.IsUnknown(err) || !strings.Contains(err.Error(), "a replay") {
		t.Fatalf("status = %v, %v; want unknown, refused as a replay", st, err)
	}
}

// The check itself: a reply of the session verifies; one changed in
// transit, of another session, under another auth type or numbered at or
// below one taken does not; a session of auth type none or straight
// password proves nothing.
func TestV15Check(t *testing.T) {
	g := newGuard15(nil, "bmc", "password")
	const sid = 0x01020304
	req := forgedStatus15(sid, 1, types.AuthTypeMD5) // a request's framing: the session and its auth type
	g.outbound(req)
	reply := func(seq uint32, mutate func([]byte)) []byte {
		b := forgedStatus15(sid, 1, types.AuthTypeMD5)
		b[5], b[6], b[7], b[8] = byte(seq), byte(seq>>8), byte(seq>>16), byte(seq>>24)
		_, _, _, code, msg, _ := lan15(b)
		copy(code, cryptoAuthCode(types.AuthTypeMD5, "password", sid, seq, msg))
		if mutate != nil {
			mutate(b)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"the session's reply", reply(5, nil), ""},
		{"the same again", reply(5, nil), "a replay"},
		{"an older one", reply(4, nil), "a replay"},
		{"changed in transit", reply(6, func(b []byte) { b[len(b)-2] ^= 1 }), "does not verify"},
		{"another session", reply(7, func(b []byte) { b[9] ^= 1 }), "not addressed to this session"},
		{"auth type none", forgedStatus15(sid, 1, types.AuthTypeNone), "auth type none inside a MD5 session"},
		{"a newer one", reply(9, nil), ""},
	} {
		g.mu.Lock()
		got := g.check15(tc.b)
		g.mu.Unlock()
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	weak := newGuard15(nil, "bmc", "password")
	weak.outbound(forgedStatus15(sid, 1, types.AuthTypePassword))
	weak.mu.Lock()
	defer weak.mu.Unlock()
	if got := weak.check15(forgedStatus15(sid, 1, types.AuthTypePassword)); !strings.Contains(got, "straight password, which carries no proof") {
		t.Fatalf("a straight-password session: %q", got)
	}
}

// FuzzGuard15: no datagram panics the v1.5 check, and none passes it in
// a session without a code made with the password.
func FuzzGuard15(f *testing.F) {
	f.Add(forgedStatus15(7, 3, types.AuthTypeMD5), uint8(0))
	f.Add(forgedStatus15(7, 3, types.AuthTypeNone), uint8(1))
	f.Add([]byte{0x06, 0x00, 0xff, 0x07, 0x02, 0, 0, 0, 0, 7, 0, 0, 0}, uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, state uint8) {
		g := newGuard15(nil, "bmc", "password")
		switch state % 3 {
		case 1:
			g.outbound(forgedStatus15(7, 1, types.AuthTypeMD5))
		case 2:
			g.outbound(b)
		}
		drop, _ := g.inbound(b)
		if state%3 == 1 && !drop {
			if _, seq, sid, code, msg, ok := lan15(b); !ok || !crypto.VerifyMultiSessionAuthCode(types.AuthTypeMD5, []byte("password"), sid, seq, msg, code) {
				t.Fatalf("a datagram without a valid AuthCode passed: %x", b)
			}
		}
	})
}
