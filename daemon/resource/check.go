package resource

import (
	"context"
	"fmt"

	"github.com/fenced/fenced/daemon/config"
)

// Check checks every resource whose kind has a check against what its agent
// declares: each OCF agent's meta-data is read and its resource checked
// against it, with the strictness of fence devices (a parameter the agent
// does not declare is refused, a required one must be given, integers,
// booleans and selections must be well-formed, and the agent must
// implement start, stop and monitor). Each problem carries FILE:LINE and
// the resource's path. It runs each agent once ("meta-data", cached) and
// changes nothing.
func Check(ctx context.Context, cfg *config.Config) config.Problems {
	var ps config.Problems
	for i, r := range cfg.Resources {
		if k, ok := lookupKind(r.Kind()); ok && k.check != nil {
			ps = append(ps, k.check(ctx, cfg, fmt.Sprintf("resources[%d]", i), r)...)
		}
	}
	return ps
}

// ValidateAll runs, as node, the on-node check of every resource whose kind
// has one: each OCF agent's validate-all with its parameters (what `fenced
// validate --node` adds: the agents check their parameters on this machine
// — the device exists, the interface is up). Failures come back as problems
// at the resource's path.
func ValidateAll(ctx context.Context, cfg *config.Config, node string) config.Problems {
	var ps config.Problems
	for i, r := range cfg.Resources {
		if k, ok := lookupKind(r.Kind()); ok && k.validateNode != nil {
			ps = append(ps, k.validateNode(ctx, cfg, fmt.Sprintf("resources[%d]", i), r, node)...)
		}
	}
	return ps
}
