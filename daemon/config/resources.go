package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// DefaultOCFRoot is where Debian, RHEL and SUSE install OCF resource agents.
const DefaultOCFRoot = "/usr/lib/ocf"

// Resource monitor intervals when monitor_interval is not given: OCF
// agents are checked as often as they advise in their meta-data (their
// monitor action's interval), else every DefaultOCFMonitorInterval; mounts
// and hooks as often as storage.monitor_interval's default.
const (
	DefaultOCFMonitorInterval     = 10 * time.Second
	DefaultStorageMonitorInterval = 2 * time.Second
)

// Resource is one member of the resource group: started in list order on
// the primary after the takeover gate, stopped in reverse order within
// timing.grace on demotion. Exactly one of OCF, Mount, Hooks is set.
type Resource struct {
	Name string `yaml:"name"`
	// OCF names the resource agent to run, as PROVIDER:TYPE (e.g.
	// heartbeat:IPaddr2): the program OCF_ROOT/resource.d/PROVIDER/TYPE.
	OCF string `yaml:"ocf,omitempty"`
	// Mount is a filesystem mount, as storage.mount.
	Mount *Mount `yaml:"mount,omitempty"`
	// Hooks are start/stop/monitor programs, as storage.hooks.
	Hooks *Hooks `yaml:"hooks,omitempty"`
	// Params are the OCF agent's instance parameters, passed as
	// OCF_RESKEY_<name>; checked against the agent's meta-data at load.
	// They are part of the cluster's configuration: every node must give
	// the same.
	Params map[string]string `yaml:"params,omitempty"`
	// NodeParams are instance parameters that may differ from node to
	// node (a NIC's name, a path on this machine), passed as params are;
	// they are left out of the cluster's configuration fingerprint. A name
	// may not be in both.
	NodeParams map[string]string `yaml:"node_params,omitempty"`
	// NodeLocal lists the values of a mount or hooks resource that are
	// this node's own ("mount.device", "hooks.start", …), left out of the
	// cluster's configuration fingerprint as storage.node_local's are (an
	// OCF agent's are its node_params).
	NodeLocal []string `yaml:"node_local,omitempty"`
	// MonitorInterval is how often the resource is checked on the primary;
	// 0 takes the default: the agent's advice in its meta-data, else 10s;
	// 2s for mount and hooks.
	MonitorInterval Duration `yaml:"monitor_interval,omitempty"`
	// Timeouts bound each action; 0 takes the agent's advised timeout
	// (OCF meta-data) or 20s. A stop is always bounded by what is left of
	// timing.grace.
	Timeouts ResourceTimeouts `yaml:"timeouts,omitempty"`
	// ChecksTokens declares that this resource refuses work carrying an
	// epoch below the highest it has seen (FENCED_EPOCH). storage.
	// checks_tokens: true declares it for every mount and hooks resource.
	// Only when every resource of the group checks tokens may a former
	// holder be taken over by lease expiry.
	ChecksTokens bool `yaml:"checks_tokens,omitempty"`
}

// ResourceTimeouts are per-action time limits.
type ResourceTimeouts struct {
	Start   Duration `yaml:"start,omitempty"`
	Stop    Duration `yaml:"stop,omitempty"`
	Monitor Duration `yaml:"monitor,omitempty"`
}

// Kind is "ocf", "mount" or "hooks" (one of ResourceKinds; "" when none or
// several are set).
func (r Resource) Kind() string {
	if k := r.kind(); k != nil {
		return k.name
	}
	return ""
}

// AllParams are Params and NodeParams together: what the agent is given.
func (r Resource) AllParams() map[string]string {
	if len(r.NodeParams) == 0 {
		return r.Params
	}
	out := make(map[string]string, len(r.Params)+len(r.NodeParams))
	for k, v := range r.Params {
		out[k] = v
	}
	for k, v := range r.NodeParams {
		out[k] = v
	}
	return out
}

// Agent splits OCF into provider and type.
func (r Resource) Agent() (provider, typ string) {
	provider, typ, _ = strings.Cut(r.OCF, ":")
	return provider, typ
}

// TokenChecks says how the group checks tokens: storage, some resource
// (the storage) refuses stale writers; unchecked, some resource checks no
// tokens (a floating address, a service that does not read FENCED_EPOCH).
// Lease expiry confirms a former holder stopped only with storage and not
// unchecked (package tenure, Machine.expiry).
func (c *Config) TokenChecks() (storage, unchecked bool) {
	if len(c.Resources) == 0 {
		return c.Storage.ChecksTokens, false
	}
	for _, r := range c.Resources {
		if c.checksTokens(r) {
			storage = true
		} else {
			unchecked = true
		}
	}
	return storage, unchecked
}

// Unchecked lists the resources that check no tokens (their names).
func (c *Config) Unchecked() []string {
	var names []string
	for _, r := range c.Resources {
		if !c.checksTokens(r) {
			names = append(names, r.Name)
		}
	}
	return names
}

