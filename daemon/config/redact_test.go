package config

import (
	"strings"
	"testing"
)

// Every secret parameter is redacted by its name wherever params hold it;
// the rest, comments and the key file's path stay.
func TestRedactYAML(t *testing.T) {
	in := `# lab cluster
gossip:
  key_file: /etc/fenced/gossip.key
devices:
  bmc1:
    agent: ipmi
    params: &p
      ip: 10.0.0.5 # the BMC
      password: s3cret-one
      hexadecimal_kg: abcdef0123
      password_file: /etc/fenced/pw
  bmc2:
    agent: ipmi
    params: *p
resources:
  - name: r
    node_params: {secret_key: s3cret-two}
alerts:
  - name: snmp
    params: {trap_community: s3cret-three, trap_host: mon}
`
	out, err := RedactYAML([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, secret := range []string{"s3cret-one", "abcdef0123", "/etc/fenced/pw", "s3cret-two", "s3cret-three"} {
		if strings.Contains(s, secret) {
			t.Errorf("redacted file holds %q:\n%s", secret, s)
		}
	}
	for _, keep := range []string{"# lab cluster", "/etc/fenced/gossip.key", "10.0.0.5", "# the BMC", "trap_host: mon", "password: " + Redacted} {
		if !strings.Contains(s, keep) {
			t.Errorf("redacted file lacks %q:\n%s", keep, s)
		}
	}
	if _, err := RedactYAML([]byte("devices: [\n")); err == nil || !strings.Contains(err.Error(), "configuration") {
		t.Errorf("bad YAML: %v", err)
	}
}
