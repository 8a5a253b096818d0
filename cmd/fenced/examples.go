package main

import "github.com/spf13/cobra"

// examples are each visible command's EXAMPLES (in --help and the man
// pages), by command path. A test runs every line through the command
// tree: each names a command and flags that exist.
var examples = map[string]string{
	"fenced": `  fenced keygen --out /etc/fenced/gossip.key
  fenced validate --config /etc/fenced/fenced.yaml
  systemctl enable --now fenced
  fenced run --config /etc/fenced/fenced.yaml --node node1`,
	"fenced run": `  # As the packaged unit runs it:
  fenced run --config /etc/fenced/fenced.yaml
  # By hand, naming the node and logging more:
  fenced run --config /etc/fenced/fenced.yaml --node node2 --log-level debug`,
	"fenced validate": `  fenced validate
  fenced validate --config /etc/fenced/fenced.yaml --node node3
  # On a workstation or in CI, without the secrets and agents:
  fenced validate --offline --config fenced.yaml`,
	"fenced keygen": `  fenced keygen
  fenced keygen --out /etc/fenced/gossip.key --bytes 32`,
	"fenced agent": `  fenced agent ipmi -o metadata
  fenced agent ipmi --ip=10.0.1.2 --username=fence --password_file=/etc/fenced/secrets/node2-bmc -o status
  printf 'ip=10.0.1.2\nusername=fence\npassword_file=/etc/fenced/secrets/node2-bmc\naction=monitor\n' | fenced agent ipmi`,
	"fenced version": `  fenced version`,
	"fenced recover": `  # On the survivor, after powering the lost nodes off for good:
  systemctl stop fenced
  fenced recover --config /etc/fenced/fenced.yaml --yes-i-have-fenced-the-others --reason "node2, node3 burned"
  systemctl start fenced`,
}

// setExamples gives every command of root's tree its examples.
func setExamples(c *cobra.Command) {
	if ex, ok := examples[c.CommandPath()]; ok {
		c.Example = ex
	}
	for _, sub := range c.Commands() {
		setExamples(sub)
	}
}
