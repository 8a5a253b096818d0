package quorum

import (
	"fmt"
	"regexp"
	"time"
)

// maxAdvertised bounds each duration of an advertised timing: fenced's
// own never exceed ten minutes (tenure.MaxLease).
const maxAdvertised = time.Hour

// Bounds of a committed configuration fingerprint.
const (
	maxConfigKeys   = 4096
	maxConfigKeyLen = 256
)

var reHash16 = regexp.MustCompile(`^[0-9a-f]{16}$`)

// checkConfig refuses a fingerprint fenced never commits: missing, with
// malformed hashes or keys, too large, or whose hash is not the hash of
// its keys.
func checkConfig(f *ConfigFingerprint) error {
	switch {
	case f == nil:
		return fmt.Errorf("config: no fingerprint")
	case !reHash16.MatchString(f.Hash):
		return fmt.Errorf("config: fingerprint %q is not 16 hex digits", f.Hash)
	case len(f.Keys) == 0 || len(f.Keys) > maxConfigKeys:
		return fmt.Errorf("config: %d keys, want 1 to %d", len(f.Keys), maxConfigKeys)
	case f.Node == "" || len(f.Node) > maxConfigKeyLen || len(f.By) > maxConfigKeyLen:
		return fmt.Errorf("config: node or requester missing or too long")
	}
	for k, h := range f.Keys {
		if k == "" || len(k) > maxConfigKeyLen || !reHash16.MatchString(h) {
			return fmt.Errorf("config: malformed key %.64q", k)
		}
		for _, c := range k {
			if c < 0x21 || c > 0x7e {
				return fmt.Errorf("config: key %.64q has a character outside printable ASCII", k)
			}
		}
	}
	if got := FingerprintOf(f.Keys); got != f.Hash {
		return fmt.Errorf("config: fingerprint %s is not its keys' (%s)", f.Hash, got)
	}
	return nil
}

// holderStates are the holder states a command may set; any other is
// refused (see Command.check).
var holderStates = map[string]bool{
	HolderAcquiring: true, HolderFencing: true, HolderBlocked: true, HolderMounting: true,
	HolderMounted: true, HolderReleasing: true, HolderReleased: true,
}

// check refuses, before anything changes, a command that no node ever
// commits: it names no node, sets an unknown holder state, or updates a
// history record that was never created (an ID at or past NextID, which
// would also let NextID wrap and hand out IDs twice), or commits a
// malformed configuration fingerprint. The state machine
// applies every entry of the log on every node, in every version, so
// only what fenced itself never writes may be refused here.
func (c *Command) check(s *State) error {
	switch c.Op {
	case OpAcquire, OpState, OpRelease, OpStandby, OpUnclean, OpRenew:
		if c.Node == "" {
			return fmt.Errorf("%s: no node", c.Op)
		}
	}
	if c.Group != "" {
		if err := CheckGroupName(c.Group); err != nil {
			return fmt.Errorf("%s: %w", c.Op, err)
		}
	}
	if t := c.Timing; t != nil {
		for _, d := range []time.Duration{t.Lease, t.Margin, t.Grace} {
			if d <= 0 || d > maxAdvertised {
				return fmt.Errorf("%s: advertised timing %+v outside (0, %s]", c.Op, *t, maxAdvertised)
			}
		}
	}
	switch c.Op {
	case OpState:
		if !holderStates[c.State] {
			return fmt.Errorf("state: unknown holder state %q", c.State)
		}
	case OpRecord:
		if c.Record != nil && c.Record.ID >= s.NextID {
			return fmt.Errorf("record: id %d was never assigned (next is %d)", c.Record.ID, s.NextID)
		}
	case OpConfig:
		return checkConfig(c.Config)
	}
	return nil
}
