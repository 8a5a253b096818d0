package quorum

import "fmt"

// holderStates are the holder states a command may set; any other is
// refused (see Command.check).
var holderStates = map[string]bool{
	HolderAcquiring: true, HolderFencing: true, HolderBlocked: true, HolderMounting: true,
	HolderMounted: true, HolderReleasing: true, HolderReleased: true,
}

// check refuses, before anything changes, a command that no node ever
// commits: it names no node, sets an unknown holder state, or updates a
// history record that was never created (an ID at or past NextID, which
// would also let NextID wrap and hand out IDs twice). The state machine
// applies every entry of the log on every node, in every version, so
// only what fenced itself never writes may be refused here.
func (c *Command) check(s *State) error {
	switch c.Op {
	case OpAcquire, OpState, OpRelease, OpStandby:
		if c.Node == "" {
			return fmt.Errorf("%s: no node", c.Op)
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
	}
	return nil
}
