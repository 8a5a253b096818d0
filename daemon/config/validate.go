package config

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/tenure"
)

var reName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$`)

// Bounds of the counts and intervals outside the lease rules (those are
// tenure's: see tenure.Timing.Check).
const (
	MaxRetries         = 10
	MaxHistory         = 10000
	MinMonitorInterval = 100 * time.Millisecond
	MaxMonitorInterval = time.Hour
	MaxWatchdogTimeout = 10 * time.Minute
)

// Validate checks c and returns every problem found, or nil. It is pure:
// it reads no files and opens no sockets. reg resolves device agents and
// their declared parameters; nil skips those checks.
func (c *Config) Validate(reg *agents.Registry) Problems {
	return c.validate(reg, false)
}

// ValidateOffline checks c as Validate does but runs nothing: agents whose
// parameters only their program knows (exec: its metadata) are checked for
// their own parameters alone. It is what `fenced validate --offline` runs,
// on a workstation or in CI, where the agents are not installed.
func (c *Config) ValidateOffline(reg *agents.Registry) Problems {
	return c.validate(reg, true)
}

func (c *Config) validate(reg *agents.Registry, offline bool) Problems {
	v := &validator{c: c, offline: offline}
	if c.Version != 1 {
		if c.Version == 0 {
			v.add("version", "required: must be 1")
		} else {
			v.add("version", "unsupported version %d (this fenced reads version 1)", c.Version)
		}
	}
	if c.Cluster.Name == "" {
		v.add("cluster.name", "required")
	} else if !reName.MatchString(c.Cluster.Name) {
		v.add("cluster.name", "%q: use letters, digits, '.', '_' and '-'", c.Cluster.Name)
	}
	v.nodes(reg)
	v.timing()
	if c.DataDir == "" {
		v.add("data_dir", "required")
	} else if !filepath.IsAbs(c.DataDir) {
		v.add("data_dir", "%q must be an absolute path", c.DataDir)
	}
	if c.API.Socket == "" {
		v.add("api.socket", "required")
	} else if !filepath.IsAbs(c.API.Socket) {
		v.add("api.socket", "%q must be an absolute path", c.API.Socket)
	}
	switch g := c.Gossip; {
	case g.KeyFile != "" && !filepath.IsAbs(g.KeyFile):
		v.add("gossip.key_file", "%q must be an absolute path", g.KeyFile)
	case g.KeyFile == "" && !g.Plaintext:
		// Anyone who can send gossip could forge a node's release and
		// spare it the fence: authenticate gossip unless told otherwise.
		v.add("gossip.key_file", "required: gossip carries releases and admin requests; create one (fenced keygen --out /etc/fenced/gossip.key, copied to every node) or set gossip.plaintext: true on a trusted lab network")
	}
	v.devices(reg)
	v.storage()
	v.resources()
	if c.Watchdog.Device != "" && !filepath.IsAbs(c.Watchdog.Device) {
		v.add("watchdog.device", "%q must be an absolute path", c.Watchdog.Device)
	}
	if w := c.Watchdog.Timeout.D(); w != 0 {
		switch {
		case c.Watchdog.Device == "":
			v.add("watchdog.timeout", "set without watchdog.device")
		case w <= c.Timing.Grace.D() || w > MaxWatchdogTimeout:
			v.add("watchdog.timeout", "%s: want more than timing.grace (%s), up to %s: the watchdog must not reset a node whose demotion finishes in time", w, c.Timing.Grace, MaxWatchdogTimeout)
		}
	}
	if c.Metrics.Listen != "" {
		v.metricsListen()
	}
	v.alerts()
	if c.History.Limit < 1 || c.History.Limit > MaxHistory {
		v.add("history.limit", "%d: want 1 to %d (every node keeps the history in memory and in every snapshot)", c.History.Limit, MaxHistory)
	}
	if len(v.ps) == 0 {
		return nil
	}
	return v.ps.sorted()
}

type validator struct {
	c       *Config
	ps      Problems
	offline bool // run no agent program (ValidateOffline)
}

// metricsListen checks metrics.listen, which must not take a node's gossip
// or raft port (memberlist binds TCP and UDP on the gossip port).
func (v *validator) metricsListen() {
	host, port, err := splitHostPort(v.c.Metrics.Listen)
	if err != nil {
		v.add("metrics.listen", "%v", err)
		return
	}
	ml := net.JoinHostPort(host, strconv.Itoa(port))
	for i, n := range v.c.Nodes {
		for _, a := range []struct{ key, val string }{{"gossip", n.Gossip}, {"raft", n.Raft}} {
			h, p, err := splitHostPort(a.val)
			if err == nil && net.JoinHostPort(h, strconv.Itoa(p)) == ml {
				v.add("metrics.listen", "%s is nodes[%d].%s (%s's %s address): give the metrics endpoint a port of its own", v.c.Metrics.Listen, i, a.key, n.Name, a.key)
			}
		}
	}
}

// addOnce adds a problem unless the same one is already listed (a device
// that fences several nodes is checked once per target).
func (v *validator) addOnce(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	for _, p := range v.ps {
		if p.Path == path && p.Msg == msg {
			return
		}
	}
	v.add(path, "%s", msg)
}

func (v *validator) add(path, format string, args ...any) {
	if v.c.undecoded[path] {
		return
	}
	v.ps = append(v.ps, Problem{File: v.c.file, Line: v.c.line(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) nodes(reg *agents.Registry) {
	c := v.c
	switch n := len(c.Nodes); {
	case n == 0:
		v.add("nodes", "required: list the cluster's nodes")
	case n%2 == 0 && !c.Cluster.AllowEvenNodes:
		v.add("nodes", "%d voting nodes: an even count tolerates no more failures than %d and can split evenly; use an odd count or set cluster.allow_even_nodes: true", n, n-1)
	}
	names := map[string]string{}
	addrs := map[string]string{}
	data := 0
	defer func() {
		if len(c.Nodes) > 0 && data == 0 {
			v.add("nodes", "every node is a witness: at least one data node must be able to hold the storage")
		}
	}()
	for i, n := range c.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		switch n.Role {
		case "", RoleData:
			data++
		case RoleWitness:
			if len(n.Fence) > 0 {
				v.add(p+".fence", "a witness holds nothing and is never fenced: remove its fence topology")
			}
		default:
			v.add(p+".role", "%q: want data (the default) or witness", n.Role)
		}
		switch {
		case n.Name == "":
			v.add(p+".name", "required")
		case !reName.MatchString(n.Name):
			v.add(p+".name", "%q: use letters, digits, '.', '_' and '-'", n.Name)
		case names[n.Name] != "":
			v.add(p+".name", "duplicate node name %q (also %s)", n.Name, names[n.Name])
		default:
			names[n.Name] = p
		}
		for _, a := range []struct{ key, val string }{{"gossip", n.Gossip}, {"raft", n.Raft}} {
			ap := p + "." + a.key
			if a.val == "" {
				v.add(ap, "required: host:port")
				continue
			}
			host, port, err := splitHostPort(a.val)
			if err != nil {
				v.add(ap, "%v", err)
				continue
			}
			key := net.JoinHostPort(host, strconv.Itoa(port))
			if other := addrs[key]; other != "" {
				v.add(ap, "address %s already used by %s", a.val, other)
				continue
			}
			addrs[key] = ap
		}
		for li, l := range n.Fence {
			lp := fmt.Sprintf("%s.fence[%d].devices", p, li)
			if l.Watchdog {
				switch {
				case len(l.Devices) > 0:
					v.add(lp, "a watchdog level has no devices: put them in a level of their own before it")
				case li != len(n.Fence)-1:
					v.add(fmt.Sprintf("%s.fence[%d].watchdog", p, li), "the watchdog level must be the last: nothing is tried after it")
				}
				continue
			}
			if len(l.Devices) == 0 {
				v.add(lp, "a level needs at least one device (or watchdog: true)")
			}
			for di, d := range l.Devices {
				dp := fmt.Sprintf("%s[%d]", lp, di)
				dev, ok := c.Devices[d.Device]
				switch {
				case d.Device == "":
					v.add(dp+".device", "required")
				case !ok:
					v.add(dp+".device", "unknown device %q (defined: %s)", d.Device, strings.Join(sortedKeys(c.Devices), ", "))
				default:
					v.params(dp, d.Device, dev.Agent, merge(dev.Params, d), reg)
				}
			}
		}
	}
}

func (v *validator) timing() {
	// The lease rules and their bounds belong to the tenure (they are what
	// its safety rests on); this reports them under their keys.
	for _, p := range v.c.Timing.Tenure().Check() {
		v.add("timing."+p.Field, "%s", p.Msg)
	}
}

func (v *validator) devices(reg *agents.Registry) {
	for _, name := range sortedKeys(v.c.Devices) {
		d := v.c.Devices[name]
		p := "devices." + name
		if !reName.MatchString(name) {
			v.add(p, "device name %q: use letters, digits, '.', '_' and '-'", name)
		}
		if d.Agent == "" {
			v.add(p+".agent", "required")
		} else if reg != nil {
			if _, ok := reg.Lookup(d.Agent); !ok {
				v.add(p+".agent", "unknown agent %q (known: %s)", d.Agent, strings.Join(reg.Names(), ", "))
			}
		}
		if t := d.Timeout.D(); t != 0 && (t < tenure.MinFenceTimeout || t > tenure.MaxFenceTimeout) {
			v.add(p+".timeout", "%s: want 0 (timing.fence_timeout) or %s to %s", t, tenure.MinFenceTimeout, tenure.MaxFenceTimeout)
		}
		if d.Retries < 0 || d.Retries > MaxRetries {
			v.add(p+".retries", "%d: want 0 to %d (a device that failed %d times in a row will not answer the next try: the next level should get the time)", d.Retries, MaxRetries, MaxRetries+1)
		}
		v.deviceWatch(p, d)
	}
}

// params checks a device's parameters for one target (the reference at
// ref) against the agent's declaration. Required parameters may come from
// the device or the target. Each problem is placed where the parameter is
// set, or would be: see ParamPath.
func (v *validator) params(ref, device, agent string, p agents.Params, reg *agents.Registry) {
	if reg == nil {
		return
	}
	k, ok := reg.Lookup(agent)
	if !ok {
		return
	}
	if k.OpenParams {
		if v.offline {
			// Offline, only the agent's own parameters can be judged:
			// the required ones must be there.
			for _, d := range k.Params {
				if _, ok := p.Get(d.Name, d.Aliases...); d.Required && !ok {
					v.addOnce(v.c.ParamPath(ref, device, d.Name), "parameter %s: required", d.Name)
				}
			}
			return
		}
		// Only the agent knows its full parameter set (exec reads the
		// program's metadata): its constructor is the check.
		if _, err := k.New(p, nil); err != nil {
			v.addOnce(v.c.ParamPath(ref, device, ParamNamed(err)), "%v", err)
		}
		return
	}
	if k.Params == nil {
		return
	}
	for _, err := range agents.Check(p, k.Params) {
		name := ParamNamed(err)
		at := v.c.ParamPath(ref, device, name)
		msg := err.Error()
		if strings.HasSuffix(at, "."+name) {
			// The path names the parameter already.
			msg = strings.TrimPrefix(msg, "parameter "+name+": ")
			if msg == "unknown" {
				msg = fmt.Sprintf("agent %s takes no parameter %q (its parameters: fenced agent %s -o metadata)", agent, name, agent)
			}
		}
		v.addOnce(at, "%s", msg)
	}
}

// reParam finds the parameter an agent's error names ("parameter cipher:
// ...").
var reParam = regexp.MustCompile(`\bparameter ([A-Za-z0-9_]+)`)

// ParamNamed is the parameter an agent's error is about, "" when it names
// none.
func ParamNamed(err error) string {
	if m := reParam.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}

// ParamPath is where a problem with parameter name of device, for the
// target at ref ("nodes[1].fence[0].devices[0]"), belongs: the line that
// sets it — the reference's own params (or plug) first, as they override
// the device's, then the device's params. One that is set nowhere belongs
// to the device, unless some reference to the device sets it (a
// parameter given per target, such as plug): then to this reference, which
// lacks it.
func (c *Config) ParamPath(ref, device, name string) string {
	dev := "devices." + device
	if name == "" {
		return dev
	}
	for _, at := range []string{ref + ".params." + name, ref + "." + name, dev + ".params." + name} {
		if _, ok := c.lines[at]; ok {
			return at
		}
	}
	for _, n := range c.Nodes {
		for _, l := range n.Fence {
			for _, d := range l.Devices {
				if _, set := d.Params[name]; d.Device == device && (set || name == "plug" && d.Plug != "") {
					return ref
				}
			}
		}
	}
	if _, ok := c.lines[dev+".params"]; ok {
		return dev + ".params"
	}
	return dev
}

func (v *validator) storage() {
	s := v.c.Storage
	if m := s.Mount; m != nil {
		if m.Device == "" {
			v.add("storage.mount.device", "required")
		}
		if m.Mountpoint == "" {
			v.add("storage.mount.mountpoint", "required")
		} else if !filepath.IsAbs(m.Mountpoint) {
			v.add("storage.mount.mountpoint", "%q must be an absolute path", m.Mountpoint)
		}
		if m.FSType == "" && !hasOption(m.Options, "bind") {
			v.add("storage.mount.fstype", "required (except for bind mounts)")
		}
	}
	for _, h := range []struct{ key, val string }{{"start", s.Hooks.Start}, {"stop", s.Hooks.Stop}, {"monitor", s.Hooks.Monitor}} {
		if h.val != "" && !filepath.IsAbs(h.val) {
			v.add("storage.hooks."+h.key, "%q must be an absolute path", h.val)
		}
	}
	if (s.Hooks.Start == "") != (s.Hooks.Stop == "") {
		v.add("storage.hooks", "start and stop go together")
	}
	if mi := s.MonitorInterval.D(); mi < MinMonitorInterval || mi > MaxMonitorInterval {
		v.add("storage.monitor_interval", "%s: want %s to %s", mi, MinMonitorInterval, MaxMonitorInterval)
	}
	v.nodeLocal("storage.node_local", s.NodeLocal, s.Mount != nil, s.Hooks != (Hooks{}), false)
}

// Warnings are things that are valid but that an admin should know before
// they bite: each is reported by `fenced validate` and logged at start.
// (daemon.Warnings adds those that need the agents: which devices cut only
// the storage.)
func (c *Config) Warnings() Problems {
	var ws Problems
	holds := c.Storage.StorageSet() || len(c.Resources) > 0
	tokens, unchecked := c.TokenChecks()
	if holds && (!tokens || unchecked) {
		why := "storage.checks_tokens is false"
		if tokens {
			why = "resources " + strings.Join(c.Unchecked(), ", ") + " check no tokens (resources[].checks_tokens)"
		}
		for i, n := range c.Nodes {
			if n.Witness() || len(n.Fence) > 0 {
				continue
			}
			p := fmt.Sprintf("nodes[%d]", i)
			ws = append(ws, Problem{File: c.file, Line: c.line(p), Path: p,
				Msg: fmt.Sprintf("warning: %s may hold the storage but has no fence topology, and %s: a takeover from it blocks until `fencectl confirm`", n.Name, why)})
		}
	}
	self, _ := c.NodeByName(c.Node)
	if holds && c.Watchdog.Device == "" && !self.Witness() {
		// (A witness holds nothing: it never self-fences.)
		ws = append(ws, Problem{File: c.file, Line: c.line("watchdog"), Path: "watchdog.device",
			Msg: "warning: not set: a stop that fails resets this node through sysrq alone; where the kernel refuses that, the node cannot reset itself " +
				"and stays listed as possibly running the group until a fence that removes its power, or `fencectl confirm`"})
	}
	return ws
}

// Params returns the agent parameters for target ref on its device.
func (c *Config) Params(ref DeviceRef) agents.Params {
	return merge(c.Devices[ref.Device].Params, ref)
}

func merge(dev map[string]string, ref DeviceRef) agents.Params {
	p := agents.Params{}
	for k, v := range dev {
		p[k] = v
	}
	for k, v := range ref.Params {
		p[k] = v
	}
	if ref.Plug != "" {
		p["plug"] = ref.Plug
	}
	return p
}

func splitHostPort(s string) (string, int, error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port", s)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be 1-65535", s)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		return "", 0, fmt.Errorf("%q: give the node's own address, not a wildcard", s)
	}
	return host, port, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// SelectNode picks this node: name if given, else the hostname. It returns a
// Problem naming the configured nodes when the name is not one of them.
func (c *Config) SelectNode(name, hostname string) (*Node, error) {
	from := "--node"
	if name == "" {
		name, from = c.Node, "node"
	}
	if name == "" {
		name, from = hostname, "hostname"
	}
	if n, ok := c.NodeByName(name); ok {
		c.Node = name
		return n, nil
	}
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	return nil, Problems{{File: c.file, Line: c.line("node"), Path: "node", Msg: fmt.Sprintf("unknown node name %q (from %s; configured: %s)", name, from, strings.Join(names, ", "))}}
}

func hasOption(opts, name string) bool {
	for _, o := range strings.Split(opts, ",") {
		if strings.TrimSpace(o) == name {
			return true
		}
	}
	return false
}
