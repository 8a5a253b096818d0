package san

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/fenced/fenced/agents"
)

// The older names (ipaddr, login, passwd, vendor, port) are accepted. For
// ip, username and fabric the first of the names given a value counts (an
// empty ip leaves ipaddr to count); for the plug and the password the new
// name does, even empty.
func TestAliases(t *testing.T) {
	base := func(extra agents.Params) agents.Params {
		p := agents.Params{"ssl": "0"}
		maps.Copy(p, extra)
		return p
	}
	for _, tc := range []struct {
		name     string
		p        agents.Params
		host     string
		user     string
		password string
		plug     string
		err      string
	}{
		{"new names", base(agents.Params{"ip": "h", "username": "u", "password": "p", "plug": host1a}), "h", "u", "p", host1a, ""},
		{"old names", base(agents.Params{"ipaddr": "h", "login": "u", "passwd": "p", "port": host1a}), "h", "u", "p", host1a, ""},
		{"both: the new name", base(agents.Params{"ip": "h", "ipaddr": "i", "username": "u", "login": "v", "password": "p", "passwd": "q", "plug": host1a, "port": host1b}),
			"h", "u", "p", host1a, ""},
		{"both, the new one empty", base(agents.Params{"ip": "", "ipaddr": "i", "username": "", "login": "v", "password": "", "passwd": "q", "plug": host1a}),
			"i", "v", "", host1a, ""},
		{"ip and ipaddr both empty", base(agents.Params{"ip": "", "ipaddr": "", "username": "u", "password": "p", "plug": host1a}), "", "", "", "", "parameter ip: empty"},
		{"an empty plug beside port", base(agents.Params{"ip": "h", "username": "u", "password": "p", "plug": "", "port": host1a}), "", "", "", "", "parameter plug: required"},
		{"vendor", base(agents.Params{"ip": "h", "username": "u", "password": "p", "plug": host1a, "vendor": "cisco"}), "", "", "", "", "parameter fabric: cisco"},
		{"an empty fabric beside vendor", base(agents.Params{"ip": "h", "username": "u", "password": "p", "plug": host1a, "fabric": "", "vendor": "cisco"}), "", "", "", "", "parameter fabric: cisco"},
		{"fabric over vendor", base(agents.Params{"ip": "h", "username": "u", "password": "p", "plug": host1a, "fabric": "brocade", "vendor": "cisco"}), "h", "u", "p", host1a, ""},
		{"unknown", base(agents.Params{"ip": "h", "username": "u", "password": "p", "plug": host1a, "fabrik": "brocade"}), "", "", "", "", "parameter fabrik: unknown"},
	} {
		a, err := New(tc.p, nil)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		pw, err := a.params.Secret(context.Background(), "password")
		if a.cfg.host != tc.host || a.cfg.user != tc.user || err != nil || pw != tc.password || a.cfg.target.plug != tc.plug {
			t.Errorf("%s: host %q user %q password %q (%v) plug %q", tc.name, a.cfg.host, a.cfg.user, pw, err, a.cfg.target.plug)
		}
	}
}
