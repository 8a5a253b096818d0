package exec

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fenced/fenced/agents"
)

// RunError is a run of the program that did not do what was asked. It
// carries the program's standard error, secrets scrubbed, for the fence
// history: find it with errors.As, or through an interface with a
// Stderr() string method.
type RunError struct {
	Agent  string // program base name
	Action string
	// ExitCode is the program's exit status, -1 if it was killed.
	ExitCode int
	Reason   string // what was wrong, e.g. "exit status 1", "killed at deadline after 5s"
	stderr   string
}

func (e *RunError) Error() string {
	return fmt.Sprintf("%s %s: %s; stderr: %s", e.Agent, e.Action, e.Reason, summary([]byte(e.stderr)))
}

// Stderr returns the program's standard error with secrets scrubbed.
func (e *RunError) Stderr() string { return e.stderr }

// LastStderr returns the standard error of the agent's last off or on run,
// secrets scrubbed: what a successful fence leaves for the history. Status
// runs (the read-backs after off and on) do not replace it; a failed one
// carries its own in its RunError.
func (a *Agent) LastStderr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastStderr
}

// Path is the program the agent runs.
func (a *Agent) Path() string { return a.path }

type run struct {
	*runResult
	stdoutText, stderrText string // scrubbed
}

// run runs the program once for action. The deadline is the caller's, or
// agent_timeout when the caller set none.
func (a *Agent) run(ctx context.Context, action string) (*run, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	var in strings.Builder
	in.WriteString("action=" + action + "\n")
	var secrets []string
	for _, p := range a.lines {
		v := p.value
		if p.fromFile {
			b, err := os.ReadFile(p.value)
			if err != nil {
				return nil, agents.Failed(a.op(action), fmt.Errorf("parameter %s_file: %w", p.name, err))
			}
			v = firstLine(string(b))
			if strings.ContainsAny(v, "\x00") {
				return nil, agents.Failed(a.op(action), fmt.Errorf("parameter %s_file: contains NUL", p.name))
			}
		}
		if p.secret && v != "" {
			secrets = append(secrets, v)
		}
		in.WriteString(p.name + "=" + v + "\n")
	}
	start := time.Now()
	res, err := runProgram(ctx, a.path, nil, []byte(in.String()))
	if err != nil {
		return nil, agents.Failed(a.op(action), err)
	}
	r := &run{runResult: res, stdoutText: scrub(string(res.stdout), secrets), stderrText: scrub(string(res.stderr), secrets)}
	if action == "off" || action == "on" {
		a.mu.Lock()
		a.lastStderr = r.stderrText
		a.mu.Unlock()
	}
	a.log.Debug("agent run", "action", action, "exit", res.exit, "timed_out", res.timedOut, "elapsed", time.Since(start).Round(time.Millisecond))
	return r, nil
}

func (a *Agent) op(action string) string { return "exec " + a.name + " " + action }

func (a *Agent) runError(r *run, action, reason string) *RunError {
	return &RunError{Agent: a.name, Action: action, ExitCode: r.exit, Reason: reason, stderr: r.stderrText}
}

// killed reports a run that ended by deadline or signal.
func (a *Agent) killed(r *run, action string) *RunError {
	if r.timedOut {
		return a.runError(r, action, fmt.Sprintf("killed with its process group at the deadline after %s", r.elapsed.Round(time.Millisecond)))
	}
	if r.signaled {
		return a.runError(r, action, "killed by a signal")
	}
	return nil
}

var statusLine = regexp.MustCompile(`(?i)^status:\s*(on|off)\s*$`)

// Status runs the program's status action: exit 0 on, 2 off. Output, when
// there is any, must be a Status: ON/OFF line agreeing with the exit code.
func (a *Agent) Status(ctx context.Context) (agents.State, error) {
	r, err := a.run(ctx, "status")
	if err != nil {
		return agents.StateUnknown, err
	}
	if k := a.killed(r, "status"); k != nil {
		return agents.StateUnknown, agents.Unknown(a.op("status"), k)
	}
	var st agents.State
	switch r.exit {
	case 0:
		st = agents.StateOn
	case 2:
		st = agents.StateOff
	case 1:
		return agents.StateUnknown, agents.Failed(a.op("status"), a.runError(r, "status", "exit status 1 (error)"))
	default:
		return agents.StateUnknown, agents.Failed(a.op("status"), a.runError(r, "status", fmt.Sprintf("unexpected exit status %d (FenceAgentAPI status: 0 on, 2 off, 1 error)", r.exit)))
	}
	said, bad := statusOutput(r.stdoutText)
	if bad != "" {
		return agents.StateUnknown, agents.Unknown(a.op("status"), a.runError(r, "status", "unrecognized output "+quote(bad)))
	}
	if said != agents.StateUnknown && said != st {
		return agents.StateUnknown, agents.Unknown(a.op("status"), a.runError(r, "status", fmt.Sprintf("output says %s but exit status %d says %s", said, r.exit, st)))
	}
	return st, nil
}

// statusOutput reads a status action's standard output: the state its
// "Status: ON|OFF" lines say (unknown when there are none), or the first
// line that is something else.
func statusOutput(out string) (said agents.State, bad string) {
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		m := statusLine.FindStringSubmatch(l)
		if m == nil {
			return agents.StateUnknown, l
		}
		st := agents.StateOn
		if strings.EqualFold(m[1], "off") {
			st = agents.StateOff
		}
		if said != agents.StateUnknown && said != st {
			return agents.StateUnknown, l
		}
		said = st
	}
	return said, ""
}

