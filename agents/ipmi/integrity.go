package ipmi

import (
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bougou/go-ipmi/pkg/crypto"
	"github.com/bougou/go-ipmi/pkg/types"
)

// Every reply of an RMCP+ session is checked before go-ipmi sees it.
//
// go-ipmi v0.9.1 takes a reply as its header describes it: it decrypts a
// payload only when the header says it is encrypted, never checks the
// integrity code of the session trailer, and takes the algorithms of an
// Open Session response without comparing them with those it asked for.
// So anyone on the management network who can answer the agent's
// requests (or a BMC that cuts corners) could tell it "power is off" in
// an unsigned packet, or move a session asked for under suite 17 to weaker
// algorithms. ipmitool and fence_ipmilan accept unsigned replies too.
//
// The agent owns the session's socket (transport.go), so it checks there,
// with go-ipmi's own exported key derivation (pkg/crypto), instead of
// carrying a patched copy of go-ipmi:
//   - it reads the algorithms the agent asks for in Open Session, and
//     refuses a response that names any other (errDowngrade);
//   - it refuses a RAKP 2 that carries no key exchange authentication code
//     when an authentication algorithm was agreed (errNoPasswordProof):
//     such a BMC never showed it knows the password;
//   - from RAKP 1 and 2 it derives the session's integrity key K1, as the
//     BMC does (IPMI v2.0 §13.31–13.32), and once RAKP 4 has answered,
//     every datagram must be an RMCP+ packet of this session (our
//     console's session ID), marked authenticated and, when encryption was
//     agreed, encrypted, with a valid integrity code and a session
//     sequence number above every one taken before (a replayed reply is
//     older). Anything else is refused: dropped before go-ipmi reads it,
//     counted and reported. The request is then resent as if no answer had
//     come; when its resends end, the exchange fails as unknown, naming
//     what was refused (refusedError), so a read-back never rests on it.
//
// IPMI v1.5 sessions (lanplus=0) are checked by their AuthCode
// (integrity15.go).
type guard struct {
	log      *slog.Logger // refusals are logged, at most one a second
	addr     string
	username string
	kuid     []byte // the password, padded to 20 bytes (Kuid)
	kg       []byte // the BMC key, or nil (one-key logins use Kuid)
	password string // MD5-128 integrity uses the password itself

	mu sync.Mutex
	// What the agent asked for (Open Session request) and learnt.
	asked     bool
	want      algorithms
	consoleID uint32
	role      uint8
	rand      [16]byte // the console's random number (RAKP 1)
	user      string   // the name RAKP 1 sent
	k1        []byte
	got       algorithms
	active    bool   // RAKP 4 answered (v1.5: a request carried a session): the session carries commands
	seq       uint32 // the highest session sequence number taken
	// v15: the session is IPMI v1.5's (integrity15.go): its ID and auth
	// type as the agent's requests carry them, and whether a sequence
	// number was taken in it yet.
	v15      bool
	sid15    uint32
	auth15   types.AuthType
	seqTaken bool
	// fatal ends the session: what the BMC answered cannot be worked with.
	fatal error
	// openStatus is the RMCP+ status of a refused Open Session (0: none):
	// go-ipmi cannot always parse the short answer that carries it.
	openStatus types.RmcpStatusCode
	// refused counts replies refused since the last request; last says why.
	refused int
	last    string
	total   int
	logged  time.Time
}

// algorithms is a suite's three algorithms as RMCP+ carries them.
type algorithms struct {
	auth  types.AuthAlg
	integ types.IntegrityAlg
	crypt types.CryptAlg
}

// String names the algorithms as IPMI v2.0 table 13-17 does, and the
// suite they make up when there is one.
func (a algorithms) String() string {
	auth := authName(a.auth)
	integ := map[types.IntegrityAlg]string{types.IntegrityAlg_None: "no integrity", types.IntegrityAlg_HMAC_SHA1_96: "HMAC-SHA1-96", types.IntegrityAlg_HMAC_MD5_128: "HMAC-MD5-128", types.IntegrityAlg_MD5_128: "MD5-128", types.IntegrityAlg_HMAC_SHA256_128: "HMAC-SHA256-128"}[a.integ]
	crypt := map[types.CryptAlg]string{types.CryptAlg_None: "no encryption", types.CryptAlg_AES_CBC_128: "AES-CBC-128", types.CryptAlg_xRC4_128: "xRC4-128", types.CryptAlg_xRC4_40: "xRC4-40"}[a.crypt]
	for _, name := range []*string{&auth, &integ, &crypt} {
		if *name == "" {
			*name = "unknown"
		}
	}
	s := fmt.Sprintf("%s, %s, %s", auth, integ, crypt)
	for id := 0; id <= 19; id++ {
		au, in, cr, ok := types.GetCipherSuiteAlgorithms(types.CipherSuiteID(id))
		if ok && (algorithms{au, in, cr}) == a {
			return fmt.Sprintf("suite %d (%s)", id, s)
		}
	}
	return s
}

