package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The cluster-wide part of a configuration is what every node must agree
// on: what decides who may be primary, when, and how a node is fenced or its
// storage run. ClusterValues lists it key by key; ClusterKeys hashes each
// key, and the cluster's fingerprint (quorum.FingerprintOf) is a hash of
// those. Nodes compare fingerprints; the per-key hashes name the keys that
// differ without showing any value.
//
// Cluster-wide, with their effective values (defaults filled in):
//
//	version, cluster.name, cluster.allow_even_nodes
//	nodes (the names, in order: the order ranks successors)
//	nodes.NAME.gossip, .raft, .role, and its fence topology:
//	  nodes.NAME.fence[i] (the level's device names, or "watchdog"),
//	  nodes.NAME.fence[i].devices[j].plug and .params.P
//	timing.* ; gossip.plaintext ; history.limit (every node's state
//	  machine trims the replicated history by it)
//	devices.NAME.agent, .timeout, .retries, .monitor_interval, .unfence,
//	  .params.P
//	storage.* ; resources (names, in order) and resources.NAME.*
//
// Node-local, left out: node (which node this is), data_dir, api.*,
// gossip.key_file (the keys' path; the keys must overlap, or the node cannot
// talk to the others at all, and in a rotation they differ between nodes for a
// while: they are no part of the fingerprint), metrics.*, watchdog.* (this
// machine's device and its timeout), ocf_root (where this machine keeps its
// agents), alerts, and every secret: a parameter whose name marks a secret
// (SecretParam: password, community, key, …) and its _file and _script
// forms, whose values or paths may differ per node. A secret that differs
// between nodes is therefore not detected; a device check finds it.
//
// The resource group's keys (storage.*, resources, resources.*: GroupKey)
// are the data nodes' business. A witness runs none of it and may leave it
// out of its file: its fingerprint is over the other keys alone
// (WitnessKeys), whatever its file says of the group, and it is compared
// with the cluster's by those keys too. Values that are each data node's
// own are declared node-local (nodelocal.go) and left out.
//
// Keys added to the configuration after this scheme was introduced should
// enter it only when set to a value other than their default, so that
// upgrading fenced does not change the fingerprint of an unchanged file.

// reSecret matches parameter names whose values are secrets (as the exec
// agent's rule, plus identity for SSH keys).
var reSecret = regexp.MustCompile(`(?i)passw|community|secret|token|credential|private|key|identity|(^|_)kg$`)

// SecretParam reports whether a parameter (of a device or a resource) holds
// a secret or names where one is kept: its value is never shown or
// fingerprinted.
func SecretParam(name string) bool {
	base := name
	for _, suffix := range []string{"_file", "_script"} {
		if b, ok := strings.CutSuffix(name, suffix); ok {
			base = b
		}
	}
	return reSecret.MatchString(base)
}

