package fenceapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/fenced/fenced/agents"
)

// Exit codes of the FenceAgentAPI.
const (
	ExitOK      = 0 // success; for status: the target is on
	ExitFailure = 1 // failure, outcome unknown, or bad parameters
	ExitOff     = 2 // status only: the target is off
)

// Actions Main performs.
var actions = map[string]bool{
	"on": true, "off": true, "reboot": true, "status": true, "monitor": true,
	"list": true, "metadata": true, "validate-all": true,
}

// actionAliases are the older fence-agents spellings.
var actionAliases = map[string]string{"enable": "on", "disable": "off", "stat": "status"}

// generic are fence-agents options every agent takes that are handled here
// (or harmlessly ignored), not passed to the agent.
var generic = map[string]bool{
	"action": true, "option": true, "delay": true, "verbose": true, "verbose_level": true,
	"debug": true, "debug_file": true, "quiet": true, "retry_on": true, "help": true, "version": true,
}

// Main runs the agent registered as name the way fence-agents programs run:
// parameters from args (--name=value, -o ACTION) or, with no args, as
// name=value lines on stdin. It returns the process exit code.
func Main(ctx context.Context, reg *agents.Registry, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	k, ok := reg.Lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "fenced agent: no agent %q (have: %s)\n", name, strings.Join(reg.Names(), ", "))
		return ExitFailure
	}
	// decl is every parameter the agent takes. An OpenParams agent (exec)
	// knows its full set only once its own parameters are known (the
	// program it runs); if they are wrong, declErr says so after the
	// actions that need none (metadata, help).
	decl, declErr := k.Params, error(nil)
	var p agents.Params
	var err error
	if len(args) > 0 {
		if k.ParamsFor != nil {
			decl, declErr = paramsFor(k, ownArgs(args, k.Params))
		}
		p, err = parseArgs(args, decl)
	} else {
		p, err = ParseParams(stdin)
		if err == nil && k.ParamsFor != nil {
			decl, declErr = paramsFor(k, p)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "fenced agent %s: %v\n", name, err)
		return ExitFailure
	}
	if p["help"] != "" {
		fmt.Fprintf(stdout, "Usage: fenced agent %s [--name=value ...] [-o ACTION]\n  (or name=value lines on stdin)\nActions: on off reboot status monitor list metadata validate-all\nParameters: see -o metadata\n", name)
		return ExitOK
	}
	action := "reboot"
	if v, ok := p.Get("action", "option"); ok && v != "" {
		action = strings.ToLower(strings.TrimSpace(v))
	}
	if a, ok := actionAliases[action]; ok {
		action = a
	}
	if !actions[action] {
		fmt.Fprintf(stderr, "fenced agent %s: action %q: not one of on, off, reboot, status, monitor, list, metadata, validate-all\n", name, action)
		return ExitFailure
	}
	if action == "metadata" {
		if _, err := KindMetadata(k).WriteTo(stdout); err != nil {
			fmt.Fprintf(stderr, "fenced agent %s: %v\n", name, err)
			return ExitFailure
		}
		return ExitOK
	}

	if declErr != nil {
		fmt.Fprintf(stderr, "fenced agent %s: %v\n", name, declErr)
		return ExitFailure
	}

	level := slog.LevelWarn
	if v, _ := p.Bool("verbose", false); v {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("agent", name)

	delay, err := p.Seconds("delay", 0)
	if err != nil {
		fmt.Fprintf(stderr, "fenced agent %s: %v\n", name, err)
		return ExitFailure
	}
	ap := agentParams(p)
	// As fence-agents do, ignore on stdin (with a warning) what the agent
	// does not take: fencers such as Pacemaker pass generic options
	// (shell_timeout, login_timeout …) to every agent. On the command line
	// it is a mistake. The value is never echoed: it may be a secret.
	for _, n := range agents.Undeclared(ap, decl) {
		if len(args) > 0 {
			fmt.Fprintf(stderr, "fenced agent %s: option --%s: unknown (see -o metadata)\n", name, strings.ReplaceAll(n, "_", "-"))
			return ExitFailure
		}
		fmt.Fprintf(stderr, "fenced agent %s: ignoring parameter %s: not one of this agent's\n", name, n)
		delete(ap, n)
	}
	agent, err := k.New(ap, log)
	if err != nil {
		fmt.Fprintf(stderr, "fenced agent %s: %v\n", name, err)
		return ExitFailure
	}
	if c, ok := agent.(agents.Closer); ok {
		defer c.Close()
	}
	if action == "validate-all" {
		return ExitOK
	}
	// fence-agents' delay postpones only the actions that fence, so that
	// of two nodes fencing each other one reliably wins.
	if delay > 0 && (action == "off" || action == "reboot") {
		select {
		case <-ctx.Done():
			fmt.Fprintf(stderr, "Failed: %v\n", ctx.Err())
			return ExitFailure
		case <-time.After(delay):
		}
	}
	return run(ctx, agent, action, stdout, stderr)
}