// preCommand are fence-agents messages printed before any power command
// was sent: a failure with one of them changed nothing.
var preCommand = []string{"Unable to connect/login", "You have to enter", "is not a valid", "Failed: Unable to obtain correct plug status"}

// act runs off or on and confirms it with status. A non-zero exit is a
// failure when the program says it never got to send the command, and an
// unknown outcome otherwise.
func (a *Agent) act(ctx context.Context, action string, want agents.State) error {
	r, err := a.run(ctx, action)
	if err != nil {
		return err
	}
	if k := a.killed(r, action); k != nil {
		return agents.Unknown(a.op(action), k)
	}
	if r.exit != 0 {
		e := a.runError(r, action, fmt.Sprintf("exit status %d", r.exit))
		for _, s := range preCommand {
			if strings.Contains(r.stderrText, s) {
				return agents.Failed(a.op(action), e)
			}
		}
		return agents.Unknown(a.op(action), e)
	}
	if bad := garbage(r.stdoutText); bad != "" {
		return agents.Unknown(a.op(action), a.runError(r, action, "exit status 0 with unrecognized output "+quote(bad)))
	}
	// The program's word is not enough: read the state back ourselves.
	deadline := time.Now().Add(a.readback)
	var last error
	for {
		st, err := a.Status(ctx)
		if err == nil && st == want {
			return nil
		}
		if err == nil {
			last = fmt.Errorf("reads back %s, not %s", st, want)
		} else {
			last = err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				return agents.Failed(a.op(action)+": read-back", last)
			}
			return agents.Unknown(a.op(action)+": read-back", last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Off runs the program's off action and confirms off with status.
func (a *Agent) Off(ctx context.Context) error { return a.act(ctx, "off", agents.StateOff) }

// On runs the program's on action and confirms on with status.
func (a *Agent) On(ctx context.Context) error { return a.act(ctx, "on", agents.StateOn) }

// Reboot is Off, confirmed, then On, confirmed: the program's own reboot
// would hide the confirmed-off step from us.
func (a *Agent) Reboot(ctx context.Context) error {
	if err := a.Off(ctx); err != nil {
		return err
	}
	return a.On(ctx)
}

// Monitor runs the program's monitor action, or, for a program without
// one, its status (the contract of agents.Monitor's callers: monitor when
// the device has one, else a status query).
func (a *Agent) Monitor(ctx context.Context) error {
	if !a.meta.HasAction("monitor") {
		_, err := a.Status(ctx)
		return err
	}
	r, err := a.run(ctx, "monitor")
	if err != nil {
		return err
	}
	if k := a.killed(r, "monitor"); k != nil {
		return agents.Failed(a.op("monitor"), k)
	}
	if r.exit != 0 {
		return agents.Failed(a.op("monitor"), a.runError(r, "monitor", fmt.Sprintf("exit status %d", r.exit)))
	}
	return nil
}

// List runs the program's list action: one "plug,alias" line per port.
func (a *Agent) List(ctx context.Context) ([]agents.Port, error) {
	if !a.meta.HasAction("list") {
		return nil, agents.Failed(a.op("list"), fmt.Errorf("%s has no list action", a.name))
	}
	r, err := a.run(ctx, "list")
	if err != nil {
		return nil, err
	}
	if k := a.killed(r, "list"); k != nil {
		return nil, agents.Failed(a.op("list"), k)
	}
	if r.exit != 0 {
		return nil, agents.Failed(a.op("list"), a.runError(r, "list", fmt.Sprintf("exit status %d", r.exit)))
	}
	if bad := garbage(r.stdoutText); bad != "" {
		return nil, agents.Failed(a.op("list"), a.runError(r, "list", "unrecognized output "+quote(bad)))
	}
	var ports []agents.Port
	for _, l := range strings.Split(r.stdoutText, "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		id, alias, _ := strings.Cut(l, ",")
		ports = append(ports, agents.Port{ID: strings.TrimSpace(id), Alias: strings.TrimSpace(alias)})
	}
	return ports, nil
}

// garbage returns the first line of out that is not text an agent prints
// on success: binary, control characters, or a "Failed" message.
func garbage(out string) string {
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, "\r")
		if !utf8.ValidString(l) {
			return l
		}
		for _, c := range l {
			if unicode.IsControl(c) && c != '\t' {
				return l
			}
		}
		if strings.HasPrefix(strings.TrimSpace(l), "Failed") {
			return l
		}
	}
	return ""
}

func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// scrub replaces every secret value in s, longest first so that a secret
// containing another is not half replaced.
func scrub(s string, secrets []string) string {
	sorted := append([]string(nil), secrets...)
	sort.Slice(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	for _, v := range sorted {
		if v != "" {
			s = strings.ReplaceAll(s, v, "*****")
		}
	}
	return s
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimRight(s, "\r")
}

// UnfenceAtStart reports whether the program's metadata marks its "on"
// action on_target and automatic: the node it fences runs it for itself at
// start (fence_scsi, fence_mpath).
func (a *Agent) UnfenceAtStart() bool {
	for _, act := range a.meta.Actions {
		if act.Name == "on" {
			return isTrue(act.OnTarget) && isTrue(act.Automatic)
		}
	}
	return false
}

func isTrue(s string) bool {
	return s == "1" || strings.EqualFold(s, "true") || strings.EqualFold(s, "yes")
}
