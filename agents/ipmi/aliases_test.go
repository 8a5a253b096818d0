package ipmi

import (
	"maps"
	"strings"
	"testing"

	"github.com/fenced/fenced/agents"
)

// fence_ipmilan's older names (ipaddr, login, passwd) are accepted; given
// with the new name, the new name's value counts, even empty.
func TestAliases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        agents.Params
		host     string
		username string
		secrets  agents.Params
		err      string
	}{
		{"new names", agents.Params{"ip": "h", "username": "u", "password": "p"}, "h", "u", agents.Params{"password": "p"}, ""},
		{"old names", agents.Params{"ipaddr": "h", "login": "u", "passwd": "p"}, "h", "u", agents.Params{"password": "p"}, ""},
		{"both: the new name", agents.Params{"ip": "h", "ipaddr": "i", "username": "u", "login": "v", "password": "p", "passwd": "q"}, "h", "u", agents.Params{"password": "p"}, ""},
		{"both, the new one empty", agents.Params{"ip": "h", "username": "", "login": "v", "password": "", "passwd": "q"}, "h", "", agents.Params{"password": ""}, ""},
		{"an empty ip beside ipaddr", agents.Params{"ip": "", "ipaddr": "i"}, "", "", nil, "parameter ip: empty"},
		{"passwd beside a password file", agents.Params{"ip": "h", "passwd": "q", "password_file": "/f"}, "h", "", agents.Params{"password": "q", "password_file": "/f"}, ""},
		{"unknown", agents.Params{"ip": "h", "ip_addr": "i"}, "", "", nil, "parameter ip_addr: unknown"},
	} {
		c, err := parseConfig(tc.p, nil)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case c.host != tc.host || c.username != tc.username || !maps.Equal(c.secrets, tc.secrets):
			t.Errorf("%s: host %q username %q secrets %v; want %q %q %v", tc.name, c.host, c.username, c.secrets, tc.host, tc.username, tc.secrets)
		}
	}
}
