// Package resource is the resource group the primary runs behind the
// takeover gate: an ordered list of resources, each a mount, hook programs
// (through package storage) or an unmodified OCF resource agent
// (Filesystem, IPaddr2, a vendor's agent) driven through the OCF resource
// agent API.
//
// Contract (the daemon's Resource interface): Start starts the resources in
// order with the epoch as the fencing token; if resource k fails to start,
// k … 1 are stopped in reverse and the error returned, so the daemon
// releases cleanly and primacy moves. Stop stops them in reverse within the
// caller's deadline and fails if any stop failed or timed out — the daemon
// then self-fences; nothing is ever assumed stopped. Monitor reports the
// first failure of the background monitors, each resource on its own
// interval (an OCF monitor's 7, "not running", is a failure on the
// primary). Probe, on a node that is not primary, stops what runs where it
// must not and reports whether the node may become eligible.
//
// OCF agents run as OCF_ROOT/resource.d/PROVIDER/TYPE ACTION with the
// instance parameters as OCF_RESKEY_<name>, OCF_ROOT,
// OCF_RA_VERSION_MAJOR/MINOR (1.1), OCF_RESOURCE_INSTANCE (the resource's
// name), OCF_RESOURCE_TYPE, OCF_RESOURCE_PROVIDER, OCF_CHECK_LEVEL=0, the
// variables Pacemaker sets that agents size their work by
// (OCF_RESKEY_CRM_meta_timeout and _interval in milliseconds, interval 0
// marking a probe; _name; _on_node), and fenced's FENCED_ACTION,
// FENCED_EPOCH, FENCED_NODE and FENCED_PREVIOUS_HOLDER. Each action runs in
// its own process group with / as working directory, killed as a group at
// its timeout; its output goes to a file (agents leave helpers such as
// send_arp running) and the last ocf_exit_reason is kept for the error.
package resource
