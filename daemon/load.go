package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/resource"
	"github.com/fenced/fenced/quorum"
)

// LoadConfig reads, validates and resolves the configuration for node
// (empty: the config's `node`, else hostname), which must be one of the
// configured nodes. Every problem is reported at once as config.Problems.
// Agents are built once per target so parameter errors they detect (e.g. a
// plugin's metadata) count as config problems.
//
// A witness holds nothing and fences nobody: on a witness the agents are not
// built, their secrets' files not read and the resources' agents and
// programs not looked for, so it needs neither the device secrets nor the
// storage's programs on its disk.
func LoadConfig(path, node, hostname string, reg *agents.Registry) (*config.Config, error) {
	return checkConfig(path, reg, selection{node: node, hostname: hostname, strict: true})
}

// CheckConfig is what `fenced validate` runs: LoadConfig's checks for the
// node this machine would run as — node (--node), else the file's `node`,
// each of which must be a configured node, else the hostname. When none of
// them names a configured node (a workstation, or a machine whose hostname
// is not its node's name), the file is checked as a data node would check
// it, every file and agent included, and the returned configuration's Node
// is "": `fenced run` there needs --node.
func CheckConfig(path, node, hostname string, reg *agents.Registry) (*config.Config, error) {
	return checkConfig(path, reg, selection{node: node, hostname: hostname})
}

// CheckConfigOffline checks only the file's syntax and rules: it reads no
// other file, runs no agent and reads no OCF meta-data (`fenced validate
// --offline`, for a workstation or CI where none of them are installed).
func CheckConfigOffline(path string, reg *agents.Registry) (*config.Config, error) {
	cfg, err := config.Load(path)
	var ps config.Problems
	if err != nil && !errors.As(err, &ps) {
		return nil, err
	}
	if cfg == nil {
		return nil, err
	}
	if ps = append(ps, cfg.ValidateOffline(reg)...); len(ps) > 0 {
		return nil, ps
	}
	return cfg, nil
}

// selection says which node a configuration is checked for.
type selection struct {
	node, hostname string
	// strict: the node must be found (fenced run). Otherwise only a name
	// given by --node or the file must be; a hostname that names no node
	// leaves none selected.
	strict bool
}

// checkConfig reads and validates the file for the node sel picks: a
// witness skips the checks of what only data nodes use.
func checkConfig(path string, reg *agents.Registry, sel selection) (*config.Config, error) {
	cfg, err := config.Load(path)
	var ps config.Problems
	if err != nil && !errors.As(err, &ps) {
		return nil, err
	}
	if cfg == nil {
		return nil, err
	}
	ps = append(ps, cfg.Validate(reg)...)
	var self *config.Node
	if len(ps) == 0 || cfg.Node != "" || sel.node != "" {
		// An unknown name is reported beside the file's other problems;
		// it needs only the node list.
		hostname := sel.hostname
		if !sel.strict && sel.node == "" && cfg.Node == "" {
			if _, ok := cfg.NodeByName(hostname); !ok {
				hostname = "" // not a node: check as for any data node
			}
		}
		if sel.strict || sel.node != "" || cfg.Node != "" || hostname != "" {
			n, err := cfg.SelectNode(sel.node, hostname)
			var nps config.Problems
			switch {
			case errors.As(err, &nps):
				ps = append(ps, nps...)
			case err != nil:
				return nil, err
			default:
				self = n
			}
		}
	}
	if len(ps) == 0 {
		witness := self != nil && self.Witness()
		files := checkFiles(cfg, witness)
		ps = append(ps, files...)
		ps = append(ps, checkPlaces(cfg, self)...)
		if !witness {
			ps = append(ps, checkAgents(cfg, reg, files)...)
			ps = append(ps, resource.Check(context.Background(), cfg)...)
		}
	}
	if len(ps) > 0 {
		slices.SortStableFunc(ps, func(a, b config.Problem) int { return a.Line - b.Line })
		return nil, ps
	}
	return cfg, nil
}

