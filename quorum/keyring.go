package quorum

import (
	"bytes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"
)

// The cluster's keys (gossip.key_file): one base64 key a line, the first
// the primary. The primary encrypts gossip, seals beacon frames and signs
// the node's raft certificate; every key decrypts and opens, and a raft
// peer whose certificate chains to any key's CA is accepted. A rotation is
// three rolling reloads: add the new key (second line) on every node, make
// it first on every node, remove the old one on every node. Between any
// two steps every node can read what every other sends.

// MaxKeys is the most keys a key file may hold: a rotation needs two, and
// each more costs every undecryptable packet one more try.
const MaxKeys = 8

// ReadKeys reads the cluster's keys from path (see ParseKeys).
func ReadKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip.key_file: %w", err)
	}
	return ParseKeys(path, b)
}

// ParseKeys parses a key file: one base64 key of 16, 24 or 32 bytes a
// line, the first the primary; blank lines and lines starting with # are
// skipped. Errors name the file and the line, never a key.
func ParseKeys(path string, b []byte) ([][]byte, error) {
	var keys [][]byte
	lines := map[string]int{} // key → its line
	for i, line := range strings.Split(string(b), "\n") {
		s := strings.TrimSpace(line)
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		n := i + 1
		key, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("gossip.key_file %s line %d: not base64", path, n)
		}
		switch len(key) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("gossip.key_file %s line %d: key is %d bytes, want 16, 24 or 32", path, n, len(key))
		}
		if l, dup := lines[string(key)]; dup {
			return nil, fmt.Errorf("gossip.key_file %s line %d: the same key as line %d", path, n, l)
		}
		if len(keys) == MaxKeys {
			return nil, fmt.Errorf("gossip.key_file %s line %d: more than %d keys", path, n, MaxKeys)
		}
		lines[string(key)] = n
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("gossip.key_file %s: no key (one base64 key a line, the first encrypts; fenced keygen makes one)", path)
	}
	return keys, nil
}

// ReadKey reads the primary cluster key of path (see ReadKeys).
func ReadKey(path string) ([]byte, error) {
	keys, err := ReadKeys(path)
	if err != nil {
		return nil, err
	}
	return keys[0], nil
}

// KeyID names a key in logs and status without telling anything of it:
// the first 8 hex digits of SHA-256 of "fenced key id" and the key.
func KeyID(key []byte) string {
	h := sha256.Sum256(append([]byte("fenced key id"), key...))
	return hex.EncodeToString(h[:4])
}

// KeyIDs are the IDs of keys, in their order.
func KeyIDs(keys [][]byte) []string {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = KeyID(k)
	}
	return ids
}

// keyRing is a node's keys with what is derived from them for beacon
// frames. It never changes: a reload swaps in another (Membership.ring).
// A nil or empty ring is plaintext.
type keyRing struct {
	keys   [][]byte
	ids    []string
	aeads  []cipher.AEAD // beacon AEAD of each key, in order
	idText string        // "a1b2c3d4, e5f6a7b8"
}

func newKeyRing(keys [][]byte) (*keyRing, error) {
	r := &keyRing{keys: slices.Clone(keys), ids: KeyIDs(keys)}
	for _, k := range keys {
		a, err := beaconCipher(k)
		if err != nil {
			return nil, err
		}
		r.aeads = append(r.aeads, a)
	}
	r.idText = strings.Join(r.ids, ", ")
	return r, nil
}

func (r *keyRing) encrypted() bool { return r != nil && len(r.keys) > 0 }

// keyIDs are the ring's key IDs, primary first (nil for a nil ring).
func (r *keyRing) keyIDs() []string {
	if r == nil {
		return nil
	}
	return r.ids
}

// seal frames payload under the primary key.
func (r *keyRing) seal(payload []byte) []byte {
	if !r.encrypted() {
		return sealBeacon(nil, payload)
	}
	return sealBeacon(r.aeads[0], payload)
}

// open returns a frame's payload if it authenticates under any key.
func (r *keyRing) open(frame []byte) ([]byte, error) {
	if !r.encrypted() {
		return openBeacon(nil, frame)
	}
	for _, a := range r.aeads {
		p, err := openBeacon(a, frame)
		if !errors.Is(err, errBeaconAuth) {
			return p, err
		}
	}
	return nil, &beaconAuthError{ids: r.idText}
}

// beaconAuthError is a beacon frame that opens under none of the keys.
type beaconAuthError struct{ ids string }

func (e *beaconAuthError) Error() string {
	return "beacon frame that does not authenticate with any of this node's keys (ids " + e.ids + "): the sender's key was removed or never added"
}

func (e *beaconAuthError) Is(target error) bool { return target == errBeaconAuth }

// undecryptable is the refusal reason of gossip traffic (what: "packet",
// "message") that none of the keys decrypts.
func (r *keyRing) undecryptable(what string) string {
	return "gossip " + what + " could not be decrypted with any of this node's keys (ids " + r.idText + "): the sender's key was removed or never added"
}

// sameKeys says whether a and b hold the same keys in the same order.
func sameKeys(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, bytes.Equal)
}

// setMemberlistKeys makes memberlist's keyring hold keys, keys[0] its
// primary, while memberlist runs. Keyring.RemoveKey shifts the ring's
// slice in place, and the slice is what GetKeys hands memberlist's
// readers, so a key is removed only when it is the last entry (nothing is
// then written); UseKey builds a fresh slice with its key first, so using
// the kept keys from the last to the first leaves them, in order, before
// those to remove. (For the moments in between, a kept key other than the
// primary may seal a few packets: every kept key is one the node reads.)
func setMemberlistKeys(kr *memberlist.Keyring, keys [][]byte) error {
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil { // no-op for a key it has
			return err
		}
	}
	if len(kr.GetKeys()) == len(keys) {
		return kr.UseKey(keys[0])
	}
	for i := len(keys) - 1; i >= 0; i-- {
		if err := kr.UseKey(keys[i]); err != nil {
			return err
		}
	}
	for {
		ks := kr.GetKeys()
		if len(ks) <= len(keys) {
			return nil
		}
		if err := kr.RemoveKey(ks[len(ks)-1]); err != nil {
			return err
		}
	}
}
