package quorum

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"

	"github.com/hashicorp/memberlist"
)

// Beacon datagrams.
//
// The leader sends a beacon to every follower eight times per Detect
// (see Detector), which makes beacons most of an idle leader's packets.
// Sent as memberlist user messages, each one is framed, checksummed and
// encrypted by memberlist with a cipher it builds anew for every packet,
// and read on the other end into a fresh 64 KiB buffer, decrypted the
// same way and queued for memberlist's handler goroutine.
//
// So a beacon travels in a frame of its own on gossip's UDP port: the
// byte beaconFrame (which no memberlist packet starts with: they start
// with an encryption version, 0 or 1, or a message type under 32), then,
// with a cluster key, the payload sealed with AES-GCM under a key derived
// from the cluster key for beacons alone (nonce, ciphertext, tag), or the
// bare payload without a key. The gossip guard hands such a frame to the
// Detector before memberlist sees it; one that does not authenticate is
// refused like any other outsider's packet.
//
// A node advertises in its gossip metadata which beacons it reads
// (Meta.Beacon): 3, also lease renewal rounds (renew.go); 2, frames whose beacon is numbered (beaconMagicSeq, see
// Detector.received: a frame recorded and sent again is refused); 1, frames
// of unnumbered beacons; 0 (older versions), memberlist messages only. The
// leader sends each follower what it reads, so a rolling upgrade keeps
// every follower's beacons.
const (
	beaconFrame      = 0xfb
	beaconFramed     = 1 // Meta.Beacon of a node that reads beacon frames
	beaconNumbered   = 2 // Meta.Beacon of a node that reads numbered beacons
	beaconVersion    = beaconRenews
	beaconMagicSeq   = 'S' // a numbered beacon: magic, term, sequence, sender
	beaconSeqHeader  = 1 + 8 + 8
	beaconNameMaxLen = 64
)

// beaconCipher is the AEAD of beacon frames, derived from the cluster
// key; nil without a key.
func beaconCipher(key []byte) (cipher.AEAD, error) {
	if key == nil {
		return nil, nil
	}
	k, err := hkdf.Key(sha256.New, key, []byte("fenced beacon v1"), "gossip beacons", 32)
	if err != nil {
		return nil, fmt.Errorf("beacon key: %w", err)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("beacon key: %w", err)
	}
	a, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return nil, fmt.Errorf("beacon key: %w", err)
	}
	return a, nil
}

// sealBeacon frames payload for the wire.
func sealBeacon(a cipher.AEAD, payload []byte) []byte {
	frame := []byte{beaconFrame}
	if a == nil {
		return append(frame, payload...)
	}
	return a.Seal(frame, nil, payload, frame[:1])
}

var errBeaconAuth = errors.New("beacon frame that does not authenticate with the cluster key")

// openBeacon returns a frame's payload.
func openBeacon(a cipher.AEAD, frame []byte) ([]byte, error) {
	if len(frame) == 0 || frame[0] != beaconFrame {
		return nil, errors.New("not a beacon frame")
	}
	if a == nil {
		return frame[1:], nil
	}
	if len(frame) < 1+a.NonceSize()+a.Overhead() {
		return nil, errBeaconAuth
	}
	p, err := a.Open(nil, nil, frame[1:], frame[:1])
	if err != nil {
		return nil, errBeaconAuth
	}
	return p, nil
}

// sendBeacons sends a beacon to every other live member as a best-effort
// (UDP) datagram: numbered, a frame sealed once for all, to those that
// read numbered beacons; plain (msg) in a frame to those that read only
// frames; plain as a memberlist message to the others.
func (m *Membership) sendBeacons(msg, numbered []byte) {
	var frame, nframe []byte
	ring := m.ring.Load()
	live := m.ml.Members()
	for _, p := range m.opts.Peers {
		if p.Name == m.opts.Self || !hasMember(live, p.Name) {
			continue
		}
		m.mu.Lock()
		n, reads := m.addrs[p.Name], m.reads[p.Name]
		m.mu.Unlock()
		if n == nil {
			continue
		}
		var err error
		switch {
		case reads >= beaconNumbered && numbered != nil:
			if nframe == nil {
				nframe = ring.seal(numbered)
			}
			_, err = m.guard.WriteToAddress(nframe, memberlist.Address{Addr: n.Address(), Name: n.Name})
		case reads >= beaconFramed:
			if frame == nil {
				frame = ring.seal(msg)
			}
			_, err = m.guard.WriteToAddress(frame, memberlist.Address{Addr: n.Address(), Name: n.Name})
		default:
			err = m.ml.SendBestEffort(n, msg)
		}
		if err != nil {
			m.log.Debug("gossip: beacon", "to", n.Name, "err", err)
		}
	}
}

func hasMember(ns []*memberlist.Node, name string) bool {
	for _, n := range ns {
		if n.Name == name { // a Name never changes
			return true
		}
	}
	return false
}

// receiveBeacon is the guard's handler of beacon frames.
func (m *Membership) receiveBeacon(frame []byte, from net.Addr) {
	p, err := m.ring.Load().open(frame)
	if err != nil {
		m.guard.refused.note("gossip-udp", err.Error(), addrString(from), "")
		return
	}
	if len(p) == 0 || p[0] != beaconMagic && p[0] != beaconMagicSeq && p[0] != renewProbe && p[0] != renewAnswer {
		m.guard.refused.note("gossip-udp", "beacon frame without a beacon", addrString(from), "")
		return
	}
	if h := m.beacons.Load(); h != nil {
		(*h)(p)
	}
}