// checkPlaces reports what fenced run would find wrong with this machine's
// side of the configuration, each at its line: data_dir (a directory, or
// absent: run creates it), api.socket (absent or a socket), api.group (a
// group here) and, for the node self (nil: none selected), its own gossip
// and raft addresses (addresses of this machine).
func checkPlaces(cfg *config.Config, self *config.Node) config.Problems {
	var ps config.Problems
	add := func(path, format string, args ...any) { ps = append(ps, cfg.Problem(path, format, args...)) }
	switch fi, err := os.Stat(cfg.DataDir); {
	case errors.Is(err, fs.ErrNotExist):
		// Created at start, with its missing parents.
	case errors.Is(err, syscall.ENOTDIR):
		add("data_dir", "%s cannot be a directory: a part of its path is a file", cfg.DataDir)
	case err != nil:
		add("data_dir", "%s", pathError(err))
	case !fi.IsDir():
		add("data_dir", "%s is not a directory (it holds the raft log and snapshots: give a directory, or a path that does not exist yet)", cfg.DataDir)
	}
	if err := checkSocketPath(cfg.API.Socket); err != nil {
		add("api.socket", "%s", err)
	}
	if g := cfg.API.Group; g != "" {
		if _, err := user.LookupGroup(g); err != nil {
			add("api.group", "%q is not a group on this machine (the package creates \"fenced\"; else: groupadd --system %s)", g, g)
		}
	}
	if self != nil {
		i := slices.IndexFunc(cfg.Nodes, func(n config.Node) bool { return n.Name == self.Name })
		for _, a := range []struct{ key, addr string }{{"gossip", self.Gossip}, {"raft", self.Raft}} {
			host, _, _ := net.SplitHostPort(a.addr)
			// Port 0: whether the address is this machine's, not whether
			// the port is free (a running fenced holds it).
			l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
			if err != nil {
				add(fmt.Sprintf("nodes[%d].%s", i, a.key), "%s is not an address of this machine (%s): is this machine %s?", host, syscallText(err), self.Name)
				continue
			}
			l.Close()
		}
	}
	return ps
}

// pathError is err without Go's "stat PATH:" prefix when PATH is in it
// anyway.
func pathError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + pe.Err.Error()
	}
	return err.Error()
}

// syscallText is the innermost error of a failed listen ("cannot assign
// requested address").
func syscallText(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

// checkFiles reports, each at its line, every file the configuration names
// that cannot be read here: gossip.key_file (which must hold a key), the
// files of device parameters that are read from a file — a secret's
// NAME_file (password_file, community_file, hexadecimal_kg_file, …) and
// ca_file — in a device or a node's fence topology, and the storage's,
// resources' and alerts' programs (which must be executable). Other NAME_file
// parameters of plugin agents may name files the agent writes. Each is
// checked only where it is used: a witness fences nobody and runs no
// resource, so it uses only the key and the alerts' programs.
func checkFiles(cfg *config.Config, witness bool) config.Problems {
	var ps config.Problems
	add := func(path, msg string) { ps = append(ps, cfg.Problem(path, "%s", msg)) }
	if f := cfg.Gossip.KeyFile; f != "" {
		if _, err := quorum.ReadKeys(f); err != nil {
			// The path names the key; the message needs only its file.
			msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "gossip.key_file: "), "gossip.key_file ")
			if errors.Is(err, fs.ErrNotExist) {
				msg += fmt.Sprintf(": create the cluster's key on one node with `fenced keygen --out %s` and copy it to the same path on every node", f)
			}
			add("gossip.key_file", msg)
		}
	}
	executable := func(path, file string) {
		if file == "" {
			return
		}
		fi, err := os.Stat(file)
		switch {
		case err != nil:
			add(path, err.Error())
		case fi.IsDir() || fi.Mode()&0o111 == 0:
			add(path, file+" is not an executable file")
		}
	}
	for i, a := range cfg.Alerts {
		// Every node alerts what it sees, a witness too.
		executable(fmt.Sprintf("alerts[%d].path", i), a.Path)
	}
	if witness {
		return ps
	}
	readable := func(path, file string) {
		f, err := os.Open(file)
		if err != nil {
			add(path, err.Error())
			return
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			add(path, file+" is a directory, not a file")
		}
	}
	params := func(prefix string, p map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(p)) {
			if strings.HasSuffix(k, "_file") && (config.SecretParam(k) || k == "ca_file") && p[k] != "" {
				readable(prefix+".params."+k, p[k])
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Devices)) {
		params("devices."+name, cfg.Devices[name].Params)
	}
	for i, n := range cfg.Nodes {
		for li, l := range n.Fence {
			for di, ref := range l.Devices {
				params(fmt.Sprintf("nodes[%d].fence[%d].devices[%d]", i, li, di), ref.Params)
			}
		}
	}
	xs := cfg.Storage.Hooks.Executables("storage.hooks")
	for i, r := range cfg.Resources {
		xs = append(xs, r.Executables(fmt.Sprintf("resources[%d]", i))...)
	}
	for _, x := range xs {
		executable(x.Path, x.File)
	}
	return ps
}

