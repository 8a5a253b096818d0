package resource

import (
	"context"
	"strings"
	"testing"

	"github.com/fenced/fenced/daemon/config"
)

const checkHead = `version: 1
cluster: {name: c}
gossip: {plaintext: true}
nodes:
  - {name: a, gossip: 127.0.0.1:7001, raft: 127.0.0.1:7101}
resources:
`

func parse(t *testing.T, resources string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(checkHead+resources), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if ps := cfg.Validate(nil); len(ps) > 0 {
		t.Fatalf("schema problems: %v", ps)
	}
	return cfg
}

// TestCheckAgainstMetadata reads the real agents' meta-data: unknown and
// missing parameters, ill-typed values and a missing agent are reported at
// FILE:LINE: PATH.
func TestCheckAgainstMetadata(t *testing.T) {
	needAgent(t, "heartbeat:IPaddr2")
	cfg := parse(t, `  - name: vip
    ocf: heartbeat:IPaddr2
    params: {netmask: "24", arp_count: many}
  - name: ok
    ocf: heartbeat:IPaddr2
    params: {ip: 10.0.0.100, cidr_netmask: 24, arp_count: 3}
  - name: gone
    ocf: heartbeat:NoSuchAgent
  - name: bool
    ocf: heartbeat:Filesystem
    params: {device: /dev/x, directory: /srv, fstype: ext4, force_unmount: perhaps}
`)
	ps := Check(context.Background(), cfg)
	got := ps.Error()
	for _, want := range []string{
		`f.yaml:9: resources[0].params.arp_count: "many" is not an integer`,
		`f.yaml:9: resources[0].params.netmask: unknown to heartbeat:IPaddr2 (its meta-data declares: ip, `,
		`f.yaml:9: resources[0].params: ip: required by heartbeat:IPaddr2`,
		`f.yaml:14: resources[2].ocf: no agent heartbeat:NoSuchAgent: /usr/lib/ocf/resource.d/heartbeat/NoSuchAgent does not exist (installed agents: `,
		`f.yaml:17: resources[3].params.force_unmount: "perhaps" is not a boolean`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if len(ps) != 5 {
		t.Errorf("%d problems, want 5:\n%s", len(ps), got)
	}
	if strings.Contains(got, "resources[1]") {
		t.Errorf("the good resource was refused:\n%s", got)
	}
}

// TestValidateAll runs Dummy's validate-all: a state file in a directory
// that does not exist is refused (exit 2) with the agent's reason.
func TestValidateAll(t *testing.T) {
	needAgent(t, dummy)
	dir := t.TempDir()
	cfg := parse(t, `  - name: good
    ocf: heartbeat:Dummy
    params: {state: `+dir+`/good.state}
  - name: bad
    ocf: heartbeat:Dummy
    params: {state: `+dir+`/missing/bad.state}
`)
	if ps := Check(context.Background(), cfg); len(ps) > 0 {
		t.Fatalf("check: %v", ps)
	}
	ps := ValidateAll(context.Background(), cfg, "a")
	if len(ps) != 1 || !strings.Contains(ps.Error(), "f.yaml:10: resources[1]: heartbeat:Dummy validate-all: exit 2 (invalid argument): State file") {
		t.Fatalf("validate-all problems:\n%v", ps)
	}
}
