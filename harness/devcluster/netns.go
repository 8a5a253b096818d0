package devcluster

import (
	"fmt"
	"os/exec"
	"strings"
)

// Netns is a set of network namespaces, one per node, joined by a bridge
// that lives in a namespace of its own, so nothing touches the host's
// network. Partitions are nftables rules inside a node's namespace. Needs
// root, iproute2 and nftables.
type Netns struct {
	Prefix string   // namespace name prefix, unique per test
	Hosts  []string // node addresses, index i in namespace Prefix+i
	sw     string
}

// NewNetns creates n namespaces on the subnet 10.213.<subnet>.0/24 (private
// addresses that exist only inside these namespaces).
func NewNetns(prefix string, n, subnet int) (*Netns, error) {
	ns := &Netns{Prefix: prefix, sw: prefix + "sw"}
	run := func(args ...string) error {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	ns.Close() // leftovers of an earlier run
	steps := [][]string{
		{"ip", "netns", "add", ns.sw},
		{"ip", "-n", ns.sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", ns.sw, "link", "set", "br0", "up"},
	}
	for i := range n {
		name := ns.Name(i)
		host := fmt.Sprintf("10.213.%d.%d", subnet, i+1)
		ns.Hosts = append(ns.Hosts, host)
		veth := ns.Veth(i)
		steps = append(steps,
			[]string{"ip", "netns", "add", name},
			[]string{"ip", "-n", name, "link", "set", "lo", "up"},
			[]string{"ip", "-n", ns.sw, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name},
			[]string{"ip", "-n", ns.sw, "link", "set", veth, "master", "br0", "up"},
			[]string{"ip", "-n", name, "addr", "add", host + "/24", "dev", "eth0"},
			[]string{"ip", "-n", name, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			ns.Close()
			return nil, err
		}
	}
	return ns, nil
}

// AddHost adds a namespace Prefix+name with address addr/24 on eth0,
// joined to the nodes' bridge (a client of the cluster), and returns the
// namespace's name. Close deletes it with the others.
func (ns *Netns) AddHost(name, addr string) (string, error) {
	nsName := ns.Prefix + name
	veth := "v" + ns.Prefix + name
	if len(veth) > 12 {
		veth = veth[len(veth)-12:]
	}
	for _, s := range [][]string{
		{"ip", "netns", "add", nsName},
		{"ip", "-n", nsName, "link", "set", "lo", "up"},
		{"ip", "-n", ns.sw, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", nsName},
		{"ip", "-n", ns.sw, "link", "set", veth, "master", "br0", "up"},
		{"ip", "-n", nsName, "addr", "add", addr + "/24", "dev", "eth0"},
		{"ip", "-n", nsName, "link", "set", "eth0", "up"},
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nsName, nil
}

// Switch is the namespace that holds the bridge br0.
func (ns *Netns) Switch() string { return ns.sw }

// Veth is the switch-side end of node i's link (a port of br0, in the
// Switch namespace); the node-side end is eth0 in node i's namespace.
func (ns *Netns) Veth(i int) string {
	veth := fmt.Sprintf("v%s%d", ns.Prefix, i)
	if len(veth) > 12 {
		veth = veth[len(veth)-12:]
	}
	return veth
}

// Name is node i's namespace.
func (ns *Netns) Name(i int) string { return fmt.Sprintf("%s%d", ns.Prefix, i) }

// Wrap runs argv inside node i's namespace.
func (ns *Netns) Wrap(i int, argv []string) []string {
	return append([]string{"ip", "netns", "exec", ns.Name(i)}, argv...)
}

// Isolate drops all traffic between node i and every other node, in both
// directions, with nftables inside i's namespace.
func (ns *Netns) Isolate(i int) error {
	var peers []string
	for j, h := range ns.Hosts {
		if j != i {
			peers = append(peers, h)
		}
	}
	set := strings.Join(peers, ", ")
	rules := fmt.Sprintf(`table inet fenced_partition {
  chain in { type filter hook input priority 0; policy accept; ip saddr { %s } drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr { %s } drop; }
}
`, set, set)
	cmd := exec.Command("ip", "netns", "exec", ns.Name(i), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft isolate %s: %v: %s", ns.Name(i), err, out)
	}
	return nil
}

// Cut drops all traffic between nodes i and j only (both directions, with
// nftables in both namespaces); their links to the other nodes stay up.
func (ns *Netns) Cut(i, j int) error {
	for _, p := range [][2]int{{i, j}, {j, i}} {
		peer := ns.Hosts[p[1]]
		rules := fmt.Sprintf(`table inet fenced_cut%d {
  chain in { type filter hook input priority 0; policy accept; ip saddr %s drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr %s drop; }
}
`, p[1], peer, peer)
		cmd := exec.Command("ip", "netns", "exec", ns.Name(p[0]), "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft cut %s from %s: %v: %s", ns.Name(p[0]), peer, err, out)
		}
	}
	return nil
}

// Uncut removes the rules of Cut(i, j).
func (ns *Netns) Uncut(i, j int) error {
	for _, p := range [][2]int{{i, j}, {j, i}} {
		out, err := exec.Command("ip", "netns", "exec", ns.Name(p[0]), "nft", "delete", "table", "inet", fmt.Sprintf("fenced_cut%d", p[1])).CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft uncut %s: %v: %s", ns.Name(p[0]), err, out)
		}
	}
	return nil
}

// Loss drops percent of the packets node i receives from the other nodes
// (nftables numgen; this kernel has no netem): each cluster link then
// loses percent of its packets in each direction.
func (ns *Netns) Loss(i, percent int) error {
	var peers []string
	for j, h := range ns.Hosts {
		if j != i {
			peers = append(peers, h)
		}
	}
	rules := fmt.Sprintf(`table inet fenced_loss {
  chain in { type filter hook input priority 0; policy accept; ip saddr { %s } numgen random mod 100 < %d drop; }
}
`, strings.Join(peers, ", "), percent)
	cmd := exec.Command("ip", "netns", "exec", ns.Name(i), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft loss %s: %v: %s", ns.Name(i), err, out)
	}
	return nil
}

// NoLoss removes node i's loss rule.
func (ns *Netns) NoLoss(i int) error {
	out, err := exec.Command("ip", "netns", "exec", ns.Name(i), "nft", "delete", "table", "inet", "fenced_loss").CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft no loss %s: %v: %s", ns.Name(i), err, out)
	}
	return nil
}

// Heal removes node i's partition rules.
func (ns *Netns) Heal(i int) error {
	out, err := exec.Command("ip", "netns", "exec", ns.Name(i), "nft", "delete", "table", "inet", "fenced_partition").CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft heal %s: %v: %s", ns.Name(i), err, out)
	}
	return nil
}

// Close deletes the namespaces (their links go with them).
func (ns *Netns) Close() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], ns.Prefix) {
			exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}
