package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/resource"
	"github.com/fenced/fenced/quorum"
)

// LoadConfig reads, validates and resolves the configuration for node
// (empty: the config's `node`, else hostname). Every problem is reported at
// once as config.Problems. Agents are built once per target so parameter
// errors they detect (e.g. a plugin's metadata) count as config problems.
//
// A witness holds nothing and fences nobody: on a witness the agents are not
// built and the resources' agents not read, so it needs neither the device
// secrets nor the storage's programs on its disk.
func LoadConfig(path, node, hostname string, reg *agents.Registry) (*config.Config, error) {
	cfg, err := checkConfig(path, reg, func(cfg *config.Config) (bool, error) {
		n, err := cfg.SelectNode(node, hostname)
		if err != nil {
			return false, err
		}
		return n.Witness(), nil
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// CheckConfig reads and validates the file without selecting a node: what
// `fenced validate` runs.
func CheckConfig(path string, reg *agents.Registry) (*config.Config, error) {
	return checkConfig(path, reg, nil)
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

// checkConfig reads and validates the file; selectNode, when set, picks
// this node after the file's own rules passed and says whether it is a
// witness (which skips the checks of what only data nodes use).
func checkConfig(path string, reg *agents.Registry, selectNode func(*config.Config) (bool, error)) (*config.Config, error) {
	cfg, err := config.Load(path)
	var ps config.Problems
	if err != nil && !errors.As(err, &ps) {
		return nil, err
	}
	if cfg == nil {
		return nil, err
	}
	ps = append(ps, cfg.Validate(reg)...)
	witness := false
	if len(ps) == 0 && selectNode != nil {
		if witness, err = selectNode(cfg); err != nil {
			return nil, err
		}
	}
	if len(ps) == 0 {
		files := checkFiles(cfg, witness)
		ps = append(ps, files...)
		if !witness {
			ps = append(ps, checkAgents(cfg, reg, files)...)
			ps = append(ps, resource.Check(context.Background(), cfg)...)
		}
		if err := checkSocketPath(cfg.API.Socket); err != nil {
			ps = append(ps, config.Problem{File: cfg.File(), Line: cfg.Line("api.socket"), Path: "api.socket", Msg: err.Error()})
		}
	}
	if len(ps) > 0 {
		slices.SortStableFunc(ps, func(a, b config.Problem) int { return a.Line - b.Line })
		return nil, ps
	}
	return cfg, nil
}

// checkFiles reports, each at its line, every file the configuration names
// that cannot be read here: gossip.key_file (which must hold a key), the
// files of device parameters that are read from a file — a secret's
// NAME_file (password_file, community_file, hexadecimal_kg_file, …) and
// ca_file — in a device or a node's fence topology, and the storage's,
// resources' and alerts' programs (which must be executable). Other NAME_file
// parameters of plugin agents may name files the agent writes. A witness
// uses none but the key.
func checkFiles(cfg *config.Config, witness bool) config.Problems {
	var ps config.Problems
	add := func(path, msg string) { ps = append(ps, cfg.Problem(path, "%s", msg)) }
	if f := cfg.Gossip.KeyFile; f != "" {
		if _, err := quorum.ReadKey(f); err != nil {
			add("gossip.key_file", strings.TrimPrefix(err.Error(), "gossip.key_file: "))
		}
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
	xs := cfg.Storage.Hooks.Executables("storage.hooks")
	for i, r := range cfg.Resources {
		xs = append(xs, r.Executables(fmt.Sprintf("resources[%d]", i))...)
	}
	for _, x := range xs {
		executable(x.Path, x.File)
	}
	for i, a := range cfg.Alerts {
		executable(fmt.Sprintf("alerts[%d].path", i), a.Path)
	}
	return ps
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

// reParam finds the parameter an agent's error names.
var reParam = regexp.MustCompile(`\bparameter ([a-z0-9_]+)`)

// agentProblem places an agent's construction error (for the device
// reference at ref) on the line that sets the parameter it names: the
// reference's own params first, then the device's, else the reference.
func agentProblem(cfg *config.Config, ref, device, agent string, err error) config.Problem {
	p := config.Problem{File: cfg.File(), Path: ref, Line: cfg.Line(ref), Msg: fmt.Sprintf("device %s (%s): %v", device, agent, err)}
	if m := reParam.FindStringSubmatch(err.Error()); m != nil {
		for _, at := range []string{ref + ".params." + m[1], "devices." + device + ".params." + m[1]} {
			if l, ok := cfg.LineOf(at); ok {
				p.Path, p.Line = at, l
				break
			}
		}
	}
	return p
}
