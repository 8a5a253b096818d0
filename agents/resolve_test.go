package agents

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	decl := []Param{
		{Name: "ip", Required: true, Aliases: []string{"ipaddr"}},
		{Name: "username", Aliases: []string{"login", "user"}},
		{Name: "password", Secret: true, Aliases: []string{"passwd"}},
		{Name: "fabric", Aliases: []string{"vendor"}, Precedence: FirstNonEmpty},
		{Name: "key", Aliases: []string{"old_key", "older_key"}, Precedence: LastGiven},
		{Name: "lanplus"},
	}
	for _, tc := range []struct {
		name string
		p    Params
		want Params
		errs []string
	}{
		{"canonical names", Params{"ip": "h", "username": "u"}, Params{"ip": "h", "username": "u"}, nil},
		{"an alias moves to the name", Params{"ipaddr": "h", "login": "u"}, Params{"ip": "h", "username": "u"}, nil},
		{"a later alias", Params{"ip": "h", "user": "u"}, Params{"ip": "h", "username": "u"}, nil},

		// Conflicts: a parameter given under two of its names.
		{"first given: the name wins", Params{"ip": "h", "ipaddr": "i"}, Params{"ip": "h"}, nil},
		{"first given: even empty", Params{"ip": "", "ipaddr": "i"}, Params{"ip": ""}, nil},
		{"first given: aliases in order", Params{"ip": "h", "user": "b", "login": "a"}, Params{"ip": "h", "username": "a"}, nil},
		{"first non-empty: the name", Params{"ip": "h", "fabric": "f", "vendor": "v"}, Params{"ip": "h", "fabric": "f"}, nil},
		{"first non-empty: an empty name leaves the alias", Params{"ip": "h", "fabric": "", "vendor": "v"}, Params{"ip": "h", "fabric": "v"}, nil},
		{"first non-empty: all empty", Params{"ip": "h", "fabric": "", "vendor": ""}, Params{"ip": "h", "fabric": ""}, nil},
		{"last given: the last alias", Params{"ip": "h", "key": "a", "old_key": "b", "older_key": "c"}, Params{"ip": "h", "key": "c"}, nil},
		{"last given: an alias over the name", Params{"ip": "h", "key": "a", "old_key": ""}, Params{"ip": "h", "key": ""}, nil},
		{"last given: the name alone", Params{"ip": "h", "key": "a"}, Params{"ip": "h", "key": "a"}, nil},

		// A secret's file and script forms keep their names.
		{"secret forms", Params{"ip": "h", "password_file": "/f", "passwd": "p"}, Params{"ip": "h", "password": "p", "password_file": "/f"}, nil},

		// The target: plug, else port, for an agent that does not declare plug.
		{"port is the plug", Params{"ip": "h", "port": "1"}, Params{"ip": "h", "plug": "1"}, nil},
		{"plug over port", Params{"ip": "h", "plug": "1", "port": "2"}, Params{"ip": "h", "plug": "1"}, nil},
		{"action and nodename are kept", Params{"ip": "h", "action": "off", "nodename": "n1"}, Params{"ip": "h", "action": "off", "nodename": "n1"}, nil},

		// Check's errors, reported by name; unknown names are kept.
		{"required, given as an alias", Params{"ipaddr": "h"}, Params{"ip": "h"}, nil},
		{"required, missing", Params{"username": "u"}, Params{"username": "u"}, []string{"parameter ip: required"}},
		{"unknown", Params{"ip": "h", "ipadr": "x", "passwd_file": "/f"}, Params{"ip": "h", "ipadr": "x", "passwd_file": "/f"},
			[]string{"parameter ipadr: unknown", "parameter passwd_file: unknown"}},
	} {
		given := maps.Clone(tc.p)
		got, errs := Resolve(tc.p, decl)
		if !maps.Equal(got, tc.want) {
			t.Errorf("%s: Resolve(%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
		var msgs []string
		for _, err := range errs {
			msgs = append(msgs, err.Error())
		}
		if !slices.Equal(msgs, tc.errs) {
			t.Errorf("%s: errors %q, want %q", tc.name, msgs, tc.errs)
		}
		if !maps.Equal(tc.p, given) {
			t.Errorf("%s: Resolve changed its argument to %v", tc.name, tc.p)
		}
	}
}

// An agent that declares plug resolves it by its own entry; one that
// declares port as a parameter of its own keeps it.
func TestResolveDeclaredPlug(t *testing.T) {
	decl := []Param{{Name: "plug", Aliases: []string{"port"}, Precedence: LastGiven}}
	got, errs := Resolve(Params{"plug": "1", "port": "2"}, decl)
	if len(errs) != 0 || !maps.Equal(got, Params{"plug": "2"}) {
		t.Fatalf("%v %v", got, errs)
	}
	got, errs = Resolve(Params{"port": "2"}, []Param{{Name: "port"}})
	if len(errs) != 0 || !maps.Equal(got, Params{"port": "2"}) {
		t.Fatalf("port declared: %v %v", got, errs)
	}
}

// A required secret is present under its alias and in its file or script
// form; missing, it is named as declared.
func TestResolveRequiredSecret(t *testing.T) {
	decl := []Param{{Name: "password", Required: true, Secret: true, Aliases: []string{"passwd"}}}
	for _, p := range []Params{{"password": "x"}, {"passwd": "x"}, {"password_file": "/f"}, {"password_script": "echo x"}} {
		if _, errs := Resolve(p, decl); len(errs) != 0 {
			t.Errorf("%v: %v", p, errs)
		}
	}
	if _, errs := Resolve(Params{}, decl); len(errs) != 1 || !strings.Contains(errs[0].Error(), "parameter password: required") {
		t.Errorf("no password: %v", errs)
	}
}
