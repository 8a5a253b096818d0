// Package nemesis is a Jepsen-style fault-injection harness for fenced: it
// runs 3 or 5 real fenced processes, each on a simulated machine of its own
// (a network, mount, PID and optionally time namespace), on a bridge, with
// a simulated BMC per machine (OpenIPMI's ipmi_sim, go-ipmi's reference BMC
// or the project's Redfish simulator) whose power-off kills every process of
// that machine. The storage is a real ext4 filesystem on a loop device that
// every machine can mount; the primary's start hook runs a writer that
// appends (node, epoch, sequence) records to a file on it and to a log
// outside that checks nothing, and a second writer against the
// token-checking store.
//
// A run injects faults chosen from a seed (crashes, pauses past the lease,
// restarts with clock offsets, partitions of several shapes, packet loss,
// slow links, dead, slow and lying BMCs), waits for the cluster to recover
// after each, and at the end checks the safety properties end to end:
// writers never interleave, no stale epoch was accepted, the filesystem is
// clean, every change of writer was preceded by a committed release or a
// confirmed fence, and no node panicked. It reports availability per fault
// kind and draws a timeline of the run.
//
// The harness treats fenced as a black box: it writes the configuration,
// starts the fenced binary, and reads its state through the API socket and
// fencectl.
package nemesis
