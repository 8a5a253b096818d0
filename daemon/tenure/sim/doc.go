// Package sim runs the real tenure state machine (package tenure) of N
// nodes in one process on virtual time, against a simulated raft log, a
// simulated network, fence devices and storage, while a nemesis injects
// faults from a seeded schedule; a checker tests the safety invariants
// after every event and the liveness bound once the faults have healed.
//
// Everything is deterministic: a schedule (its seed, node count, timing
// profile, clock drifts and fault list) fixes the whole run, so a failure
// replays exactly, and Shrink reduces its fault list to the shortest one
// that still fails. The simulated raft gives the guarantees the daemon's
// driver relies on (package daemon, driver.go): Apply returns once a
// majority stored the entry and the local FSM applied it; a barrier
// confirms a majority acknowledged the leader after the call; at most one
// leader per term; a committed entry is never lost; followers apply later.
// Each node applies committed entries to its own quorum.FSM, encoded as
// the daemon encodes them (quorum.Command as JSON in a raft.Log).
//
// The package is test infrastructure: no product package imports it.
package sim
