package config

import (
	"slices"
	"strings"
	"testing"
)

const fpBase = `version: 1
cluster: {name: c1}
nodes:
  - name: a
    gossip: 127.0.0.1:7001
    raft: 127.0.0.1:7101
    fence:
      - devices: [{device: bmc-a, plug: "1", params: {password_file: /etc/a.pw}}]
  - {name: b, gossip: 127.0.0.1:7002, raft: 127.0.0.1:7102}
  - {name: c, gossip: 127.0.0.1:7003, raft: 127.0.0.1:7103, role: witness}
timing: {lease: 3s}
data_dir: /var/lib/fenced
gossip: {key_file: /etc/fenced/gossip.key}
devices:
  bmc-a:
    agent: fake
    params: {ip: 10.0.0.1, password: hunter2, password_file: /etc/x, community_file: /etc/c, username: admin}
`

func parse(t *testing.T, s string) *Config {
	t.Helper()
	c, err := Parse([]byte(s), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if ps := c.Validate(nil); len(ps) > 0 {
		t.Fatal(ps)
	}
	return c
}

func edit(s string, pairs ...string) string {
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			panic("edit: no " + pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

// The fingerprint covers what nodes must agree on, names the keys that
// differ, and leaves out node-local keys and every secret.
func TestClusterKeys(t *testing.T) {
	base := parse(t, fpBase).ClusterKeys()
	for _, c := range []struct {
		name string
		edit []string
		want []string // differing keys; nil: the same fingerprint
	}{
		{"lease in other units", []string{"lease: 3s", "lease: 3000ms"}, nil},
		{"node-local keys", []string{"data_dir: /var/lib/fenced", "data_dir: /srv/fenced\nnode: b\napi: {socket: /run/x.sock}\nmetrics: {listen: 127.0.0.1:9464}\nocf_root: /opt/ocf\nwatchdog: {device: /dev/watchdog1}",
			"key_file: /etc/fenced/gossip.key", "key_file: /etc/other.key"}, nil},
		{"secrets and their files", []string{"password: hunter2", "password: other", "password_file: /etc/x", "password_file: /etc/y",
			"community_file: /etc/c", "community_file: /etc/d", "password_file: /etc/a.pw", "password_file: /etc/b.pw"}, nil},
		{"alerts are node-local", []string{"data_dir: /var/lib/fenced", "data_dir: /var/lib/fenced\nalerts: [{name: f, path: /bin/true}]"}, nil},
		{"lease", []string{"lease: 3s", "lease: 8s"}, []string{"timing.lease"}},
		{"a device parameter", []string{"ip: 10.0.0.1", "ip: 10.0.0.2"}, []string{"devices.bmc-a.params.ip"}},
		{"a username", []string{"username: admin", "username: root"}, []string{"devices.bmc-a.params.username"}},
		{"a plug", []string{`plug: "1"`, `plug: "2"`}, []string{"nodes.a.fence[0].devices[0].plug"}},
		{"a node's address", []string{"127.0.0.1:7102", "127.0.0.1:7202"}, []string{"nodes.b.raft"}},
		{"a role", []string{", role: witness", ""}, []string{"nodes.c.role"}},
		{"the node order", []string{"  - {name: b, gossip: 127.0.0.1:7002, raft: 127.0.0.1:7102}\n", "",
			"role: witness}\n", "role: witness}\n  - {name: b, gossip: 127.0.0.1:7002, raft: 127.0.0.1:7102}\n"}, []string{"nodes"}},
		{"a topology level", []string{"  - {name: b, gossip", "  - {name: b, fence: [{devices: [{device: bmc-a}]}], gossip"},
			[]string{"nodes.b.fence[0]"}},
		{"the cluster name", []string{"name: c1", "name: c2"}, []string{"cluster.name"}},
		{"the storage", []string{"data_dir: /var/lib/fenced", "data_dir: /var/lib/fenced\nstorage: {checks_tokens: true}"}, []string{"storage.checks_tokens"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			other := parse(t, edit(fpBase, c.edit...)).ClusterKeys()
			if got := DifferingKeys(base, other); !slices.Equal(got, c.want) {
				t.Errorf("differing keys %q, want %q", got, c.want)
			}
		})
	}
	vals := parse(t, fpBase).ClusterValues()
	for k, v := range vals {
		if strings.Contains(v, "hunter2") || strings.Contains(k, "password") || strings.Contains(k, "community") {
			t.Errorf("a secret in the fingerprint: %s=%s", k, v)
		}
	}
	for _, k := range []string{"timing.lease", "devices.bmc-a.agent", "nodes.a.fence[0]", "history.limit", "gossip.plaintext"} {
		if _, ok := vals[k]; !ok {
			t.Errorf("%s missing from the cluster-wide keys", k)
		}
	}
	for k, h := range base {
		if len(h) != 16 || strings.Contains(h, vals[k]) && vals[k] != "" && len(vals[k]) > 3 {
			t.Errorf("key %s: hash %q", k, h)
		}
	}
}

func TestSecretParam(t *testing.T) {
	for name, want := range map[string]bool{
		"password": true, "passwd": true, "password_file": true, "password_script": true, "community_file": true,
		"snmp_priv_passwd": true, "hexadecimal_kg": true, "hexadecimal_kg_file": true, "identity_file": true,
		"ip": false, "username": false, "ca_file": false, "plug": false, "lanplus": false, "power_timeout": false,
	} {
		if got := SecretParam(name); got != want {
			t.Errorf("SecretParam(%s) = %v, want %v", name, got, want)
		}
	}
}

// A reload may change devices, topologies and alerts; anything else is
// refused with a problem at its line.
func TestRestartNeeded(t *testing.T) {
	running := parse(t, fpBase)
	live := parse(t, edit(fpBase, "ip: 10.0.0.1", "ip: 10.0.0.9", `plug: "1"`, `plug: "5"`,
		"data_dir: /var/lib/fenced", "data_dir: /var/lib/fenced\nalerts: [{name: f, path: /bin/true}]"))
	if ps := RestartNeeded(running, live); len(ps) > 0 {
		t.Errorf("live changes refused: %v", ps)
	}
	if got := LiveChanges(running, live); !slices.Equal(got, []string{"devices.bmc-a", "nodes.a.fence", "alerts"}) {
		t.Errorf("LiveChanges = %q", got)
	}
	for _, c := range []struct {
		name string
		edit []string
		want string
	}{
		{"lease", []string{"lease: 3s", "lease: 5s"}, "test.yaml:11: timing: timing changed (lease 3s → 5s): cannot change while fenced runs; restart it"},
		{"a node added", []string{"role: witness}", "role: witness}\n  - {name: d, gossip: 127.0.0.1:7004, raft: 127.0.0.1:7104}\n  - {name: e, gossip: 127.0.0.1:7005, raft: 127.0.0.1:7105}"},
			"nodes: the node list changed from 3 to 5 nodes"},
		{"an address", []string{"127.0.0.1:7002", "127.0.0.1:7202"}, "nodes[1].gossip: b's gossip address changed"},
		{"data_dir", []string{"data_dir: /var/lib/fenced", "data_dir: /srv"}, "test.yaml:12: data_dir: changed"},
		{"the key file", []string{"/etc/fenced/gossip.key", "/etc/k"}, "gossip: changed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ps := RestartNeeded(running, parse(t, edit(fpBase, c.edit...)))
			if len(ps) != 1 || !strings.Contains(ps[0].String(), c.want) {
				t.Errorf("got %v, want one problem containing %q", ps, c.want)
			}
		})
	}
}

// Values of the group declared node-local may differ between nodes; the
// declaration may not. Undeclared, they differ and the hint says how to
// declare them.
func TestNodeLocalValues(t *testing.T) {
	noRes := fpBase + `storage:
  mount: {device: /dev/sdb, mountpoint: /srv/a, fstype: xfs}
  hooks: {start: /usr/local/bin/start, stop: /usr/local/bin/stop}
`
	base := parse(t, noRes).ClusterKeys()
	other := parse(t, edit(noRes, "/dev/sdb", "/dev/sdc", "/srv/a", "/srv/b", "/usr/local/bin/start", "/opt/bin/start")).ClusterKeys()
	diff := DifferingKeys(base, other)
	if want := []string{"storage.hooks.start", "storage.mount.device", "storage.mount.mountpoint"}; !slices.Equal(diff, want) {
		t.Fatalf("differing %q, want %q", diff, want)
	}
	hint := NodeLocalHint(diff)
	if want := "storage.node_local: [hooks.start, mount.device, mount.mountpoint]"; !strings.Contains(hint, want) {
		t.Errorf("hint %q lacks %q", hint, want)
	}
	if NodeLocalHint([]string{"timing.lease", "nodes.a.raft"}) != "" {
		t.Error("a hint for keys that cannot be node-local")
	}

	declared := strings.Replace(noRes, "  hooks: {start:", "  node_local: [mount.device, mount.mountpoint, hooks.start]\n  hooks: {start:", 1)
	a := parse(t, declared).ClusterKeys()
	b := parse(t, edit(declared, "/dev/sdb", "/dev/sdc", "/srv/a", "/srv/b", "/usr/local/bin/start", "/opt/bin/start")).ClusterKeys()
	if d := DifferingKeys(a, b); len(d) != 0 {
		t.Errorf("declared node-local, still differing: %q", d)
	}
	if d := DifferingKeys(a, parse(t, edit(declared, "/usr/local/bin/stop", "/opt/bin/stop")).ClusterKeys()); !slices.Equal(d, []string{"storage.hooks.stop"}) {
		t.Errorf("an undeclared value: differing %q", d)
	}
	if d := DifferingKeys(a, base); !slices.Contains(d, "storage.node_local") {
		t.Errorf("a node without the declaration: differing %q, want storage.node_local among them", d)
	}

	// The same in a resource; an OCF agent's go in node_params.
	res := fpBase + `resources:
  - {name: data, mount: {device: /dev/sdb, mountpoint: /srv, fstype: xfs}, node_local: [mount.device]}
  - {name: vip, ocf: "heartbeat:IPaddr2", params: {ip: 10.0.0.100, nic: eth0}}
`
	d := DifferingKeys(parse(t, res).ClusterKeys(), parse(t, edit(res, "/dev/sdb", "/dev/sdc", "nic: eth0", "nic: eth1")).ClusterKeys())
	if !slices.Equal(d, []string{"resources.vip.params.nic"}) {
		t.Errorf("resources: differing %q", d)
	}
	if hint := NodeLocalHint(d); !strings.Contains(hint, "move to node_params: nic of resource vip") {
		t.Errorf("hint %q", hint)
	}
	if hint := NodeLocalHint([]string{"resources.data.mount.mountpoint"}); !strings.Contains(hint, "node_local of resource data: [mount.mountpoint]") {
		t.Errorf("hint %q", hint)
	}

	// What node_local may name.
	for _, c := range []struct{ yaml, want string }{
		{strings.Replace(noRes, "  hooks: {start:", "  node_local: [mount.uuid]\n  hooks: {start:", 1), `storage.node_local[0]: "mount.uuid": want one of mount.device`},
		{strings.Replace(noRes, "  hooks: {start:", "  node_local: [hooks.monitor, hooks.monitor]\n  hooks: {start:", 1), `storage.node_local[1]: "hooks.monitor" is listed twice`},
		{strings.Replace(res, "nic: eth0}}", "nic: eth0}, node_local: [mount.device]}", 1), `resources[1].node_local[0]: "mount.device": an OCF agent's parameters that differ per node go in node_params`},
		{strings.Replace(res, "node_local: [mount.device]", "node_local: [hooks.start]", 1), `resources[0].node_local[0]: "hooks.start": there is no hooks here`},
	} {
		cfg, err := Parse([]byte(c.yaml), "test.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if ps := cfg.Validate(nil); !strings.Contains(ps.Error(), c.want) {
			t.Errorf("problems %q lack %q", ps.Error(), c.want)
		}
	}
}

// A witness runs no resource: its fingerprint leaves the group out, so one
// whose file has no storage agrees with the data nodes' by every other key.
func TestWitnessKeys(t *testing.T) {
	withGroup := fpBase + "storage:\n  hooks: {start: /bin/start, stop: /bin/stop}\n"
	data := parse(t, withGroup)
	witness := parse(t, fpBase+"node: c\n")
	witnessWithGroup := parse(t, withGroup+"node: c\n")
	dk, wk := data.ClusterKeys(), witness.ClusterKeys()
	if d := DifferingKeys(WitnessKeys(dk), wk); len(d) != 0 {
		t.Errorf("a witness without storage differs from the data nodes' file in %q", d)
	}
	if d := DifferingKeys(witnessWithGroup.ClusterKeys(), wk); len(d) != 0 {
		t.Errorf("a witness's fingerprint depends on its storage: %q", d)
	}
	if _, ok := dk["storage.hooks.start"]; !ok {
		t.Error("a data node's fingerprint lacks the group")
	}
	lease := parse(t, edit(fpBase, "lease: 3s", "lease: 8s")+"node: c\n").ClusterKeys()
	if d := DifferingKeys(WitnessKeys(dk), lease); !slices.Equal(d, []string{"timing.lease"}) {
		t.Errorf("a witness with another lease: differing %q", d)
	}
}
