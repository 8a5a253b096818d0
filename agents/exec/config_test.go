package exec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/config"
)

// Config validation (fenced validate, and fenced run at start) refuses an
// exec device whose parameters the program's metadata does not accept.
func TestConfigValidationRunsMetadataCheck(t *testing.T) {
	agent := testdata(t, "fence_testagent")
	doc := func(params string) []byte {
		return []byte(fmt.Sprintf(`version: 1
cluster:
  name: c1
gossip:
  plaintext: true
nodes:
  - name: a
    gossip: 127.0.0.1:7001
    raft: 127.0.0.1:7101
    fence:
      - devices:
          - device: plugin
            plug: "1"
  - {name: b, gossip: 127.0.0.1:7002, raft: 127.0.0.1:7102}
  - {name: c, gossip: 127.0.0.1:7003, raft: 127.0.0.1:7103}
data_dir: /var/lib/fenced
devices:
  plugin:
    agent: exec
    params:
      agent: %s
%s`, agent, params))
	}
	validate := func(params string) string {
		c, err := config.Parse(doc(params), "test.yaml")
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		var msgs []string
		for _, p := range c.Validate(agents.Default) {
			msgs = append(msgs, p.String())
		}
		return strings.Join(msgs, "\n")
	}
	if got := validate("      ip: 127.0.0.1\n      state_file: /tmp/state\n"); got != "" {
		t.Fatalf("valid exec device refused:\n%s", got)
	}
	got := validate("      ip: 127.0.0.1\n")
	if !strings.Contains(got, "parameter state_file: required by fence_testagent") {
		t.Fatalf("missing required parameter not refused; problems:\n%s", got)
	}
	got = validate("      ip: 127.0.0.1\n      state_file: /tmp/state\n      colour: blue\n")
	if !strings.Contains(got, "parameter colour: unknown to fence_testagent") {
		t.Fatalf("unknown parameter not refused; problems:\n%s", got)
	}
	t.Logf("problems reported:\n%s", got)
}
