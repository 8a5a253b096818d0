package daemon

import "github.com/fenced/fenced/quorum"

// FSMOf is d's replicated state machine, for tests that feed it an entry
// raft would (daemon_test).
func FSMOf(d *Daemon) *quorum.FSM { return d.raft.FSM() }
