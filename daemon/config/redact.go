package config

import (
	"bytes"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Redacted replaces every secret in a configuration shown to someone
// else (a diagnostics bundle).
const Redacted = "<redacted>"

// paramMaps are the keys whose mappings hold parameters, where SecretParam
// decides what is a secret: a device's and a fence level's params, a
// resource's params and node_params, an alert's params.
var paramMaps = map[string]bool{"params": true, "node_params": true}

// RedactYAML returns a configuration file with the value of every secret
// parameter (SecretParam: password, community, hexadecimal_kg, … and their
// _file and _script forms) replaced by Redacted, wherever a params or
// node_params mapping holds it; comments and layout are kept. The rule is
// the field's meaning, not its value: a secret is redacted even when it is
// unlike any known one. The gossip key is never in the file (key_file
// names it), so its path stays.
func RedactYAML(data []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	if doc.Kind == 0 {
		return data, nil // empty file
	}
	redactNode(&doc, false)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	return b.Bytes(), nil
}

// redactNode walks n; inParams: n is the value of a params mapping.
func redactNode(n *yaml.Node, inParams bool) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			redactNode(c, false)
		}
	case yaml.AliasNode:
		// An alias repeats an anchored node, which is redacted where it
		// is defined; one in a params mapping is replaced outright.
		if inParams {
			*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if inParams && (SecretParam(k.Value) || k.Kind != yaml.ScalarNode) {
				*v = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Redacted, Anchor: v.Anchor, Line: v.Line, Column: v.Column}
				continue
			}
			redactNode(v, paramMaps[strings.TrimSpace(k.Value)])
		}
	}
}

// Secrets are the secret values this configuration holds inline (a
// secret parameter's value), the files that hold others (a secret
// parameter's _file form, and the gossip key) and the commands that print
// the rest (its _script form; not run here), for a last scrub of what is
// shown to someone else.
func (c *Config) Secrets() (values, files, scripts []string) {
	add := func(p map[string]string) {
		for k, v := range p {
			if v == "" || !SecretParam(k) {
				continue
			}
			switch {
			case strings.HasSuffix(k, "_file"):
				files = append(files, v)
			case strings.HasSuffix(k, "_script"):
				scripts = append(scripts, v)
			default:
				values = append(values, v)
			}
		}
	}
	for _, d := range c.Devices {
		add(d.Params)
	}
	for _, n := range c.Nodes {
		for _, l := range n.Fence {
			for _, r := range l.Devices {
				add(r.Params)
			}
		}
	}
	for _, r := range c.Resources {
		add(r.Params)
		add(r.NodeParams)
	}
	for _, a := range c.Alerts {
		add(a.Params)
	}
	if c.Gossip.KeyFile != "" {
		files = append(files, c.Gossip.KeyFile)
	}
	return values, files, scripts
}
