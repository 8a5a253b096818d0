package fenceapi

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/fenced/fenced/agents"
)

// Metadata is the document a fence agent prints for "-o metadata": the
// fence-agents dialect of the OCF resource-agent format. The same types write
// our agents' metadata and parse external agents' metadata.
type Metadata struct {
	XMLName   xml.Name  `xml:"resource-agent"`
	Name      string    `xml:"name,attr"`
	ShortDesc string    `xml:"shortdesc,attr"`
	Symlinks  []Symlink `xml:"symlink,omitempty"`
	LongDesc  string    `xml:"longdesc"`
	// VendorURL is always written, empty or not: fence-agents' schema
	// (metadata.rng) requires the element.
	VendorURL  string      `xml:"vendor-url"`
	Parameters []Parameter `xml:"parameters>parameter"`
	Actions    []Action    `xml:"actions>action"`
}

// Symlink is another name the same agent is installed under.
type Symlink struct {
	Name      string `xml:"name,attr"`
	ShortDesc string `xml:"shortdesc,attr"`
}

// Parameter is one agent parameter.
type Parameter struct {
	Name string `xml:"name,attr"`
	// Unique and Required are "0" or "1" in fence-agents output.
	Unique     string `xml:"unique,attr,omitempty"`
	Required   string `xml:"required,attr,omitempty"`
	Deprecated string `xml:"deprecated,attr,omitempty"`
	// Obsoletes names the deprecated parameter this one replaces.
	Obsoletes string     `xml:"obsoletes,attr,omitempty"`
	Getopt    *Getopt    `xml:"getopt,omitempty"`
	Content   Content    `xml:"content"`
	ShortDesc []LangText `xml:"shortdesc,omitempty"`
	LongDesc  []LangText `xml:"longdesc,omitempty"`
	Secret    bool       `xml:"-"`
}

// Getopt is the command-line form of a parameter ("-a, --ip=[ip]").
type Getopt struct {
	Mixed string `xml:"mixed,attr"`
}

// Content is a parameter's type and default.
type Content struct {
	// Type is "string", "boolean", "integer", "second" or "select".
	Type    string   `xml:"type,attr"`
	Default string   `xml:"default,attr,omitempty"`
	Options []Option `xml:"option,omitempty"`
}

// Option is one value of a "select" parameter.
type Option struct {
	Value string `xml:"value,attr"`
}

// LangText is a description in one language.
type LangText struct {
	Lang string `xml:"lang,attr,omitempty"`
	Text string `xml:",chardata"`
}

// Action is one supported action.
type Action struct {
	Name      string `xml:"name,attr"`
	Automatic string `xml:"automatic,attr,omitempty"`
	OnTarget  string `xml:"on_target,attr,omitempty"`
	Timeout   string `xml:"timeout,attr,omitempty"`
}

// IsRequired reports whether the parameter is marked required.
func (p Parameter) IsRequired() bool { return p.Required == "1" || p.Required == "true" }

// IsDeprecated reports whether the parameter is a deprecated alias.
func (p Parameter) IsDeprecated() bool { return p.Deprecated == "1" || p.Deprecated == "true" }

// Description returns the English short description, or the first one.
func (p Parameter) Description() string {
	for _, d := range p.ShortDesc {
		if d.Lang == "" || d.Lang == "en" {
			return strings.TrimSpace(d.Text)
		}
	}
	if len(p.ShortDesc) > 0 {
		return strings.TrimSpace(p.ShortDesc[0].Text)
	}
	return ""
}

// HasAction reports whether the metadata lists action name.
func (m *Metadata) HasAction(name string) bool {
	for _, a := range m.Actions {
		if a.Name == name {
			return true
		}
	}
	return false
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

// ParseMetadata parses an agent's metadata XML. Errors say what is wrong
// with the document; trailing text after the root element is ignored, as
// fence-agents sometimes print a newline or warnings after it.
func ParseMetadata(r io.Reader) (*Metadata, error) {
	var m Metadata
	dec := xml.NewDecoder(r)
	// fence-agents declare no encoding or "UTF-8"; accept any label by
	// passing bytes through, as the documents are ASCII in practice.
	dec.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("parse agent metadata: %w", err)
	}
	if m.Name == "" {
		return nil, fmt.Errorf("parse agent metadata: resource-agent has no name attribute")
	}
	for i, p := range m.Parameters {
		if p.Name == "" {
			return nil, fmt.Errorf("parse agent metadata: parameter %d has no name", i+1)
		}
	}
	for i, a := range m.Actions {
		if a.Name == "" {
			return nil, fmt.Errorf("parse agent metadata: action %d has no name", i+1)
		}
	}
	return &m, nil
}

