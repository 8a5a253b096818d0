// Package api is the wire format of fenced's local API: the JSON documents
// the daemon serves on its unix socket and `fencectl -o json` prints, the
// admin requests (also as nodes forward them to the leader), the error body
// and its codes, and the checks every request passes before anything of it
// is logged or committed. It imports nothing of the cluster, so fencectl
// links no raft, gossip or storage code.
package api
