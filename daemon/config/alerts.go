package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fenced/fenced/daemon/alerts"
)

// Alert is an alert agent: a program run on the events it selects, once per
// recipient, with Pacemaker's alert environment (CRM_alert_kind, _node,
// _desc, _task, _rc, _timestamp, _recipient, …) and its params as further
// environment variables, so Pacemaker's sample agents
// (/usr/share/pacemaker/alerts/*.sample) run unmodified. Each node runs its
// own alerts for the events it sees; alerts are node-local (not part of the
// cluster's configuration fingerprint) and change with a reload.
type Alert struct {
	// Name identifies the alert in logs and metrics (Pacemaker's alert id).
	Name string `yaml:"name"`
	// Path is the agent program, an absolute path, e.g.
	// /usr/share/pacemaker/alerts/alert_file.sh.sample.
	Path string `yaml:"path"`
	// Timeout kills a run that takes longer, with every process it
	// started; 0 = 30s (Pacemaker's default), else 100ms to 10m.
	Timeout Duration `yaml:"timeout,omitempty"`
	// TimestampFormat is the format of CRM_alert_timestamp, as date(1)'s
	// (%N nanoseconds, %3N milliseconds, %06N microseconds); empty =
	// "%H:%M:%S.%06N" (Pacemaker's default).
	TimestampFormat string `yaml:"timestamp_format,omitempty"`
	// Params are passed to the agent as environment variables (Pacemaker's
	// instance attributes), e.g. debug_exec_order, email_sender,
	// trap_community; PATH replaces the default search path. Names starting
	// with CRM_ or FENCED_ are the interface's own.
	Params map[string]string `yaml:"params,omitempty"`
	// Events selects what runs the agent: fence (started, succeeded,
	// failed), takeover (blocked, unblocked), primary (changed), device
	// (health changed), config (mismatch, match), quorum (lost, regained),
	// self-fence. Empty = all.
	Events []string `yaml:"events,omitempty"`
	// Recipients: the agent runs once per recipient, with
	// CRM_alert_recipient set to its value; with none, once without it.
	Recipients []AlertRecipient `yaml:"recipients,omitempty"`
}

// AlertRecipient is one destination of an alert: a file, an address, a
// host — whatever the agent takes.
type AlertRecipient struct {
	// Value is passed as CRM_alert_recipient.
	Value string `yaml:"value"`
	// Timeout overrides the alert's timeout for this recipient.
	Timeout Duration `yaml:"timeout,omitempty"`
	// TimestampFormat overrides the alert's timestamp_format.
	TimestampFormat string `yaml:"timestamp_format,omitempty"`
}

// Bounds of an alert's timeout.
const (
	MinAlertTimeout = 100 * time.Millisecond
	MaxAlertTimeout = 10 * time.Minute
	maxAlerts       = 32
	maxRecipients   = 32
)

// AlertAgents returns the alerts in the form package alerts runs them.
func (c *Config) AlertAgents() []alerts.Agent {
	out := make([]alerts.Agent, 0, len(c.Alerts))
	for _, a := range c.Alerts {
		ag := alerts.Agent{Name: a.Name, Path: a.Path, Timeout: a.Timeout.D(), TimestampFormat: a.TimestampFormat,
			Params: a.Params, Groups: a.Events}
		for _, r := range a.Recipients {
			ag.Recipients = append(ag.Recipients, alerts.Recipient{Value: r.Value, Timeout: r.Timeout.D(), TimestampFormat: r.TimestampFormat})
		}
		out = append(out, ag)
	}
	return out
}

// alerts checks the alerts section.
func (v *validator) alerts() {
	c := v.c
	if len(c.Alerts) > maxAlerts {
		v.add("alerts", "%d alerts: at most %d", len(c.Alerts), maxAlerts)
	}
	names := map[string]string{}
	for i, a := range c.Alerts {
		p := fmt.Sprintf("alerts[%d]", i)
		switch {
		case a.Name == "":
			v.add(p+".name", "required")
		case !reName.MatchString(a.Name):
			v.add(p+".name", "%q: use letters, digits, '.', '_' and '-'", a.Name)
		case names[a.Name] != "":
			v.add(p+".name", "duplicate alert name %q (also %s)", a.Name, names[a.Name])
		default:
			names[a.Name] = p
		}
		if a.Path == "" {
			v.add(p+".path", "required: the alert agent program")
		} else if !filepath.IsAbs(a.Path) {
			v.add(p+".path", "%q must be an absolute path", a.Path)
		}
		v.alertTimeout(p+".timeout", a.Timeout)
		v.timestampFormat(p+".timestamp_format", a.TimestampFormat)
		for _, name := range sortedKeys(a.Params) {
			pp := p + ".params." + name
			switch {
			case !reEnvName.MatchString(name):
				v.add(pp, "%q is not a valid environment variable name (letters, digits, '_')", name)
			case strings.HasPrefix(name, "CRM_") || strings.HasPrefix(name, "FENCED_"):
				v.add(pp, "%q: names starting with CRM_ or FENCED_ are set by fenced", name)
			}
			if strings.ContainsRune(a.Params[name], 0) {
				v.add(pp, "value contains a NUL byte")
			}
		}
		for j, e := range a.Events {
			if !slices.Contains(alerts.Groups, e) {
				v.add(fmt.Sprintf("%s.events[%d]", p, j), "%q: want one of %s", e, strings.Join(alerts.Groups, ", "))
			}
		}
		if len(a.Recipients) > maxRecipients {
			v.add(p+".recipients", "%d recipients: at most %d", len(a.Recipients), maxRecipients)
		}
		for j, r := range a.Recipients {
			rp := fmt.Sprintf("%s.recipients[%d]", p, j)
			if r.Value == "" {
				v.add(rp+".value", "required")
			} else if strings.ContainsRune(r.Value, 0) {
				v.add(rp+".value", "contains a NUL byte")
			}
			v.alertTimeout(rp+".timeout", r.Timeout)
			v.timestampFormat(rp+".timestamp_format", r.TimestampFormat)
		}
	}
}

func (v *validator) alertTimeout(path string, d Duration) {
	if t := d.D(); t != 0 && (t < MinAlertTimeout || t > MaxAlertTimeout) {
		v.add(path, "%s: want 0 (%s) or %s to %s", t, alerts.DefaultTimeout, MinAlertTimeout, MaxAlertTimeout)
	}
}

func (v *validator) timestampFormat(path, f string) {
	if f == "" {
		return
	}
	if err := alerts.CheckTimestampFormat(f); err != nil {
		v.add(path, "%v", err)
	}
}
