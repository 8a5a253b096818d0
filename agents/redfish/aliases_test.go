package redfish

import (
	"log/slog"
	"maps"
	"strings"
	"testing"

	"github.com/fenced/fenced/agents"
)

// fence_redfish's older names (ipaddr, login, passwd, systems-uri,
// redfish-uri, port) are accepted; given with the new name, the new
// name's value counts, even empty.
func TestAliases(t *testing.T) {
	base := func(extra agents.Params) agents.Params {
		p := agents.Params{"plain_http": "1"}
		maps.Copy(p, extra)
		return p
	}
	for _, tc := range []struct {
		name       string
		p          agents.Params
		addr, user string
		secret     agents.Params
		systems    string
		plug       string
		err        string
	}{
		{"new names", base(agents.Params{"ip": "h", "username": "u", "password": "p", "systems_uri": "/redfish/v1/Systems/1", "plug": "S"}),
			"h:80", "u", agents.Params{"password": "p"}, "/redfish/v1/Systems/1", "S", ""},
		{"old names", base(agents.Params{"ipaddr": "h", "login": "u", "passwd": "p", "systems-uri": "/redfish/v1/Systems/1", "port": "S"}),
			"h:80", "u", agents.Params{"password": "p"}, "/redfish/v1/Systems/1", "S", ""},
		{"both: the new name", base(agents.Params{"ip": "h", "ipaddr": "i", "username": "u", "login": "v", "password": "p", "passwd": "q",
			"systems_uri": "/redfish/v1/Systems/1", "systems-uri": "/redfish/v1/Systems/2", "plug": "S", "port": "T"}),
			"h:80", "u", agents.Params{"password": "p"}, "/redfish/v1/Systems/1", "S", ""},
		{"both, the new one empty", base(agents.Params{"ip": "h", "username": "", "login": "v", "password": "", "passwd": "q", "systems_uri": "", "systems-uri": "/redfish/v1/Systems/2"}),
			"h:80", "", agents.Params{"password": ""}, "", "", ""},
		{"passwd beside a password script", base(agents.Params{"ip": "h", "username": "u", "passwd": "q", "password_script": "echo x"}),
			"h:80", "u", agents.Params{"password": "q", "password_script": "echo x"}, "", "", ""},
		{"an empty ip beside ipaddr", base(agents.Params{"ip": "", "ipaddr": "i", "username": "u", "password": "p"}), "", "", nil, "", "", "parameter ip: empty"},
		{"redfish-uri", base(agents.Params{"ip": "h", "username": "u", "password": "p", "redfish-uri": "/redfish/v2"}), "", "", nil, "", "",
			`parameter redfish_uri: "/redfish/v2": only /redfish/v1 is supported`},
		{"redfish_uri over redfish-uri", base(agents.Params{"ip": "h", "username": "u", "password": "p", "redfish_uri": "/redfish/v1", "redfish-uri": "/redfish/v2"}),
			"h:80", "u", agents.Params{"password": "p"}, "", "", ""},
		{"unknown", base(agents.Params{"ip": "h", "username": "u", "password": "p", "systems_url": "x"}), "", "", nil, "", "", "parameter systems_url: unknown"},
	} {
		c, err := parseConfig(tc.p, slog.New(slog.DiscardHandler))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case c.addr != tc.addr || c.username != tc.user || !maps.Equal(c.secret, tc.secret) || c.systemsURI != tc.systems || c.plug != tc.plug:
			t.Errorf("%s: addr %q username %q secret %v systems %q plug %q", tc.name, c.addr, c.username, c.secret, c.systemsURI, c.plug)
		}
	}
}