// WriteTo writes m as an indented XML document.
func (m *Metadata) WriteTo(w io.Writer) (int64, error) {
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "\t")
	if err := enc.Encode(m); err != nil {
		return 0, fmt.Errorf("write agent metadata: %w", err)
	}
	buf.WriteByte('\n')
	n, err := w.Write(buf.Bytes())
	return int64(n), err
}

// Actions every agent run through Main supports, in fence-agents order.
var baseActions = []string{"on", "off", "reboot", "status", "monitor", "list", "metadata", "validate-all"}

// KindMetadata builds the metadata of a registered agent kind, with the
// parameters every FenceAgentAPI agent takes (action, plug and its aliases)
// added to the kind's own.
func KindMetadata(k *agents.Kind) *Metadata {
	m := &Metadata{
		Name:      "fenced-" + k.Name,
		ShortDesc: k.Description,
		LongDesc:  fmt.Sprintf("%s (fenced built-in agent %q, run with `fenced agent %s`).", k.Description, k.Name, k.Name),
		VendorURL: k.VendorURL,
	}
	m.Parameters = append(m.Parameters, Parameter{
		Name: "action", Unique: "0", Required: "1",
		Getopt:    &Getopt{Mixed: "-o, --action=[action]"},
		Content:   Content{Type: "string", Default: "reboot"},
		ShortDesc: []LangText{{Lang: "en", Text: "Fencing action"}},
	})
	for _, p := range k.Params {
		m.Parameters = append(m.Parameters, paramMetadata(p, p.Name, false))
		for _, a := range p.Aliases {
			alias := paramMetadata(p, a, true)
			m.Parameters = append(m.Parameters, alias)
		}
	}
	if _, ok := m.Parameter("plug"); !ok {
		plug := agents.Param{Name: "plug", Description: "Physical plug number on device, UUID or identification of machine", Type: "string", Aliases: []string{"port"}}
		m.Parameters = append(m.Parameters, paramMetadata(plug, "plug", false), paramMetadata(plug, "port", true))
	}
	if _, ok := m.Parameter("nodename"); !ok {
		m.Parameters = append(m.Parameters, Parameter{
			Name: "nodename", Unique: "0", Required: "0",
			Getopt:    &Getopt{Mixed: "-n, --nodename=[nodename]"},
			Content:   Content{Type: "string"},
			ShortDesc: []LangText{{Lang: "en", Text: "Name of the node to be fenced (used as plug when plug is not given)"}},
		})
	}
	for _, a := range baseActions {
		act := Action{Name: a}
		if a == "on" {
			act.Automatic = "0"
		}
		m.Actions = append(m.Actions, act)
	}
	return m
}

func paramMetadata(p agents.Param, name string, deprecated bool) Parameter {
	typ := p.Type
	if typ == "" {
		typ = "string"
	}
	mp := Parameter{
		Name:      name,
		Unique:    "0",
		Required:  boolAttr(p.Required && !deprecated),
		Content:   Content{Type: typ, Default: p.Default},
		ShortDesc: []LangText{{Lang: "en", Text: p.Description}},
		Secret:    p.Secret,
	}
	if deprecated {
		mp.Deprecated = "1"
	} else if len(p.Aliases) > 0 {
		mp.Obsoletes = p.Aliases[0]
	}
	flag := "--" + strings.ReplaceAll(name, "_", "-")
	if typ == "boolean" {
		mp.Getopt = &Getopt{Mixed: flag}
	} else {
		mp.Getopt = &Getopt{Mixed: fmt.Sprintf("%s=[%s]", flag, name)}
	}
	return mp
}

func boolAttr(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
