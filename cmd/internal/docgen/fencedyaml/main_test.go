package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fenced/fenced/agents"
	_ "github.com/fenced/fenced/agents/ipmi"
	_ "github.com/fenced/fenced/agents/redfish"
	"github.com/fenced/fenced/cmd/internal/docgen/configdoc"
	"github.com/fenced/fenced/daemon/config"
)

// keyIndex maps every documented path to its key.
func keyIndex(t *testing.T) map[string]*configdoc.Key {
	t.Helper()
	p, err := Page("v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := p.Keys()
	if err != nil {
		t.Fatal(err)
	}
	idx := map[string]*configdoc.Key{}
	var walk func([]*configdoc.Key)
	walk = func(ks []*configdoc.Key) {
		for _, k := range ks {
			idx[k.Path] = k
			walk(k.Children)
		}
	}
	walk(keys)
	if u := configdoc.Undocumented(keys); len(u) > 0 {
		t.Logf("keys without a doc comment in daemon/config (the page shows their type and default only): %s", strings.Join(u, ", "))
	}
	return idx
}

// Every field the decoder knows is a key of the page: the yaml names of all
// config structs, found here by a walk of their types of its own.
func TestEveryConfigFieldDocumented(t *testing.T) {
	idx := keyIndex(t)
	last := map[string]bool{}
	for p := range idx {
		last[p[strings.LastIndexAny(p, ".]")+1:]] = true
	}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for rt.Kind() == reflect.Pointer || rt.Kind() == reflect.Slice || rt.Kind() == reflect.Map {
			rt = rt.Elem()
		}
		if rt.Kind() != reflect.Struct || seen[rt] {
			return
		}
		// A type that decodes itself from a scalar is one key.
		for _, m := range []string{"UnmarshalYAML", "UnmarshalText"} {
			if _, ok := reflect.PointerTo(rt).MethodByName(m); ok {
				return
			}
		}
		seen[rt] = true
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if !last[name] {
				t.Errorf("config field %s.%s (yaml %q) is not in fenced.yaml(5)", rt.Name(), f.Name, name)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(config.Config{}))
	if len(seen) < 10 {
		t.Fatalf("walked only %d config structs", len(seen))
	}
}

// The defaults shown are config.Default()'s, as the YAML encoder writes
// them; and every key of the shipped sample configuration is documented.
func TestDefaultsAndSample(t *testing.T) {
	idx := keyIndex(t)
	out, err := yaml.Marshal(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	var def yaml.Node
	if err := yaml.Unmarshal(out, &def); err != nil {
		t.Fatal(err)
	}
	checked := 0
	scalars(def.Content[0], "", func(path, value string) {
		k, ok := idx[path]
		if !ok {
			t.Errorf("default %s: %s is not a key of the page", path, value)
			return
		}
		if value == "" || value == "0" || value == "0s" || value == "[]" || value == "{}" {
			return
		}
		checked++
		if k.Default != value {
			t.Errorf("%s: page shows default %q, config.Default() has %q", path, k.Default, value)
		}
	})
	if checked < 8 {
		t.Errorf("only %d non-empty defaults compared", checked)
	}

	sample, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "etc", "fenced.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(sample, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	paths(doc.Content[0], "", idx, func(path string) {
		n++
		if _, ok := idx[path]; !ok {
			t.Errorf("etc/fenced.yaml uses %s, which fenced.yaml(5) does not document", path)
		}
	})
	if n < 20 {
		t.Errorf("only %d keys found in the sample", n)
	}
}

// scalars calls f with the path and value of every scalar under n.
func scalars(n *yaml.Node, path string, f func(path, value string)) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			scalars(n.Content[i+1], join(path, n.Content[i].Value), f)
		}
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			f(path, "[]")
		}
	case yaml.ScalarNode:
		f(path, n.Value)
	}
}

// paths calls f with the page's form of every key in n: list entries as
// [], the entries of a mapping of names as NAME.
func paths(n *yaml.Node, path string, idx map[string]*configdoc.Key, f func(string)) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, ok := idx[path]
			switch {
			case ok && k.Type == "mapping of names to mappings":
				paths(n.Content[i+1], join(path, "NAME"), idx, f)
			case ok && strings.HasPrefix(k.Type, "mapping of "):
				// a mapping of free keys (params): nothing to document
			default:
				p := join(path, n.Content[i].Value)
				f(p)
				paths(n.Content[i+1], p, idx, f)
			}
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			paths(c, path+"[]", idx, f)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// The page is generated the same twice (the packaging test compares the
// shipped one with a regeneration byte for byte) and carries its version
// and SOURCE_DATE_EPOCH's month.
func TestGenerate(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	dir := t.TempDir()
	var stderr bytes.Buffer
	if err := run([]string{"--version", "v1.2.3", "--out", dir}, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	a, err := os.ReadFile(filepath.Join(dir, "fenced.yaml.5"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := Page("v1.2.3")
	b, err := p.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two generations differ")
	}
	if !bytes.HasPrefix(a, []byte(`.TH "FENCED.YAML" "5" "Nov 2023" "fenced v1.2.3" "fenced manual"`)) {
		t.Errorf("header: %.80q", a)
	}
	for _, key := range []string{"timing.lease", "gossip.key_file", `devices.\fINAME\fB.agent`, "nodes[].fence[].devices[].plug"} {
		if !regexp.MustCompile(`(?m)^\\fB` + regexp.QuoteMeta(key) + `\\fR`).Match(a) {
			t.Errorf("page has no entry for %s", key)
		}
	}
	if err := run([]string{"--out", dir}, &stderr); err == nil {
		t.Error("no --version accepted")
	}
	t.Setenv("SOURCE_DATE_EPOCH", "soon")
	if err := run([]string{"--version", "v1", "--out", dir}, &stderr); err == nil || !strings.Contains(fmt.Sprint(err), "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: %v", err)
	}
}

// The page speaks the file's language: it names keys, never the Go names
// or source files behind them ("See DeviceMonitorInterval" leaked once),
// and has the sections a man page is looked up by.
func TestNoGoNames(t *testing.T) {
	p, _ := Page("v1.2.3")
	b, err := p.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b`), // CamelCase: a Go name
		regexp.MustCompile(`\b\w+\.go\b`),                         // a source file
	} {
		if m := re.FindAll(b, -1); len(m) > 0 {
			t.Errorf("the page names Go code: %q", m)
		}
	}
	for _, sh := range []string{".SH EXAMPLES\n", ".SH FILES\n", ".SH SEE ALSO\n"} {
		if !bytes.Contains(b, []byte(sh)) {
			t.Errorf("the page has no %q", strings.TrimSpace(sh))
		}
	}
}

// Every example file of the page is valid, as fenced validate --offline
// checks it.
func TestExamplesValid(t *testing.T) {
	for i, e := range Examples {
		cfg, err := config.Parse([]byte(e.Code), fmt.Sprintf("example-%d.yaml", i+1))
		if err != nil {
			t.Errorf("example %d: %v", i+1, err)
			continue
		}
		if ps := cfg.ValidateOffline(agents.Default); len(ps) > 0 {
			t.Errorf("example %d:\n%v", i+1, ps)
		}
	}
}
