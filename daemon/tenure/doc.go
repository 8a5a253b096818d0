// Package tenure is fenced's safety core: when a node may act as primary,
// when a successor may take over, when the storage may start, and how a
// holder gives up. It owns every lease rule (Timing) and one state machine
// (Machine) that decides, from what it is told, what the node does next.
//
// The machine is pure. It reads no clock, opens nothing and starts no
// goroutine: every Step receives the time, whether this node leads raft,
// the replicated state as this node has applied it, and at most one result
// of an earlier action; it returns the actions to run. A driver (package
// daemon) runs those actions against raft, the fence engine and the
// storage, and feeds their results back. A simulator can run many machines
// on virtual time against a simulated log, which is how the rules below are
// tested under schedules no real cluster would produce on demand.
//
// The rules, and where they are enforced:
//
//   - A holder acts only in phase Serving and only while now < its
//     acting-until, t0 + lease − margin, where t0 is the start of the
//     newest renewal a majority stored (the acquire itself is the first).
//     It stops at that moment even if it heard nothing (fail-safe).
//   - A successor passes the takeover gate only once every node that may
//     still run the storage is confirmed stopped (its committed release, a
//     fence read back off, or an admin's confirmation, all in the
//     replicated state) and, for a former holder that did not release,
//     once lease + margin has passed since the point a majority bounds its
//     last renewal by (or since this grant).
//   - The storage starts only after the mount intent is committed (the
//     replicated state refuses it while another node is unconfirmed) and
//     the holder's lease is still valid.
//   - A demotion stops the storage within grace, then records the release;
//     a stop that fails or does not finish in time is a self-fence, never
//     "assume stopped". Leadership moves on only after the release result.
package tenure
