package resource

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/config"
)

// An OCF resource agent (heartbeat:IPaddr2), driven through the OCF
// resource agent API; its meta-data is read (and cached) when it is built
// and checked at load.
func init() {
	register(kind{
		name: "ocf",
		build: func(ctx context.Context, cfg *config.Config, r config.Resource, node string, log *slog.Logger) (built, error) {
			a, err := newOCF(ctx, cfg.OCFRoot, r, node, log)
			if err != nil {
				return built{}, err
			}
			return built{m: a, label: "ocf:" + r.OCF, advised: a.meta.Advised}, nil
		},
		defaultInterval: config.DefaultOCFMonitorInterval,
		check:           checkOCF,
		validateNode:    validateOCF,
	})
}

// newOCF resolves the agent and reads its meta-data.
func newOCF(ctx context.Context, root string, r config.Resource, node string, log *slog.Logger) (*ocfAgent, error) {
	prov, typ := r.Agent()
	mctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	defer cancel()
	path, meta, err := readMetadata(mctx, root, prov, typ)
	if err != nil {
		return nil, err
	}
	a := &ocfAgent{res: r.Name, agent: r.OCF, provider: prov, typ: typ, path: path, root: root, node: node,
		params: r.AllParams(), meta: meta, log: log.With("agent", r.OCF), outputLimit: 4 << 10}
	for k, v := range r.AllParams() {
		if secretParam.MatchString(k) && v != "" {
			a.secrets = append(a.secrets, v)
		}
	}
	return a, nil
}

// metadataTimeout bounds one meta-data run.
const metadataTimeout = 15 * time.Second

// requiredActions are the actions the group calls on every agent.
var requiredActions = []string{"start", "stop", "monitor"}

// checkOCF checks r against its agent's meta-data, with the strictness of
// fence devices: a parameter the agent does not declare is refused, a
// required one must be given, integers, booleans and selections must be
// well-formed, and the agent must implement start, stop and monitor.
func checkOCF(ctx context.Context, cfg *config.Config, p string, r config.Resource) config.Problems {
	prov, typ := r.Agent()
	mctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	_, meta, err := readMetadata(mctx, cfg.OCFRoot, prov, typ)
	cancel()
	if err != nil {
		return config.Problems{cfg.Problem(p+".ocf", "%v", err)}
	}
	var ps config.Problems
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
	return ps
}

// validateOCF runs the agent's validate-all with r's parameters, as node:
// the agent checks them on this machine (the device exists, the interface
// is up).
func validateOCF(ctx context.Context, cfg *config.Config, p string, r config.Resource, node string) config.Problems {
	a, err := newOCF(ctx, cfg.OCFRoot, r, node, slog.New(slog.DiscardHandler))
	if err != nil {
		return config.Problems{cfg.Problem(p+".ocf", "%v", err)}
	}
	vctx, cancel := context.WithTimeout(ctx, validateTimeout(a))
	err = a.validate(vctx)
	cancel()
	if err != nil {
		return config.Problems{cfg.Problem(p, "%v", err)}
	}
	return nil
}

func validateTimeout(a *ocfAgent) time.Duration {
	if t, _ := a.meta.Advised("validate-all"); t > 0 {
		return t
	}
	return DefaultTimeout
}
