package resource

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/config"
)

// kind is how the group runs one kind of resource, registered under the
// kind's name (config.Resource.Kind: "ocf", "mount", "hooks"). The
// configuration's side of the kind (the key that gives it, how its settings
// are validated, whether storage.checks_tokens covers it) is its entry in
// package config, which cannot import this package; this is the rest.
// Adding a kind is that entry and one register call here: nothing else
// switches on a kind.
type kind struct {
	name string
	// build makes the member that runs r on node (log already names the
	// resource). It may run the agent's meta-data; it starts nothing.
	build func(ctx context.Context, cfg *config.Config, r config.Resource, node string, log *slog.Logger) (built, error)
	// defaultInterval is the monitor interval when neither the
	// configuration nor the agent's advice gives one.
	defaultInterval time.Duration
	// check checks r at load against what its agent declares, each problem
	// at a path under p ("resources[2]"); nil: nothing to check.
	check func(ctx context.Context, cfg *config.Config, p string, r config.Resource) config.Problems
	// validateNode runs the agent's own check of r on this machine, as node
	// (`fenced validate --node`); nil: nothing to run.
	validateNode func(ctx context.Context, cfg *config.Config, p string, r config.Resource, node string) config.Problems
}

// built is what a kind's build returns.
type built struct {
	m member
	// label is the kind as Status shows it ("ocf:heartbeat:IPaddr2");
	// empty: the kind's name.
	label string
	// advised returns the agent's advised timeout and interval of an
	// action (0 when it advises none); nil when the kind has no advice.
	advised func(action string) (timeout, interval time.Duration)
}

// kinds is the registry: each kind's register call is beside its code.
var kinds = map[string]*kind{}

// register adds k. An empty name, a missing build, a duplicate or a kind the
// configuration does not accept is a programming error and panics at
// start-up.
func register(k kind) {
	switch {
	case k.name == "" || k.build == nil:
		panic("resource: register with empty name or nil build")
	case kinds[k.name] != nil:
		panic("resource: duplicate kind " + k.name)
	case !slices.Contains(config.ResourceKinds(), k.name):
		panic("resource: kind " + k.name + " is not one config.ResourceKinds lists")
	}
	kinds[k.name] = &k
}

// lookupKind returns the kind named name ("" for a resource that gives no
// kind or several is never one).
func lookupKind(name string) (*kind, bool) {
	k, ok := kinds[name]
	return k, ok
}

// errKind is the error of a resource whose kind is not registered: it gives
// no kind or several ("give exactly one of ocf, mount, hooks").
func errKind() error {
	return errors.New("give exactly one of " + strings.Join(config.ResourceKinds(), ", "))
}