// secretModeWarnings warns of every secret's file this node reads — the
// cluster key and, but on a witness, the devices' secrets' files — that
// users other than its owner can read: others, or a group other than root's.
// fenced reads them as root; anyone else who can read the key can join the
// cluster, and anyone who can read a BMC's password can power nodes off.
func secretModeWarnings(cfg *config.Config) config.Problems {
	var ws config.Problems
	check := func(path, file string) {
		fi, err := os.Stat(file)
		if err != nil {
			return // reported as a problem where it matters
		}
		mode := fi.Mode().Perm()
		gid := uint32(0)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			gid = st.Gid
		}
		var who string
		switch {
		case mode&0o004 != 0:
			who = "every user"
		case mode&0o040 != 0 && gid != 0:
			who = "its group"
			if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
				who = "group " + g.Name
			}
		default:
			return
		}
		ws = append(ws, cfg.Problem(path, "warning: %s can be read by %s (mode %04o): chmod 0400 %s", file, who, mode, file))
	}
	if f := cfg.Gossip.KeyFile; f != "" {
		check("gossip.key_file", f)
	}
	if self, ok := cfg.NodeByName(cfg.Node); ok && self.Witness() {
		return ws // a witness reads no device secret
	}
	params := func(prefix string, p map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(p)) {
			if strings.HasSuffix(k, "_file") && config.SecretParam(k) && p[k] != "" {
				check(prefix+".params."+k, p[k])
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Devices)) {
		params("devices."+name, cfg.Devices[name].Params)
	}
	for i, n := range cfg.Nodes {
		for li, l := range n.Fence {
			for di, ref := range l.Devices {
				params(fmt.Sprintf("nodes[%d].fence[%d].devices[%d]", i, li, di), ref.Params)
			}
		}
	}
	return ws
}

// checkAgents builds every (device, target) agent without touching the
// network, collecting the errors their constructors report (but for the
// files checkFiles already reported).
func checkAgents(cfg *config.Config, reg *agents.Registry, files config.Problems) config.Problems {
	var ps config.Problems
	seen := map[config.Problem]bool{} // a device shared by nodes fails once
	reported := map[string]bool{}
	for _, p := range files {
		reported[p.Path] = true
	}
	for i, n := range cfg.Nodes {
		for li, l := range n.Fence {
			for di, ref := range l.Devices {
				k, ok := reg.Lookup(cfg.Devices[ref.Device].Agent)
				if !ok {
					continue
				}
				a, err := k.New(cfg.Params(ref), slog.New(slog.DiscardHandler))
				if err != nil {
					path := fmt.Sprintf("nodes[%d].fence[%d].devices[%d]", i, li, di)
					if p := agentProblem(cfg, path, ref.Device, k.Name, err); !seen[p] && !reported[p.Path] {
						seen[p] = true
						ps = append(ps, p)
					}
					continue
				}
				if c, ok := a.(agents.Closer); ok {
					c.Close()
				}
			}
		}
	}
	slices.SortStableFunc(ps, func(a, b config.Problem) int { return a.Line - b.Line })
	return ps
}

// agentProblem places an agent's construction error (for the device
// reference at ref) on the line that sets the parameter it names (see
// config.ParamPath). The path names the device, so the message does not.
func agentProblem(cfg *config.Config, ref, device, agent string, err error) config.Problem {
	at := cfg.ParamPath(ref, device, config.ParamNamed(err))
	return cfg.Problem(at, "%s (agent %s)", strings.TrimPrefix(err.Error(), "device "+device+": "), agent)
}