// checksTokens reports whether r is declared to check tokens: by its own
// checks_tokens, or by storage.checks_tokens for a kind run through package
// storage (a mount, hooks).
func (c *Config) checksTokens(r Resource) bool {
	if r.ChecksTokens {
		return true
	}
	k := r.kind()
	return c.Storage.ChecksTokens && k != nil && k.storage
}

// StorageSet reports whether the storage shorthand is used (a mount or a
// hook is configured).
func (s Storage) StorageSet() bool {
	return s.Mount != nil || s.Hooks != (Hooks{})
}

// Problem builds a Problem at path (with its line) for checks made outside
// Validate, such as reading an OCF agent's meta-data at load.
func (c *Config) Problem(path, format string, args ...any) Problem {
	return Problem{File: c.file, Line: c.line(path), Path: path, Msg: fmt.Sprintf(format, args...)}
}

var (
	reAgentPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)
	// reEnvName: parameters become environment variables OCF_RESKEY_<name>.
	reEnvName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// resources checks the resources list and ocf_root. The agents' own
// parameter rules (from their meta-data) are checked at load, outside this
// pure function (see the resource package's Check).
func (v *validator) resources() {
	c := v.c
	if c.OCFRoot == "" {
		v.add("ocf_root", "must not be empty (default %s)", DefaultOCFRoot)
	} else if !filepath.IsAbs(c.OCFRoot) {
		v.add("ocf_root", "%q must be an absolute path", c.OCFRoot)
	}
	if len(c.Resources) == 0 {
		return
	}
	if c.Storage.StorageSet() {
		v.add("storage", "storage and resources are both set: storage is the shorthand for a one-resource group; "+
			"move it into resources as `- {name: data, mount: {...}}` and `- {name: app, hooks: {...}}` and remove storage")
	}
	names := map[string]string{}
	for i, r := range c.Resources {
		p := fmt.Sprintf("resources[%d]", i)
		switch {
		case r.Name == "":
			v.add(p+".name", "required")
		case !reName.MatchString(r.Name):
			v.add(p+".name", "%q: use letters, digits, '.', '_' and '-'", r.Name)
		case names[r.Name] != "":
			v.add(p+".name", "duplicate resource name %q (also %s)", r.Name, names[r.Name])
		default:
			names[r.Name] = p
		}
		if k := r.kind(); k == nil {
			v.add(p, "%s", exactlyOneKind())
		} else if k.validate != nil {
			k.validate(v, p, r)
		}
		for _, key := range []string{"params", "node_params"} {
			params := r.Params
			if key == "node_params" {
				params = r.NodeParams
			}
			if len(params) > 0 && !r.takesParams() {
				v.add(p+"."+key, "%s are passed to %s only", key, paramsTakers())
			}
			for _, name := range sortedKeys(params) {
				if !reEnvName.MatchString(name) {
					v.add(p+"."+key+"."+name, "%q is not a valid parameter name (letters, digits, '_'; it becomes OCF_RESKEY_%s)", name, name)
				}
				if strings.ContainsRune(params[name], 0) {
					v.add(p+"."+key+"."+name, "value contains a NUL byte")
				}
				if _, dup := r.Params[name]; dup && key == "node_params" {
					v.add(p+"."+key+"."+name, "%q is also in params: give it in one of them", name)
				}
			}
		}
		v.nodeLocal(p+".node_local", r.NodeLocal, r.Mount != nil, r.Hooks != nil, r.OCF != "")
		if r.MonitorInterval < 0 {
			v.add(p+".monitor_interval", "must not be negative")
		}
		for _, t := range []struct {
			key string
			d   Duration
		}{{"start", r.Timeouts.Start}, {"stop", r.Timeouts.Stop}, {"monitor", r.Timeouts.Monitor}} {
			if t.d < 0 {
				v.add(p+".timeouts."+t.key, "must not be negative")
			}
		}
		if g := c.Timing.Grace; g > 0 && r.Timeouts.Stop > g {
			v.add(p+".timeouts.stop", "%s is longer than timing.grace (%s): the whole group must stop within the grace period, else the node self-fences", r.Timeouts.Stop, g)
		}
	}
}

func (v *validator) mount(p string, m *Mount) {
	if m.Device == "" {
		v.add(p+".device", "required")
	}
	if m.Mountpoint == "" {
		v.add(p+".mountpoint", "required")
	} else if !filepath.IsAbs(m.Mountpoint) {
		v.add(p+".mountpoint", "%q must be an absolute path", m.Mountpoint)
	}
	if m.FSType == "" && !hasOption(m.Options, "bind") {
		v.add(p+".fstype", "required (except for bind mounts)")
	}
}

func (v *validator) hooks(p string, h Hooks) {
	for _, x := range []struct{ key, val string }{{"start", h.Start}, {"stop", h.Stop}, {"monitor", h.Monitor}} {
		if x.val != "" && !filepath.IsAbs(x.val) {
			v.add(p+"."+x.key, "%q must be an absolute path", x.val)
		}
	}
	if (h.Start == "") != (h.Stop == "") {
		v.add(p, "start and stop go together")
	}
	if h == (Hooks{}) {
		v.add(p, "give at least start and stop, or monitor")
	}
}