func authName(a types.AuthAlg) string {
	return map[types.AuthAlg]string{types.AuthAlg_None: "RAKP-none", types.AuthAlg_HMAC_SHA1: "RAKP-HMAC-SHA1", types.AuthAlg_HMAC_MD5: "RAKP-HMAC-MD5", types.AuthAlg_HMAC_SHA256: "RAKP-HMAC-SHA256"}[a]
}

// errDowngrade and errNoPasswordProof end a login: the BMC answered with
// something the agent will not work with. Neither is a wrong password.
var (
	errDowngrade       = errors.New("the BMC answered with other algorithms than the cipher suite asked for")
	errNoPasswordProof = errors.New("the BMC skipped the password check")
)

// refusedError ends an exchange whose only answers were refused.
type refusedError struct {
	n      int
	reason string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("no trusted reply from the BMC: %d refused (%s)", e.n, e.reason)
}

func (e *refusedError) Unwrap() error { return errNoReply }

func newGuard(log *slog.Logger, addr, username, password string, kg []byte) *guard {
	return &guard{log: log, addr: addr, username: username, password: password, kuid: crypto.PadPassword20([]byte(password)), kg: kg}
}

// newGuard15 checks the replies of an IPMI v1.5 session.
func newGuard15(log *slog.Logger, addr, password string) *guard {
	return &guard{log: log, addr: addr, password: password, v15: true}
}

// RMCP+ packet layout (IPMI v2.0 table 13-8): the 4-byte RMCP header, then
// auth type (6), payload type (bit 7 encrypted, bit 6 authenticated), the
// session ID and sequence number (little-endian), the payload length, the
// payload; for an authenticated packet a trailer of 0xff pad bytes, their
// count, the next header (7) and the integrity code.
const (
	rmcpHeaderLen  = 4
	sessHeaderLen  = 12
	payloadStart   = rmcpHeaderLen + sessHeaderLen
	bitEncrypted   = 0x80
	bitAuthentic   = 0x40
	typeIPMI       = 0x00
	typeSOL        = 0x01
	typeOpenReq    = 0x10
	typeOpenResp   = 0x11
	typeRAKP1      = 0x12
	typeRAKP2      = 0x13
	typeRAKP4      = 0x15
	authTypeRMCPP  = 0x06
	rmcpClassIPMI  = 0x07
	rakp1MinLen    = 28
	openRespAlgOff = 12
)

// rmcpPlus returns the payload type byte and payload of RMCP+ packet b.
func rmcpPlus(b []byte) (ptype byte, payload []byte, ok bool) {
	if len(b) < payloadStart || b[0] != 0x06 || b[3]&0x1f != rmcpClassIPMI || b[4] != authTypeRMCPP {
		return 0, nil, false
	}
	n := int(binary.LittleEndian.Uint16(b[14:16]))
	if payloadStart+n > len(b) {
		return 0, nil, false
	}
	return b[5], b[payloadStart : payloadStart+n], true
}

// outbound reads what the agent asks for.
func (g *guard) outbound(b []byte) {
	if g.v15 {
		g.outbound15(b)
		return
	}
	pt, p, ok := rmcpPlus(b)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refused, g.last = 0, ""
	switch pt & 0x3f {
	case typeOpenReq:
		if len(p) < 32 {
			return
		}
		// A new Open Session starts a new session (go-ipmi tries suites
		// one after another).
		g.asked, g.active, g.k1, g.seq = true, false, nil, 0
		g.consoleID = binary.LittleEndian.Uint32(p[4:8])
		g.want = algorithms{types.AuthAlg(p[12] & 0x3f), types.IntegrityAlg(p[20] & 0x3f), types.CryptAlg(p[28] & 0x3f)}
	case typeRAKP1:
		if len(p) < rakp1MinLen {
			return
		}
		copy(g.rand[:], p[8:24])
		g.role = p[24]
		ul := int(p[27])
		if 28+ul <= len(p) {
			g.user = string(p[28 : 28+ul])
		}
	}
}

