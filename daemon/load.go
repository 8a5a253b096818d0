package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/daemon/resource"
)

// LoadConfig reads, validates and resolves the configuration for node
// (empty: the config's `node`, else hostname). Every problem is reported at
// once as config.Problems. Agents are built once per target so parameter
// errors they detect (e.g. a plugin's metadata) count as config problems.
func LoadConfig(path, node, hostname string, reg *agents.Registry) (*config.Config, error) {
	cfg, err := CheckConfig(path, reg)
	if err != nil {
		return nil, err
	}
	if _, err := cfg.SelectNode(node, hostname); err != nil {
		return nil, err
	}
	return cfg, nil
}

// CheckConfig reads and validates the file without selecting a node: what
// `fenced validate` runs.
func CheckConfig(path string, reg *agents.Registry) (*config.Config, error) {
	cfg, err := config.Load(path)
	var ps config.Problems
	if err != nil && !errors.As(err, &ps) {
		return nil, err
	}
	if cfg == nil {
		return nil, err
	}
	ps = append(ps, cfg.Validate(reg)...)
	if len(ps) == 0 {
		ps = append(ps, checkAgents(cfg, reg)...)
		ps = append(ps, resource.Check(context.Background(), cfg)...)
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return cfg, nil
}

// checkAgents builds every (device, target) agent without touching the
// network, collecting the errors their constructors report.
func checkAgents(cfg *config.Config, reg *agents.Registry) config.Problems {
	var ps config.Problems
	for i, n := range cfg.Nodes {
		for li, l := range n.Fence {
			for di, ref := range l.Devices {
				k, ok := reg.Lookup(cfg.Devices[ref.Device].Agent)
				if !ok {
					continue
				}
				a, err := k.New(cfg.Params(ref), slog.New(slog.DiscardHandler))
				path := fmt.Sprintf("nodes[%d].fence[%d].devices[%d]", i, li, di)
				if err != nil {
					ps = append(ps, config.Problem{File: cfg.File(), Path: path, Msg: fmt.Sprintf("device %s (%s): %v", ref.Device, k.Name, err)})
					continue
				}
				if c, ok := a.(agents.Closer); ok {
					c.Close()
				}
			}
		}
	}
	return ps
}
