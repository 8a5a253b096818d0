package resource

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Metadata is what an OCF resource agent prints for its meta-data action
// (the OCF resource agent API's ra-api-1.dtd): its parameters and the
// actions it supports with their advised timeouts and intervals.
type Metadata struct {
	XMLName    xml.Name    `xml:"resource-agent"`
	Name       string      `xml:"name,attr"`
	Version    string      `xml:"version,attr"`
	Parameters []Parameter `xml:"parameters>parameter"`
	Actions    []Action    `xml:"actions>action"`
}

// Parameter is one instance parameter of an agent.
type Parameter struct {
	Name string `xml:"name,attr"`
	// Required and Unique are "1" or "true" when set.
	Required   string  `xml:"required,attr"`
	Unique     string  `xml:"unique,attr"`
	Deprecated string  `xml:"deprecated,attr"`
	Content    Content `xml:"content"`
	// DeprecatedElem is the OCF 1.1 form of deprecation, an element.
	DeprecatedElem *struct{} `xml:"deprecated"`
}

// Content is a parameter's type, default and, for "select", its values.
type Content struct {
	Type    string   `xml:"type,attr"`
	Default string   `xml:"default,attr"`
	Options []Option `xml:"option"`
}

// Option is one allowed value of a "select" parameter.
type Option struct {
	Value string `xml:"value,attr"`
}

// Action is one action the agent supports.
type Action struct {
	Name     string `xml:"name,attr"`
	Timeout  string `xml:"timeout,attr"`
	Interval string `xml:"interval,attr"`
	Depth    string `xml:"depth,attr"`
}

// IsRequired reports whether the parameter must be given.
func (p Parameter) IsRequired() bool { return isTrue(p.Required) }

// IsDeprecated reports whether the parameter is deprecated.
func (p Parameter) IsDeprecated() bool { return isTrue(p.Deprecated) || p.DeprecatedElem != nil }

func isTrue(s string) bool {
	return s == "1" || strings.EqualFold(s, "true") || strings.EqualFold(s, "yes")
}

// Parameter returns the parameter called name.
func (m *Metadata) Parameter(name string) (Parameter, bool) {
	for _, p := range m.Parameters {
		if p.Name == name {
			return p, true
		}
	}
	return Parameter{}, false
}

// Action returns the first action called name (monitor may be listed once
// per depth or role; the first is the plain one).
func (m *Metadata) Action(name string) (Action, bool) {
	for _, a := range m.Actions {
		if a.Name == name {
			return a, true
		}
	}
	return Action{}, false
}

// Advised returns the agent's advised timeout and interval for action, 0
// when it gives none or one that does not parse.
func (m *Metadata) Advised(action string) (timeout, interval time.Duration) {
	a, ok := m.Action(action)
	if !ok {
		return 0, 0
	}
	timeout, _ = parseOCFDuration(a.Timeout)
	interval, _ = parseOCFDuration(a.Interval)
	return timeout, interval
}

// ParseMetadata parses an agent's meta-data document. Errors say what is
// wrong with it.
func ParseMetadata(r io.Reader) (*Metadata, error) {
	var m Metadata
	dec := xml.NewDecoder(r)
	// Agents declare "1.0" XML with no or a UTF-8 encoding; pass any label.
	dec.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("parse meta-data: %w", err)
	}
	if m.Name == "" {
		return nil, errors.New("parse meta-data: resource-agent has no name attribute")
	}
	for i, p := range m.Parameters {
		if p.Name == "" {
			return nil, fmt.Errorf("parse meta-data: parameter %d has no name", i+1)
		}
	}
	for i, a := range m.Actions {
		if a.Name == "" {
			return nil, fmt.Errorf("parse meta-data: action %d has no name", i+1)
		}
	}
	return &m, nil
}

// parseMetadataBytes is ParseMetadata over the agent's output, skipping
// anything printed before the document (some agents log a line first).
func parseMetadataBytes(b []byte) (*Metadata, error) {
	if i := bytes.Index(b, []byte("<")); i > 0 {
		b = b[i:]
	}
	return ParseMetadata(bytes.NewReader(b))
}

// parseOCFDuration reads the durations agents and Pacemaker write: "20s",
// "20" (seconds), "500ms", "2m", "2min", "1h".
func parseOCFDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "" {
		return 0, errors.New("empty duration")
	}
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	n, err := strconv.ParseFloat(s[:i], 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	unit := map[string]time.Duration{
		"": time.Second, "s": time.Second, "sec": time.Second, "secs": time.Second,
		"ms": time.Millisecond, "msec": time.Millisecond,
		"m": time.Minute, "min": time.Minute, "mins": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hrs": time.Hour,
	}
	u, ok := unit[strings.TrimSpace(s[i:])]
	if !ok {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	return time.Duration(n * float64(u)), nil
}

// checkParams checks the configured parameters against the meta-data:
// every name must be declared, every required one given (or defaulted by
// the agent), and integers, booleans and selections well-formed. agent
// names the agent in messages ("heartbeat:IPaddr2").
func checkParams(agent string, m *Metadata, params map[string]string) []paramProblem {
	var ps []paramProblem
	for _, name := range sortedKeys(params) {
		p, ok := m.Parameter(name)
		if !ok {
			ps = append(ps, paramProblem{name, fmt.Sprintf("unknown to %s (its meta-data declares: %s)", agent, declared(m))})
			continue
		}
		v := params[name]
		if secretParam.MatchString(name) {
			v = "***" // never echo a secret into an error
		}
		if msg := checkValue(p, params[name], v); msg != "" {
			ps = append(ps, paramProblem{name, msg})
		}
	}
	for _, p := range m.Parameters {
		if _, given := params[p.Name]; given || !p.IsRequired() || p.IsDeprecated() {
			continue
		}
		ps = append(ps, paramProblem{"", fmt.Sprintf("%s: required by %s", p.Name, agent)})
	}
	return ps
}

type paramProblem struct {
	param string // "" for the params mapping as a whole
	msg   string
}

func declared(m *Metadata) string {
	names := make([]string, 0, len(m.Parameters))
	for _, p := range m.Parameters {
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// checkValue checks v against p's type; shown is what messages quote.
func checkValue(p Parameter, v, shown string) string {
	switch strings.ToLower(p.Content.Type) {
	case "integer":
		if _, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
			return fmt.Sprintf("%q is not an integer", shown)
		}
	case "boolean":
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "0", "yes", "no", "true", "false", "on", "off", "y", "n":
		default:
			return fmt.Sprintf("%q is not a boolean (yes/no, true/false, 1/0)", shown)
		}
	case "select":
		if len(p.Content.Options) == 0 {
			return ""
		}
		var vals []string
		for _, o := range p.Content.Options {
			if o.Value == v {
				return ""
			}
			vals = append(vals, o.Value)
		}
		return fmt.Sprintf("%q is not one of %s", shown, strings.Join(vals, ", "))
	}
	return ""
}
