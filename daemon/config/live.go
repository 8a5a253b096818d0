package config

import (
	"fmt"
	"reflect"
	"strings"
)

// What a reload (SIGHUP, `fencectl reload`) may change while fenced runs:
// the devices (agents, parameters — a rotated password's file among them —
// timeouts, retries, monitor intervals, unfencing), the nodes' fence
// topologies, and the alerts. Everything else is read once at start: the
// node list, names, roles and addresses (raft's voters and gossip's peers
// are built from them), the timing (a lease cannot change length while it
// runs), the paths (data_dir, api, ocf_root, gossip.key_file: the keys in
// it change live, see Daemon.Reload), plaintext, the storage
// and resources (they may be running), the watchdog, metrics.listen and the
// history limit. A reload that changes any of those is refused as a whole.

// RestartNeeded compares a reloaded configuration (next) with the running
// one and returns a problem, at its line in next, for every key that cannot
// change while fenced runs; nil when next may be applied live.
func RestartNeeded(running, next *Config) Problems {
	var ps Problems
	add := func(path, what string) {
		ps = append(ps, next.Problem(path, "%s: cannot change while fenced runs; restart it to apply (on the primary, hand over first: fencectl transfer)", what))
	}
	same := func(a, b any) bool { return reflect.DeepEqual(a, b) }
	if running.Version != next.Version {
		add("version", "changed")
	}
	if !same(running.Cluster, next.Cluster) {
		add("cluster", "changed")
	}
	if running.Node != next.Node {
		add("node", fmt.Sprintf("this node's name changed from %s to %s", running.Node, next.Node))
	}
	if len(running.Nodes) != len(next.Nodes) {
		add("nodes", fmt.Sprintf("the node list changed from %d to %d nodes", len(running.Nodes), len(next.Nodes)))
	} else {
		for i := range next.Nodes {
			a, b := running.Nodes[i], next.Nodes[i]
			p := fmt.Sprintf("nodes[%d]", i)
			switch {
			case a.Name != b.Name:
				add(p+".name", fmt.Sprintf("the node list changed (%s is now %s)", a.Name, b.Name))
			case a.Gossip != b.Gossip:
				add(p+".gossip", fmt.Sprintf("%s's gossip address changed", a.Name))
			case a.Raft != b.Raft:
				add(p+".raft", fmt.Sprintf("%s's raft address changed", a.Name))
			case a.Role != b.Role:
				add(p+".role", fmt.Sprintf("%s's role changed", a.Name))
			}
		}
	}
	if running.Timing != next.Timing {
		var what []string
		for _, d := range []struct {
			k    string
			a, b Duration
		}{{"heartbeat", running.Timing.Heartbeat, next.Timing.Heartbeat}, {"lease", running.Timing.Lease, next.Timing.Lease},
			{"margin", running.Timing.Margin, next.Timing.Margin}, {"grace", running.Timing.Grace, next.Timing.Grace},
			{"fence_timeout", running.Timing.FenceTimeout, next.Timing.FenceTimeout}} {
			if d.a != d.b {
				what = append(what, fmt.Sprintf("%s %s → %s", d.k, d.a, d.b))
			}
		}
		add("timing", "timing changed ("+strings.Join(what, ", ")+")")
	}
	for _, x := range []struct {
		path string
		a, b any
	}{
		{"data_dir", running.DataDir, next.DataDir},
		{"api", running.API, next.API},
		{"gossip", running.Gossip, next.Gossip},
		{"storage", running.Storage, next.Storage},
		{"resources", running.Resources, next.Resources},
		{"ocf_root", running.OCFRoot, next.OCFRoot},
		{"watchdog", running.Watchdog, next.Watchdog},
		{"metrics", running.Metrics, next.Metrics},
		{"history", running.History, next.History},
	} {
		if !same(x.a, x.b) {
			add(x.path, "changed")
		}
	}
	return ps.sorted()
}

// LiveChanges lists what a reload changes that applies live: the keys of
// devices, fence topologies and alerts that differ (names only, never
// values).
func LiveChanges(running, next *Config) []string {
	var out []string
	for _, name := range sortedUnique(append(sortedKeys(running.Devices), sortedKeys(next.Devices)...)) {
		a, okA := running.Devices[name]
		b, okB := next.Devices[name]
		switch {
		case !okA:
			out = append(out, "devices."+name+" (added)")
		case !okB:
			out = append(out, "devices."+name+" (removed)")
		case !reflect.DeepEqual(a, b):
			out = append(out, "devices."+name)
		}
	}
	for i, n := range next.Nodes {
		if i < len(running.Nodes) && !reflect.DeepEqual(running.Nodes[i].Fence, n.Fence) {
			out = append(out, "nodes."+n.Name+".fence")
		}
	}
	if !reflect.DeepEqual(running.Alerts, next.Alerts) {
		out = append(out, "alerts")
	}
	return out
}
