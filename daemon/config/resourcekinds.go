package config

import (
	"strings"
)

// resourceKind is the configuration's side of one kind of resource: the
// key of Resource that gives it and what the configuration decides by
// kind. Adding a kind is a field of Resource, one entry in resourceKinds,
// and the kind's registration in package resource under the same name
// (how it is built, checked and run; its registry's test checks it knows
// every kind listed here). Nothing else should switch on a kind: ask the
// resource's kind (Kind, Executables, the validator, TokenChecks).
//
// The table lives here, not in package resource, because package resource
// imports this one (as does package storage, which runs mounts and hooks):
// validation, the fingerprint and the token rule need the kinds without
// linking the code that runs them.
type resourceKind struct {
	// name is the kind ("ocf") and the key of Resource that gives it.
	name string
	// describe is how "give exactly one of" names it; empty: the name.
	describe string
	// given reports whether r sets the kind's key.
	given func(r Resource) bool
	// validate checks the kind's own settings of r, at p ("resources[2]");
	// nil: it has none.
	validate func(v *validator, p string, r Resource)
	// paramsTo names what params and node_params are passed to ("OCF
	// agents"); empty: the kind takes none.
	paramsTo string
	// storage: the kind runs through package storage (as the storage
	// shorthand does), so storage.checks_tokens declares that it checks
	// tokens.
	storage bool
	// cluster adds the kind's own settings of r to the cluster-wide values
	// under p ("resources.NAME"); nil: it has none.
	cluster func(p string, r Resource, set func(k, v string))
	// executables lists the programs r runs, each at its path under p
	// ("resources[2]"); nil: it runs none of its own.
	executables func(p string, r Resource) []Executable
}

// resourceKinds are the kinds of resource, in the order messages list them.
var resourceKinds = []resourceKind{
	{
		name:     "ocf",
		describe: "ocf (an OCF agent PROVIDER:TYPE)",
		given:    func(r Resource) bool { return r.OCF != "" },
		validate: func(v *validator, p string, r Resource) {
			prov, typ, ok := strings.Cut(r.OCF, ":")
			if !ok || !reAgentPart.MatchString(prov) || !reAgentPart.MatchString(typ) {
				v.add(p+".ocf", "%q: want PROVIDER:TYPE, e.g. heartbeat:IPaddr2", r.OCF)
			}
		},
		paramsTo: "OCF agents",
		cluster:  func(p string, r Resource, set func(k, v string)) { set(p+".ocf", r.OCF) },
	},
	{
		name:     "mount",
		given:    func(r Resource) bool { return r.Mount != nil },
		validate: func(v *validator, p string, r Resource) { v.mount(p+".mount", r.Mount) },
		storage:  true,
		cluster:  func(p string, r Resource, set func(k, v string)) { mount(p+".mount", r.Mount, set) },
	},
	{
		name:     "hooks",
		given:    func(r Resource) bool { return r.Hooks != nil },
		validate: func(v *validator, p string, r Resource) { v.hooks(p+".hooks", *r.Hooks) },
		storage:  true,
		cluster:  func(p string, r Resource, set func(k, v string)) { hooks(p+".hooks", *r.Hooks, set) },
		executables: func(p string, r Resource) []Executable {
			return r.Hooks.Executables(p + ".hooks")
		},
	},
}

// ResourceKinds lists the kinds of resource the configuration accepts
// (what Resource.Kind returns), in the order messages list them.
func ResourceKinds() []string {
	names := make([]string, len(resourceKinds))
	for i, k := range resourceKinds {
		names[i] = k.name
	}
	return names
}

// kind is r's kind, nil when it sets no kind's key or several.
func (r Resource) kind() *resourceKind {
	ks := r.givenKinds()
	if len(ks) != 1 {
		return nil
	}
	return ks[0]
}

// givenKinds are the kinds whose key r sets (several in a resource that
// fails validation), in resourceKinds' order.
func (r Resource) givenKinds() []*resourceKind {
	var out []*resourceKind
	for i := range resourceKinds {
		if resourceKinds[i].given(r) {
			out = append(out, &resourceKinds[i])
		}
	}
	return out
}

// exactlyOneKind is the problem of a resource that gives no kind or
// several: "give exactly one of ocf (an OCF agent PROVIDER:TYPE), mount or
// hooks".
func exactlyOneKind() string {
	names := make([]string, len(resourceKinds))
	for i, k := range resourceKinds {
		names[i] = k.name
		if k.describe != "" {
			names[i] = k.describe
		}
	}
	list := names[len(names)-1]
	if len(names) > 1 {
		list = strings.Join(names[:len(names)-1], ", ") + " or " + list
	}
	return "give exactly one of " + list
}

// takesParams reports whether a kind r gives passes params to its agent.
func (r Resource) takesParams() bool {
	for _, k := range r.givenKinds() {
		if k.paramsTo != "" {
			return true
		}
	}
	return false
}

// paramsTakers names what params are passed to: "OCF agents".
func paramsTakers() string {
	var to []string
	for _, k := range resourceKinds {
		if k.paramsTo != "" {
			to = append(to, k.paramsTo)
		}
	}
	return strings.Join(to, " and ")
}

// Executable is a program a resource runs, for the check on the node that
// it is an executable file.
type Executable struct {
	Path string // where the configuration gives it: "resources[1].hooks.start"
	File string // the program's path; "" when not given
}

// Executables lists the programs r runs (a hooks resource's start, stop and
// monitor), each at its path under p ("resources[1]").
func (r Resource) Executables(p string) []Executable {
	var out []Executable
	for _, k := range r.givenKinds() {
		if k.executables != nil {
			out = append(out, k.executables(p, r)...)
		}
	}
	return out
}

// Executables lists the hooks' programs, each at its path under p
// ("storage.hooks").
func (h Hooks) Executables(p string) []Executable {
	return []Executable{{p + ".start", h.Start}, {p + ".stop", h.Stop}, {p + ".monitor", h.Monitor}}
}
