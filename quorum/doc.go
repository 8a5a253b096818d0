// Package quorum owns membership and election: gossip membership
// (hashicorp/memberlist) with each node's advertised state, the raft engine
// (hashicorp/raft with a durable BoltDB log) whose voters are the configured
// nodes, the replicated state machine (holder, epoch, nodes that may still
// run the storage, fence history), and the boot-time clock leases are
// measured on.
package quorum
