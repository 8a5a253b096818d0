package alerts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/lestrrat-go/strftime"
)

// InterfaceVersion is what CRM_alert_version says: the Pacemaker release
// whose alert interface fenced follows (agents check it is set, some that
// it is at least 1.1.15). fenced's own version is in FENCED_VERSION.
const InterfaceVersion = "2.1.5"

// Version is fenced's version, passed as FENCED_VERSION (set by the daemon).
var Version = ""

// defaultPath is the agents' PATH unless their params set one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// maxOutput bounds what is kept of a run's output for the log.
const maxOutput = 4 << 10

// env is the environment of one run. Pacemaker passes every variable
// twice, as CRM_alert_NAME and, for agents written for ClusterMon's
// external scripts, CRM_notify_NAME.
func (m *Manager) env(r runSpec) ([]string, error) {
	ev := r.ev
	ts, err := FormatTimestamp(r.tsFormat, ev.Time)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{
		"kind":            ev.Kind,
		"version":         InterfaceVersion,
		"node_sequence":   strconv.FormatUint(ev.seq, 10),
		"timestamp":       ts,
		"timestamp_epoch": strconv.FormatInt(ev.Time.Unix(), 10),
		"timestamp_usec":  strconv.Itoa(ev.Time.Nanosecond() / 1000),
		"node":            ev.Node,
		"desc":            ev.Desc,
		"task":            ev.Task,
		"attribute_name":  ev.Attribute,
		"attribute_value": ev.Value,
	}
	if ev.HasRC {
		vars["rc"] = strconv.Itoa(ev.RC)
	}
	if r.recipient != nil {
		vars["recipient"] = r.recipient.Value
	}
	env := []string{"PATH=" + defaultPath, "LANG=C.UTF-8"}
	for _, k := range sortedKeys(r.agent.Params) {
		if k == "PATH" {
			env[0] = "PATH=" + r.agent.Params[k]
			continue
		}
		env = append(env, k+"="+r.agent.Params[k])
	}
	for _, k := range sortedKeys(vars) {
		if v := vars[k]; v != "" {
			env = append(env, "CRM_alert_"+k+"="+v, "CRM_notify_"+k+"="+v)
		}
	}
	env = append(env, "FENCED_EVENT="+ev.Name, "FENCED_NODE="+m.o.Self, "FENCED_CLUSTER="+m.o.Cluster, "FENCED_ALERT="+r.agent.Name)
	if ev.Epoch > 0 {
		env = append(env, "FENCED_EPOCH="+strconv.FormatUint(ev.Epoch, 10))
	}
	if Version != "" {
		env = append(env, "FENCED_VERSION="+Version)
	}
	return env, nil
}

// command builds the process of one run: a process group of its own, in /,
// with nothing on stdin.
func (m *Manager) command(r runSpec) (*exec.Cmd, error) {
	env, err := m.env(r)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(r.agent.Path)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child that left the group and kept the output open does not hold
	// the run for long.
	cmd.WaitDelay = 2 * time.Second
	return cmd, nil
}

// run runs one agent process to its end or its timeout, and logs it.
func (m *Manager) run(ctx context.Context, r runSpec) {
	log := m.log.With("alert", r.agent.Name, "event", r.ev.Name, "alert_node", r.ev.Node, "sequence", r.ev.seq)
	if r.recipient != nil {
		log = log.With("recipient", r.recipient.Value)
	}
	cmd, err := m.command(r)
	if err != nil {
		log.Error("alert agent not run", "err", err)
		m.observe(r.agent.Name, "error")
		return
	}
	var out capped
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		log.Warn("alert agent could not start", "path", r.agent.Path, "err", err)
		m.observe(r.agent.Name, "error")
		return
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t := time.NewTimer(r.timeout)
	defer t.Stop()
	var why string
	select {
	case err = <-done:
	case <-t.C:
		why = "timeout"
	case <-ctx.Done():
		why = "stopping"
	}
	if why != "" {
		// The whole group: an agent's children (sendmail, snmptrap) go
		// with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-done
	}
	took := time.Since(start).Round(time.Millisecond)
	text := m.scrub(r, out.String())
	switch {
	case why == "timeout":
		log.Warn("alert agent killed at its timeout", "timeout", r.timeout, "output", text)
		m.observe(r.agent.Name, "timeout")
	case why == "stopping":
		log.Info("alert agent killed: stopping", "took", took)
	case err != nil:
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		log.Warn("alert agent failed", "exit", code, "took", took, "output", text)
		m.observe(r.agent.Name, "failed")
	default:
		log.Info("alert agent ran", "took", took, "output", text)
		m.observe(r.agent.Name, "ok")
	}
}