// paramsFor asks an OpenParams kind for its whole parameter set given its
// own parameters; on error it returns the kind's own ones with the error.
func paramsFor(k *agents.Kind, p agents.Params) ([]agents.Param, error) {
	// Errors are for later: the rest of p is the program's to judge.
	resolved, _ := agents.Resolve(p, k.Params)
	own := agents.Params{}
	for _, d := range k.Params {
		if v, ok := resolved[d.Name]; ok {
			own[d.Name] = v
		}
	}
	decl, err := k.ParamsFor(own)
	if err != nil {
		return k.Params, err
	}
	return decl, nil
}

// agentParams drops the options handled here and normalises the target:
// plug, else port, else nodename, as fence-agents resolve it.
func agentParams(p agents.Params) agents.Params {
	out := agents.Params{}
	for k, v := range p {
		if !generic[k] {
			out[k] = v
		}
	}
	if _, ok := out["plug"]; !ok {
		if v, ok := out["port"]; ok {
			out["plug"] = v
		} else if v, ok := out["nodename"]; ok && v != "" {
			out["plug"] = v
		}
	}
	return out
}

func run(ctx context.Context, a agents.Agent, action string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		kind := "Failed"
		if agents.IsUnknown(err) {
			kind = "Outcome unknown"
		}
		fmt.Fprintf(stderr, "%s: %v\n", kind, err)
		return ExitFailure
	}
	switch action {
	case "status":
		st, err := a.Status(ctx)
		if err != nil {
			return fail(err)
		}
		switch st {
		case agents.StateOn:
			fmt.Fprintln(stdout, "Status: ON")
			return ExitOK
		case agents.StateOff:
			fmt.Fprintln(stdout, "Status: OFF")
			return ExitOff
		}
		fmt.Fprintln(stdout, "Status: UNKNOWN")
		return ExitFailure
	case "off":
		if err := a.Off(ctx); err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, "Success: Powered OFF")
	case "on":
		if err := a.On(ctx); err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, "Success: Powered ON")
	case "reboot":
		if err := a.Reboot(ctx); err != nil {
			return fail(err)
		}
		fmt.Fprintln(stdout, "Success: Rebooted")
	case "monitor":
		var err error
		if m, ok := a.(agents.Monitor); ok {
			err = m.Monitor(ctx)
		} else {
			_, err = a.Status(ctx)
		}
		if err != nil {
			return fail(err)
		}
	case "list":
		l, ok := a.(agents.Lister)
		if !ok {
			return fail(agents.Failed("list", errors.New("this agent controls a single target and has no port list")))
		}
		ports, err := l.List(ctx)
		if err != nil {
			return fail(err)
		}
		for _, port := range ports {
			fmt.Fprintf(stdout, "%s,%s\n", port.ID, port.Alias)
		}
	}
	return ExitOK
}