// ClusterValues returns the cluster-wide keys of c with their canonical
// values (durations as Go writes them, so "3000ms" equals "3s"); when c's
// node (Node) is a witness, without the resource group's (WitnessKeys).
func (c *Config) ClusterValues() map[string]string {
	kv := map[string]string{}
	set := func(k, v string) { kv[k] = v }
	params := func(prefix string, p map[string]string) {
		for _, k := range sortedKeys(p) {
			if !SecretParam(k) {
				set(prefix+".params."+k, p[k])
			}
		}
	}
	set("version", strconv.Itoa(c.Version))
	set("cluster.name", c.Cluster.Name)
	set("cluster.allow_even_nodes", strconv.FormatBool(c.Cluster.AllowEvenNodes))
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
		p := "nodes." + n.Name
		role := n.Role
		if role == "" {
			role = RoleData
		}
		set(p+".gossip", n.Gossip)
		set(p+".raft", n.Raft)
		set(p+".role", role)
		for li, l := range n.Fence {
			lp := fmt.Sprintf("%s.fence[%d]", p, li)
			if l.Watchdog {
				set(lp, "watchdog")
				continue
			}
			devs := make([]string, len(l.Devices))
			for di, d := range l.Devices {
				devs[di] = d.Device
				dp := fmt.Sprintf("%s.devices[%d]", lp, di)
				if d.Plug != "" {
					set(dp+".plug", d.Plug)
				}
				params(dp, d.Params)
			}
			set(lp, strings.Join(devs, ","))
		}
	}
	set("nodes", strings.Join(names, ","))
	t := c.Timing
	for _, d := range []struct {
		k string
		v Duration
	}{{"heartbeat", t.Heartbeat}, {"lease", t.Lease}, {"margin", t.Margin}, {"grace", t.Grace}, {"fence_timeout", t.FenceTimeout}} {
		set("timing."+d.k, d.v.String())
	}
	set("gossip.plaintext", strconv.FormatBool(c.Gossip.Plaintext))
	set("history.limit", strconv.Itoa(c.History.Limit))
	for _, name := range sortedKeys(c.Devices) {
		d := c.Devices[name]
		p := "devices." + name
		set(p+".agent", d.Agent)
		set(p+".timeout", d.Timeout.String())
		set(p+".retries", strconv.Itoa(d.Retries))
		set(p+".monitor_interval", Duration(d.DeviceMonitorInterval()).String())
		set(p+".unfence", d.Unfence)
		params(p, d.Params)
	}
	s := c.Storage
	storageSet := localSet("storage", s.NodeLocal, set)
	if m := s.Mount; m != nil {
		mount("storage.mount", m, storageSet)
	}
	hooks("storage.hooks", s.Hooks, storageSet)
	if len(s.NodeLocal) > 0 {
		set("storage.node_local", strings.Join(slices.Sorted(slices.Values(s.NodeLocal)), ","))
	}
	set("storage.checks_tokens", strconv.FormatBool(s.ChecksTokens))
	set("storage.monitor_interval", s.MonitorInterval.String())
	if len(c.Resources) > 0 {
		rn := make([]string, len(c.Resources))
		for i, r := range c.Resources {
			rn[i] = r.Name
			p := "resources." + r.Name
			for _, k := range r.givenKinds() {
				if k.cluster != nil {
					k.cluster(p, r, localSet(p, r.NodeLocal, set))
				}
			}
			if len(r.NodeLocal) > 0 {
				set(p+".node_local", strings.Join(slices.Sorted(slices.Values(r.NodeLocal)), ","))
			}
			if r.ChecksTokens {
				set(p+".checks_tokens", "true")
			}
			params(p, r.Params)
			set(p+".monitor_interval", r.MonitorInterval.String())
			set(p+".timeouts.start", r.Timeouts.Start.String())
			set(p+".timeouts.stop", r.Timeouts.Stop.String())
			set(p+".timeouts.monitor", r.Timeouts.Monitor.String())
		}
		set("resources", strings.Join(rn, ","))
	}
	if self, ok := c.NodeByName(c.Node); ok && self.Witness() {
		return WitnessKeys(kv)
	}
	return kv
}

// GroupKey reports whether a cluster-wide key describes the resource group
// (the storage shorthand or the resources): what only data nodes run.
func GroupKey(key string) bool {
	return key == "resources" || strings.HasPrefix(key, "resources.") || strings.HasPrefix(key, "storage.")
}

// WitnessKeys is keys (values or their hashes) without the resource
// group's: the part of a configuration a witness runs and is compared by.
func WitnessKeys[V any](keys map[string]V) map[string]V {
	out := make(map[string]V, len(keys))
	for k, v := range keys {
		if !GroupKey(k) {
			out[k] = v
		}
	}
	return out
}

func mount(p string, m *Mount, set func(k, v string)) {
	set(p+".device", m.Device)
	set(p+".mountpoint", m.Mountpoint)
	set(p+".fstype", m.FSType)
	set(p+".options", m.Options)
}

func hooks(p string, h Hooks, set func(k, v string)) {
	for _, x := range []struct{ k, v string }{{"start", h.Start}, {"stop", h.Stop}, {"monitor", h.Monitor}} {
		if x.v != "" {
			set(p+"."+x.k, x.v)
		}
	}
}

// ClusterKeys returns a hash of each cluster-wide key's value (16 hex
// digits): enough to tell which keys differ between two nodes, and nothing
// of the values.
func (c *Config) ClusterKeys() map[string]string {
	kv := c.ClusterValues()
	out := make(map[string]string, len(kv))
	for k, v := range kv {
		out[k] = KeyHash(k, v)
	}
	return out
}

// KeyHash is the hash of one key's value.
func KeyHash(key, value string) string {
	h := sha256.Sum256([]byte("fenced-config-key-v1\x00" + key + "\x00" + value))
	return hex.EncodeToString(h[:8])
}

// DifferingKeys lists, sorted, the keys whose hashes differ between a and b,
// or that only one of them has.
func DifferingKeys(a, b map[string]string) []string {
	var out []string
	for k, h := range a {
		if b[k] != h {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	return sortedUnique(out)
}

func sortedUnique(s []string) []string {
	m := map[string]bool{}
	for _, x := range s {
		m[x] = true
	}
	return sortedKeys(m)
}
