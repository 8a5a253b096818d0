package config

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Node-local values of the resource group.
//
// The group must be the same on every data node, or a takeover would start
// something else than what ran: its keys are in the cluster's fingerprint.
// Some of its values are rightly each machine's own: the same shared disk
// seen under another device name, a mount point that differs, a program
// installed in another place. A node whose fingerprint differs is never
// granted primacy, so such a cluster never elects a primary until those
// values are declared node-local: for an OCF agent, by giving them in
// node_params; for the storage shorthand and for mount and hooks
// resources, by naming them in node_local (storage.node_local: [mount.device]).
// A declared value is left out of the fingerprint; the declaration is not,
// so every node declares the same keys.

// nodeLocalKeys are the keys node_local may name, by the part of the
// resource they belong to.
var nodeLocalKeys = map[string][]string{
	"mount": {"mount.device", "mount.mountpoint", "mount.fstype", "mount.options"},
	"hooks": {"hooks.start", "hooks.stop", "hooks.monitor"},
}

// nodeLocal checks a node_local list at p ("storage.node_local",
// "resources[1].node_local"): each entry a key of a part the resource has
// (hasMount, hasHooks), once.
func (v *validator) nodeLocal(p string, keys []string, hasMount, hasHooks bool, ocf bool) {
	seen := map[string]bool{}
	for i, k := range keys {
		at := fmt.Sprintf("%s[%d]", p, i)
		part, _, _ := strings.Cut(k, ".")
		switch {
		case ocf:
			v.add(at, "%q: an OCF agent's parameters that differ per node go in node_params, not node_local", k)
		case !slices.Contains(nodeLocalKeys[part], k):
			v.add(at, "%q: want one of %s", k, strings.Join(append(slices.Clone(nodeLocalKeys["mount"]), nodeLocalKeys["hooks"]...), ", "))
		case part == "mount" && !hasMount, part == "hooks" && !hasHooks:
			v.add(at, "%q: there is no %s here", k, part)
		case seen[k]:
			v.add(at, "%q is listed twice", k)
		}
		seen[k] = true
	}
}

// localSet is set (for ClusterValues) leaving out the keys under prefix
// that local names ("mount.device" under "storage" is "storage.mount.device").
func localSet(prefix string, local []string, set func(k, v string)) func(k, v string) {
	if len(local) == 0 {
		return set
	}
	skip := map[string]bool{}
	for _, k := range local {
		skip[prefix+"."+k] = true
	}
	return func(k, v string) {
		if !skip[k] {
			set(k, v)
		}
	}
}

// NodeLocalHint says how to declare the differing keys that may be a
// node's own (mount and hooks values, OCF parameters), "" when none of
// them is: "if these values are each node's own, declare so on every
// node: storage.node_local: [mount.mountpoint]; resources vip: node_params
// nic (instead of params)". keys are fingerprint keys (DifferingKeys).
func NodeLocalHint(keys []string) string {
	local := map[string][]string{} // where to declare → what
	var params []string
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, "storage."):
			rest := strings.TrimPrefix(k, "storage.")
			if isNodeLocalKey(rest) {
				local["storage.node_local"] = append(local["storage.node_local"], rest)
			}
		case strings.HasPrefix(k, "resources."):
			name, rest, _ := strings.Cut(strings.TrimPrefix(k, "resources."), ".")
			switch {
			case isNodeLocalKey(rest):
				w := "node_local of resource " + name
				local[w] = append(local[w], rest)
			case strings.HasPrefix(rest, "params."):
				params = append(params, fmt.Sprintf("%s of resource %s", strings.TrimPrefix(rest, "params."), name))
			}
		}
	}
	var parts []string
	for _, w := range slices.Sorted(maps.Keys(local)) {
		parts = append(parts, fmt.Sprintf("%s: [%s]", w, strings.Join(local[w], ", ")))
	}
	if len(params) > 0 {
		sort.Strings(params)
		parts = append(parts, "move to node_params: "+strings.Join(params, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "if these values are each node's own (a device named differently, a path of its own), declare them so, the same way on every node: " +
		strings.Join(parts, "; ") + "; otherwise make the files agree"
}

func isNodeLocalKey(k string) bool {
	part, _, _ := strings.Cut(k, ".")
	return slices.Contains(nodeLocalKeys[part], k)
}