// inbound checks one datagram. drop means go-ipmi must not see it; err
// ends the exchange (the session cannot be worked with).
func (g *guard) inbound(b []byte) (drop bool, err error) {
	g.mu.Lock()
	if g.fatal != nil {
		g.mu.Unlock()
		return true, g.fatal
	}
	if g.active {
		check := g.check
		if g.v15 {
			check = g.check15
		}
		why := check(b)
		if why == "" {
			g.mu.Unlock()
			return false, nil
		}
		g.refused++
		g.total++
		g.last = why
		total, now := g.total, time.Now()
		say := now.Sub(g.logged) >= time.Second
		if say {
			g.logged = now
		}
		g.mu.Unlock()
		if say && g.log != nil {
			g.log.Warn("ipmi reply refused: it does not prove it comes from the BMC", "addr", g.addr, "why", why, "refused_in_session", total)
		}
		return true, nil
	}
	defer g.mu.Unlock()
	pt, p, ok := rmcpPlus(b)
	if g.v15 || !ok || !g.asked {
		return false, nil // session setup in IPMI v1.5 framing (Get Channel Auth Capabilities)
	}
	switch pt & 0x3f {
	case typeOpenResp:
		// tag, status, privilege, reserved, console ID, BMC ID, then the
		// three algorithm payloads (8 bytes each, the algorithm at 4).
		if len(p) >= 2 && p[1] != 0 {
			g.openStatus = types.RmcpStatusCode(p[1])
			return false, nil // a refusal: go-ipmi reports it, if it can parse it
		}
		if len(p) < openRespAlgOff+24 || binary.LittleEndian.Uint32(p[4:8]) != g.consoleID {
			return false, nil // not ours
		}
		o := openRespAlgOff
		g.got = algorithms{types.AuthAlg(p[o+4] & 0x3f), types.IntegrityAlg(p[o+12] & 0x3f), types.CryptAlg(p[o+20] & 0x3f)}
		if g.got != g.want {
			g.fatal = fmt.Errorf("%w: asked for %s, the BMC answered %s; refused", errDowngrade, g.want, g.got)
			return true, g.fatal
		}
	case typeRAKP2:
		// tag, status, reserved, console ID, BMC random (16), GUID (16),
		// key exchange authentication code.
		if len(p) < 2 || p[1] != 0 {
			return false, nil
		}
		if len(p) < 40 || binary.LittleEndian.Uint32(p[4:8]) != g.consoleID {
			return false, nil // go-ipmi reports it malformed
		}
		if need := crypto.RAKP2AuthCodeLen(g.got.auth); g.got.auth != types.AuthAlg_None && len(p)-40 < need {
			g.fatal = fmt.Errorf("%w: its RAKP 2 carries a %d-byte key exchange authentication code where %s needs %d, so it never showed that it knows the password (refused; this is not a wrong password)", errNoPasswordProof, len(p)-40, authName(g.got.auth), need)
			return true, g.fatal
		}
		key := g.kuid
		if len(g.kg) > 0 {
			key = g.kg
		}
		if g.got.auth == types.AuthAlg_None {
			return false, nil // allow_cipher0: nothing to derive
		}
		_, k1, _, err := crypto.DeriveSessionKeys(g.got.auth, g.rand[:], p[8:24], g.role, g.user, key)
		if err != nil {
			return false, nil // go-ipmi fails the same derivation
		}
		g.k1 = k1
	case typeRAKP4:
		if len(p) >= 2 && p[1] == 0 && (g.k1 != nil || g.got.auth == types.AuthAlg_None) {
			// go-ipmi checks RAKP 4's integrity check value; from here
			// on the session carries commands.
			g.active = true
		}
	}
	return false, nil
}

// check returns why datagram b is not a trusted reply of the active
// session, or "".
func (g *guard) check(b []byte) string {
	pt, p, ok := rmcpPlus(b)
	switch {
	case len(b) >= 5 && b[4] != authTypeRMCPP:
		return "IPMI v1.5 framing inside an RMCP+ session"
	case !ok:
		return "not an RMCP+ packet"
	case pt&0x3f != typeIPMI && pt&0x3f != typeSOL:
		return fmt.Sprintf("payload type %#x inside the session", pt&0x3f)
	case binary.LittleEndian.Uint32(b[6:10]) != g.consoleID:
		return "not addressed to this session"
	}
	if g.got.integ != types.IntegrityAlg_None {
		if pt&bitAuthentic == 0 {
			return "no integrity code"
		}
		codeLen, known := crypto.IntegrityAuthCodeLen(g.got.integ)
		end := payloadStart + len(p)
		if !known || len(b) < end+2+codeLen {
			return "integrity trailer too short"
		}
		padLen := int(b[len(b)-codeLen-2])
		if b[len(b)-codeLen-1] != rmcpClassIPMI || end+padLen+2+codeLen != len(b) {
			return "malformed integrity trailer"
		}
		want, err := crypto.SessionIntegrityAuthCode(g.got.integ, b[rmcpHeaderLen:len(b)-codeLen], g.k1, g.password)
		if err != nil || !hmac.Equal(want, b[len(b)-codeLen:]) {
			return "integrity code does not verify"
		}
	}
	if g.got.crypt != types.CryptAlg_None && pt&bitEncrypted == 0 {
		return "not encrypted although encryption was agreed"
	}
	// The BMC numbers its packets of a session from 1 (§13.28): a packet
	// of this session numbered at or below one taken is a replay.
	seq := binary.LittleEndian.Uint32(b[10:14])
	if seq <= g.seq {
		return fmt.Sprintf("session sequence number %d not above %d (a replay)", seq, g.seq)
	}
	g.seq = seq
	return ""
}

// outcome is what the guard has to say when an exchange ended without an
// answer: the fatal refusal, or the replies it dropped.
func (g *guard) outcome() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fatal != nil {
		return g.fatal
	}
	if g.refused > 0 {
		return &refusedError{n: g.refused, reason: g.last}
	}
	return nil
}

// openRefused is the status of the BMC's refusal of Open Session, if any.
func (g *guard) openRefused() types.RmcpStatusCode {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.openStatus
}

// refusal returns the login's fatal refusal, if any.
func (g *guard) refusal() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fatal
}
