// Command fencedyaml writes fenced.yaml(5), the man page of fenced's
// configuration file, from daemon/config: its keys and defaults from
// config.Default() and the config structs, its prose from their doc
// comments. The packaging runs it at build time, inside the module:
//
//	go run ./cmd/internal/docgen/fencedyaml --version VERSION --out DIR
//
// so the page cannot drift from the configuration it describes.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fenced/fenced/cmd/internal/docgen"
	"github.com/fenced/fenced/cmd/internal/docgen/configdoc"
	"github.com/fenced/fenced/daemon/config"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fencedyaml:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencedyaml", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "", "fenced version for the page footer (required)")
	out := fs.String("out", "", "directory to write fenced.yaml.5 into (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" || *out == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: fencedyaml --version VERSION --out DIR")
	}
	page, err := Page(*version)
	if err != nil {
		return err
	}
	b, err := page.Generate()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "fenced.yaml.5"), b, 0o644)
}

// Examples are the page's EXAMPLES; a test validates each file.
var Examples = []configdoc.Example{
	{Text: "Three nodes, each fenced through its BMC over IPMI, and a resource group of a filesystem on a shared disk and a floating address. " +
		"The same file goes to every node; each finds its own entry by its hostname (or fenced run --node).",
		Code: `version: 1
cluster: {name: storage-ha}
nodes:
  - name: node1
    gossip: 10.0.0.1:7946
    raft: 10.0.0.1:7947
    fence: [{devices: [{device: node1-bmc}]}]
  - name: node2
    gossip: 10.0.0.2:7946
    raft: 10.0.0.2:7947
    fence: [{devices: [{device: node2-bmc}]}]
  - name: node3
    gossip: 10.0.0.3:7946
    raft: 10.0.0.3:7947
    fence: [{devices: [{device: node3-bmc}]}]
gossip: {key_file: /etc/fenced/gossip.key}
devices:
  node1-bmc: {agent: ipmi, params: {ip: 10.0.1.1, username: fence, password_file: /etc/fenced/secrets/node1-bmc}}
  node2-bmc: {agent: ipmi, params: {ip: 10.0.1.2, username: fence, password_file: /etc/fenced/secrets/node2-bmc}}
  node3-bmc: {agent: ipmi, params: {ip: 10.0.1.3, username: fence, password_file: /etc/fenced/secrets/node3-bmc}}
resources:
  - name: data
    ocf: heartbeat:Filesystem
    params: {device: /dev/disk/by-id/wwn-0x600a0b800012345, directory: /srv/shared, fstype: xfs}
  - name: vip
    ocf: heartbeat:IPaddr2
    params: {ip: 10.0.0.100, cidr_netmask: "24"}
watchdog: {device: /dev/watchdog}`},
	{Text: "Two data nodes and a witness (a small VM, or a machine at another site) that only votes: it has no fence topology, " +
		"and its file may leave the devices' secrets' files and the resources out. Each data node mounts the shared disk at a " +
		"device path of its own, declared node-local so that the nodes' configurations still agree.",
		Code: `version: 1
cluster: {name: pair}
nodes:
  - {name: a, gossip: 10.0.0.1:7946, raft: 10.0.0.1:7947, fence: [{devices: [{device: a-bmc}]}]}
  - {name: b, gossip: 10.0.0.2:7946, raft: 10.0.0.2:7947, fence: [{devices: [{device: b-bmc}]}]}
  - {name: w, gossip: 10.0.9.1:7946, raft: 10.0.9.1:7947, role: witness}
gossip: {key_file: /etc/fenced/gossip.key}
devices:
  a-bmc: {agent: redfish, params: {ip: 10.0.1.1, username: fence, password_file: /etc/fenced/secrets/a-bmc}}
  b-bmc: {agent: redfish, params: {ip: 10.0.1.2, username: fence, password_file: /etc/fenced/secrets/b-bmc}}
storage:
  mount: {device: /dev/mapper/mpatha, mountpoint: /srv/data, fstype: ext4}
  node_local: [mount.device]
watchdog: {device: /dev/watchdog}`},
}

// Page describes fenced.yaml(5); its date is SOURCE_DATE_EPOCH's (else
// today), as for the commands' pages.
func Page(version string) (*configdoc.Page, error) {
	date, err := docgen.SourceDate()
	if err != nil {
		return nil, err
	}
	return &configdoc.Page{
		Name:     "fenced.yaml",
		Section:  "5",
		Title:    "configuration file of the fenced fencing daemon",
		Source:   "fenced " + version,
		Manual:   "fenced manual",
		Date:     date,
		Synopsis: "/etc/fenced/fenced.yaml",
		Description: []string{
			"fenced(8) reads its configuration from one YAML file: " +
				"/etc/fenced/fenced.yaml, unless fenced run --config names another. " +
				"Every key is described below, with its type and the default a file that leaves it out gets.",
			"The file is read strictly: an unknown key, a value of the wrong type or a broken rule " +
				"(such as the relations between the timing keys) stops fenced at start with every problem " +
				"listed as FILE:LINE: PATH: MESSAGE. fenced validate --config FILE runs the same checks " +
				"without starting anything.",
			"Keys are written with their full path: timing.lease is the key lease inside the mapping timing; " +
				"nodes[].gossip is the key gossip in every entry of the list nodes; " +
				"devices.NAME.agent is the key agent in every entry of the mapping devices, " +
				"whose keys (NAME) are names the file chooses. " +
				"Durations are written as a number and a unit, such as 250ms, 3s or 1m30s.",
		},
		Examples: Examples,
		Files: [][2]string{
			{"/etc/fenced/fenced.yaml", "The configuration. The packages install a commented sample for a 3-node cluster, which is kept on upgrade."},
			{"/etc/fenced/gossip.key", "The cluster key (gossip.key_file), the same on every node: fenced keygen creates it."},
			{"/etc/fenced/secrets/", "Where the sample keeps the devices' secrets (password_file, community_file), one file each, mode 0400."},
		},
		SeeAlso: []string{"fenced(8)", "fenced-run(8)", "fenced-validate(8)", "fenced-keygen(8)", "fencectl(1)"},
		Root:    config.Default(),
	}, nil
}
