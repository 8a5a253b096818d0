package resource

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fenced/fenced/daemon/config"
)

// requiredActions are the actions the group calls on every agent.
var requiredActions = []string{"start", "stop", "monitor"}

// Check reads every OCF agent's meta-data and checks its resource against
// it, with the strictness of fence devices: a parameter the agent does not
// declare is refused, a required one must be given, integers, booleans and
// selections must be well-formed, and the agent must implement start, stop
// and monitor. Each problem carries FILE:LINE and the resource's path. It
// runs each agent once ("meta-data", cached) and changes nothing.
func Check(ctx context.Context, cfg *config.Config) config.Problems {
	var ps config.Problems
	for i, r := range cfg.Resources {
		if r.Kind() != "ocf" {
			continue
		}
		p := fmt.Sprintf("resources[%d]", i)
		prov, typ := r.Agent()
		mctx, cancel := context.WithTimeout(ctx, metadataTimeout)
		_, meta, err := readMetadata(mctx, cfg.OCFRoot, prov, typ)
		cancel()
		if err != nil {
			ps = append(ps, cfg.Problem(p+".ocf", "%v", err))
			continue
		}
		var missing []string
		for _, a := range requiredActions {
			if _, ok := meta.Action(a); !ok {
				missing = append(missing, a)
			}
		}
		if len(missing) > 0 {
			ps = append(ps, cfg.Problem(p+".ocf", "%s does not implement %s (its meta-data lists no such action)", r.OCF, strings.Join(missing, ", ")))
		}
		for _, pp := range checkParams(r.OCF, meta, r.AllParams()) {
			path := p + ".params"
			if pp.param != "" {
				path += "." + pp.param
			}
			ps = append(ps, cfg.Problem(path, "%s", pp.msg))
		}
	}
	return ps
}

// ValidateAll runs validate-all of every OCF agent with its parameters, as
// node (what `fenced validate --node` adds: the agents check their
// parameters on this machine — the device exists, the interface is up).
// Failures come back as problems at the resource's path.
func ValidateAll(ctx context.Context, cfg *config.Config, node string) config.Problems {
	var ps config.Problems
	for i, r := range cfg.Resources {
		if r.Kind() != "ocf" {
			continue
		}
		p := fmt.Sprintf("resources[%d]", i)
		a, err := newOCF(ctx, cfg.OCFRoot, r, node, slog.New(slog.DiscardHandler))
		if err != nil {
			ps = append(ps, cfg.Problem(p+".ocf", "%v", err))
			continue
		}
		vctx, cancel := context.WithTimeout(ctx, validateTimeout(a))
		err = a.validate(vctx)
		cancel()
		if err != nil {
			ps = append(ps, cfg.Problem(p, "%v", err))
		}
	}
	return ps
}
