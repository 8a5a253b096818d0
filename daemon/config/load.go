package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	File string
	Line int    // 0 when unknown
	Path string // "nodes[1].gossip"; "" for the whole file
	Msg  string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems is every problem found, in file order; it is an error.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

func (ps Problems) sorted() Problems {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Line != ps[j].Line {
			// Problems without a line (missing keys) go last.
			if ps[i].Line == 0 || ps[j].Line == 0 {
				return ps[j].Line == 0 && ps[i].Line != 0
			}
			return ps[i].Line < ps[j].Line
		}
		return ps[i].Path < ps[j].Path
	})
	return ps
}

// Load reads and decodes the file at path. It does not validate: call
// Validate. Decoding problems (syntax, unknown fields, wrong types) come
// back as Problems.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

var (
	reLine    = regexp.MustCompile(`^line (\d+): (.*)$`)
	reUnknown = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	reType    = regexp.MustCompile("^cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
)

// Parse decodes data; name is used in problem reports.
func Parse(data []byte, name string) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Problems{syntaxProblem(name, err)}
	}
	if len(doc.Content) == 0 {
		return nil, Problems{{File: name, Msg: "empty configuration (want at least \"version: 1\")"}}
	}
	c := Default()
	c.file = name
	c.lines = map[string]int{}
	c.undecoded = map[string]bool{}
	walkLines(doc.Content[0], "", c.lines)

	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(c)
	if err == nil {
		return c, nil
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return nil, Problems{syntaxProblem(name, err)}
	}
	byLine := map[int][]string{}
	for p, l := range c.lines {
		byLine[l] = append(byLine[l], p)
	}
	var ps Problems
	for _, msg := range te.Errors {
		p := Problem{File: name, Msg: msg}
		var onLine []string
		if m := reLine.FindStringSubmatch(msg); m != nil {
			p.Line, _ = strconv.Atoi(m[1])
			p.Msg = m[2]
			onLine = byLine[p.Line]
		}
		if m := reUnknown.FindStringSubmatch(p.Msg); m != nil {
			p.Msg = fmt.Sprintf("unknown field %q", m[1])
			// The decoder stops at the unknown key: of the keys on its
			// line with that name, the shallowest is it. Report its
			// parent.
			if k := shallowestKey(onLine, m[1]); k != "" {
				p.Path = strings.TrimSuffix(strings.TrimSuffix(k, m[1]), ".")
			}
		} else if m := reType.FindStringSubmatch(p.Msg); m != nil {
			p.Msg = fmt.Sprintf("want %s, got %s %q", goTypeName(m[3]), yamlTagName(m[1]), m[2])
			p.Path = deepest(onLine)
		} else {
			p.Path = deepest(onLine)
		}
		ps = append(ps, p)
		if p.Path != "" {
			c.undecoded[p.Path] = true
		}
	}
	return c, ps.sorted()
}

// shallowestKey is the shortest of paths whose last key is key.
func shallowestKey(paths []string, key string) string {
	best := ""
	for _, p := range paths {
		if (p == key || strings.HasSuffix(p, "."+key)) && (best == "" || len(p) < len(best)) {
			best = p
		}
	}
	return best
}

// deepest is the longest of paths (a value's error is about the innermost
// node on its line), the first in order among equals.
func deepest(paths []string) string {
	best := ""
	for _, p := range paths {
		if len(p) > len(best) || (len(p) == len(best) && p < best) {
			best = p
		}
	}
	return best
}

func syntaxProblem(name string, err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	p := Problem{File: name, Msg: msg}
	if m := reLine.FindStringSubmatch(msg); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
		p.Msg = m[2]
	}
	return p
}

func goTypeName(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	case t == "config.Duration":
		return "a duration"
	}
	return "a mapping"
}

func yamlTagName(tag string) string {
	switch tag {
	case "str":
		return "string"
	case "int":
		return "integer"
	case "seq":
		return "list"
	case "map":
		return "mapping"
	}
	return tag
}

// walkLines records the line of every mapping key and list item under path.
func walkLines(n *yaml.Node, path string, lines map[string]int) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			lines[p] = k.Line
			walkLines(v, p, lines)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = v.Line
			walkLines(v, p, lines)
		}
	}
}

// Line is the line of path (e.g. "nodes[0].fence[1]") in the file, or of
// its nearest ancestor present; 0 when unknown.
func (c *Config) Line(path string) int { return c.line(path) }

// LineOf is the line of path itself, and whether the file has it.
func (c *Config) LineOf(path string) (int, bool) {
	l, ok := c.lines[path]
	return l, ok
}

// line returns the line of path or of its nearest ancestor present.
func (c *Config) line(path string) int {
	for p := path; p != ""; {
		if l, ok := c.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}
