package ipmi

import (
	"encoding/binary"
	"fmt"

	"github.com/bougou/go-ipmi/pkg/crypto"
	"github.com/bougou/go-ipmi/pkg/types"
)

// IPMI v1.5 sessions (lanplus=0) are checked too. Their packets carry an
// AuthCode in the session header (IPMI v1.5 §6.12.10): for MD5 (and MD2)
// a hash of the password, the session ID, the message, the session
// sequence number and the password again — weaker than RMCP+'s HMACs,
// but it shows the reply comes from someone who knows the password.
// go-ipmi v0.9.1 computes it for its requests and checks none in the
// replies. So once the agent's requests carry a session (a session ID,
// and an AuthCode), every reply must be of that session, of the same
// auth type, with an AuthCode that verifies and a sequence number above
// every one taken in the session. A session of auth type none or
// "straight password" (the password itself as the code, the same for
// every packet) proves nothing: its replies are refused, and the agent
// says so rather than trust a read-back. Before the session — Get Channel
// Authentication Capabilities and Get Session Challenge, which carry no
// power state — replies are taken as they come.

// v1.5 framing: the RMCP header, then auth type, sequence number, session
// ID (little-endian), the AuthCode when the auth type is not none, the
// message length and the message.
const v15HeaderLen = rmcpHeaderLen + 1 + 4 + 4

// lan15 splits v1.5 packet b.
func lan15(b []byte) (auth types.AuthType, seq, sid uint32, code, msg []byte, ok bool) {
	if len(b) < v15HeaderLen+1 || b[0] != 0x06 || b[3]&0x1f != rmcpClassIPMI || b[4] == authTypeRMCPP {
		return 0, 0, 0, nil, nil, false
	}
	auth = types.AuthType(b[4])
	seq = binary.LittleEndian.Uint32(b[5:9])
	sid = binary.LittleEndian.Uint32(b[9:13])
	i := v15HeaderLen
	if auth != types.AuthTypeNone {
		if len(b) < i+16+1 {
			return 0, 0, 0, nil, nil, false
		}
		code, i = b[i:i+16], i+16
	}
	n := int(b[i])
	if i+1+n > len(b) {
		return 0, 0, 0, nil, nil, false
	}
	return auth, seq, sid, code, b[i+1 : i+1+n], true
}

// outbound15 follows the session the agent's v1.5 requests carry.
func (g *guard) outbound15(b []byte) {
	auth, _, sid, _, _, ok := lan15(b)
	if !ok || sid == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refused, g.last = 0, ""
	if !g.active || sid != g.sid15 || auth != g.auth15 {
		// The temporary session of Activate Session, then the one the BMC
		// assigned: numbering starts again with each.
		g.active, g.sid15, g.auth15, g.seq, g.seqTaken = true, sid, auth, 0, false
	}
}

// check15 returns why datagram b is not a trusted reply of the active
// v1.5 session, or "".
func (g *guard) check15(b []byte) string {
	auth, seq, sid, code, msg, ok := lan15(b)
	switch {
	case !ok:
		return "not an IPMI v1.5 packet"
	case g.auth15 != types.AuthTypeMD5 && g.auth15 != types.AuthTypeMD2:
		return fmt.Sprintf("the session's auth type is %s, which carries no proof of the BMC (use MD5, or lanplus)", auth15Name(g.auth15))
	case sid != g.sid15:
		return "not addressed to this session"
	case auth != g.auth15:
		return fmt.Sprintf("auth type %s inside a %s session", auth15Name(auth), auth15Name(g.auth15))
	case !crypto.VerifyMultiSessionAuthCode(auth, []byte(g.password), sid, seq, msg, code):
		return "AuthCode does not verify"
	case g.seqTaken && seq <= g.seq:
		return fmt.Sprintf("session sequence number %d not above %d (a replay)", seq, g.seq)
	}
	g.seq, g.seqTaken = seq, true
	return ""
}

func auth15Name(a types.AuthType) string {
	switch a {
	case types.AuthTypeNone:
		return "none"
	case types.AuthTypeMD2:
		return "MD2"
	case types.AuthTypeMD5:
		return "MD5"
	case types.AuthTypePassword:
		return "straight password"
	}
	return fmt.Sprintf("%#x", byte(a))
}