// start starts one run and leaves it: it is reaped (and killed at its
// timeout) by a goroutine of its own, if the process lives that long.
func (m *Manager) start(r runSpec) {
	cmd, err := m.command(r)
	if err != nil {
		return
	}
	if err := cmd.Start(); err != nil {
		m.log.Warn("alert agent could not start", "alert", r.agent.Name, "event", r.ev.Name, "err", err)
		return
	}
	m.log.Info("alert agent started, not waited for", "alert", r.agent.Name, "event", r.ev.Name)
	go func() {
		t := time.AfterFunc(r.timeout, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		_ = cmd.Wait()
		t.Stop()
	}()
}

func (m *Manager) observe(agent, result string) {
	if m.o.Observe != nil {
		m.o.Observe(agent, result)
	}
}

// scrub cleans an agent's output for the log: the values of its params
// (which may hold a password, e.g. trap_options) are masked, control
// characters dropped, and the text cut short.
func (m *Manager) scrub(r runSpec, s string) string {
	for _, v := range r.agent.Params {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "***")
		}
	}
	s = strings.Map(func(c rune) rune {
		switch {
		case c == '\n' || c == '\t':
			return ' '
		case unicode.IsControl(c):
			return -1
		}
		return c
	}, strings.TrimSpace(s))
	if len(s) > 512 {
		s = strings.ToValidUTF8(s[:512], "") + "…"
	}
	return s
}

// capped keeps the first maxOutput bytes written to it.
type capped struct{ b bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := maxOutput - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string { return c.b.String() }

// FormatTimestamp formats t as date(1) would with format: strftime's
// conversions, plus %N (nanoseconds) with an optional width that keeps that
// many leading digits (%3N milliseconds, %06N microseconds), as Pacemaker's
// timestamp-format allows.
func FormatTimestamp(format string, t time.Time) (string, error) {
	// %N is replaced by its digits first (they hold no '%'); the rest is
	// strftime's.
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		j := i + 1
		for j < len(format) && format[j] >= '0' && format[j] <= '9' {
			j++
		}
		switch {
		case format[i+1] == '%':
			b.WriteString("%%")
			i++
		case j < len(format) && format[j] == 'N':
			width := 9
			if j > i+1 {
				n, err := strconv.Atoi(format[i+1 : j])
				if err != nil || n < 1 || n > 9 {
					return "", fmt.Errorf("timestamp format %q: %%%sN: want a width of 1 to 9 digits", format, format[i+1:j])
				}
				width = n
			}
			b.WriteString(fmt.Sprintf("%09d", t.Nanosecond())[:width])
			i = j
		case j > i+1:
			return "", fmt.Errorf("timestamp format %q: a width is only allowed with %%N", format)
		default:
			b.WriteByte(c)
		}
	}
	out, err := strftime.Format(b.String(), t, strftime.WithUnixSeconds('s'))
	if err != nil {
		return "", fmt.Errorf("timestamp format %q: %w", format, err)
	}
	return out, nil
}

// CheckTimestampFormat reports whether format is one FormatTimestamp takes.
func CheckTimestampFormat(format string) error {
	_, err := FormatTimestamp(format, time.Unix(0, 0))
	return err
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
