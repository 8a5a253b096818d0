package pdu

import (
	"maps"
	"strings"
	"testing"

	"github.com/gosnmp/gosnmp"

	"github.com/fenced/fenced/agents"
)

// fence_apc_snmp's older names (ipaddr, port, login, passwd) are
// accepted. Given with the new name, the new name's value counts, even
// empty, except for passwd, which has always won over password here.
func TestAliases(t *testing.T) {
	v3 := func(extra agents.Params) agents.Params {
		p := agents.Params{"ip": "10.0.0.1", "plug": "1", "snmp_version": "3"}
		maps.Copy(p, extra)
		return p
	}
	for _, tc := range []struct {
		name    string
		p       agents.Params
		host    string
		outlets string
		user    string
		secrets agents.Params
		level   gosnmp.SnmpV3MsgFlags
		err     string
	}{
		{"new names", agents.Params{"ip": "10.0.0.1", "plug": "2"}, "10.0.0.1", "2", "", agents.Params{}, 0, ""},
		{"old names", agents.Params{"ipaddr": "10.0.0.1", "port": "2"}, "10.0.0.1", "2", "", agents.Params{}, 0, ""},
		{"both: the new name", agents.Params{"ip": "10.0.0.1", "ipaddr": "10.0.0.2", "plug": "2", "port": "3"}, "10.0.0.1", "2", "", agents.Params{}, 0, ""},
		{"an empty plug: nodename", agents.Params{"ip": "10.0.0.1", "plug": "", "port": "3", "nodename": "4"}, "10.0.0.1", "4", "", agents.Params{}, 0, ""},
		{"an empty ip beside ipaddr", agents.Params{"ip": "", "ipaddr": "10.0.0.2", "plug": "2"}, "", "", "", nil, 0, `parameter plug: "2" names no PDU and ip is empty`},
		{"v3, old names", v3(agents.Params{"login": "u", "passwd": "p"}), "10.0.0.1", "1", "u", agents.Params{"password": "p"}, gosnmp.AuthNoPriv, ""},
		{"v3, both user names", v3(agents.Params{"username": "u", "login": "v"}), "10.0.0.1", "1", "u", agents.Params{}, gosnmp.NoAuthNoPriv, ""},
		{"v3, an empty username beside login", v3(agents.Params{"username": "", "login": "v"}), "", "", "", nil, 0, "parameter username: required with snmp_version 3"},
		{"v3, passwd over password", v3(agents.Params{"username": "u", "password": "a", "passwd": "b"}), "10.0.0.1", "1", "u", agents.Params{"password": "b"}, gosnmp.AuthNoPriv, ""},
		{"v3, passwd beside a password file", v3(agents.Params{"username": "u", "passwd": "b", "password_script": "echo a"}), "10.0.0.1", "1", "u",
			agents.Params{"password": "b", "password_script": "echo a"}, gosnmp.AuthNoPriv, ""},
		{"unknown", agents.Params{"ip": "10.0.0.1", "plug": "1", "passwd_file": "/f"}, "", "", "", nil, 0, "parameter passwd_file: unknown"},
	} {
		c, err := parseConfig(tc.p)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case len(c.pdus) != 1 || c.pdus[0].host != tc.host || strings.Join(c.pdus[0].outlets, ",") != tc.outlets:
			t.Errorf("%s: pdus %v, want %s outlets %s", tc.name, c.pdus, tc.host, tc.outlets)
		case c.username != tc.user || !maps.Equal(c.secretSources, tc.secrets) || c.secLevel != tc.level:
			t.Errorf("%s: username %q secrets %v level %v; want %q %v %v", tc.name, c.username, c.secretSources, c.secLevel, tc.user, tc.secrets, tc.level)
		}
	}
}
