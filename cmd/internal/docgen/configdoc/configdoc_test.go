package configdoc

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/example.5 from the current generator")

// The types below are what the tests document: this file is parsed as the
// package's source, like daemon/config's files are for fenced.yaml(5).

// span is a duration written as "3s"; it decodes itself, so it is a leaf.
type span time.Duration

func (s *span) UnmarshalYAML(func(any) error) error { return nil }
func (s span) String() string                       { return time.Duration(s).String() }

// exampleConfig is the whole file.
type exampleConfig struct {
	// Name of the thing; see Limits for bounds.
	Name string `yaml:"name"`
	// Limits bound how much the thing may do.
	Limits exampleLimits `yaml:"limits"`
	Peers  []examplePeer `yaml:"peers"`
	// Pools by name.
	Pools         map[string]examplePool `yaml:"pools,omitempty"`
	Extra         *exampleExtra          `yaml:"extra,omitempty"`
	exampleInline `yaml:",inline"`
	Untagged      int
	Skipped       string `yaml:"-"`
	//lint:ignore U1000 an unexported field: the generator must leave it out
	hidden string
}

// exampleLimits holds bounds.
type exampleLimits struct {
	// Wait is how long to wait; Tries gives up earlier.
	//
	// A second paragraph, with a list:
	//   - one
	//   - two
	//
	// and code:
	//
	//	wait: 3s
	Wait  span `yaml:"wait"`
	Tries int  `yaml:"tries"` // Tries before giving up.
	// Strict refuses ".dot" lines and back\slashes — and Unicode.
	Strict bool     `yaml:"strict"`
	Tags   []string `yaml:"tags"`
	Labels map[string]string
	// Routes by name, each a list of waits.
	Routes map[string][]span `yaml:"routes"`
}

// examplePeer is one peer of the thing.
type examplePeer struct {
	// Addr is host:port.
	Addr string `yaml:"addr"`
}

// examplePool is a pool; its Size is fixed.
type examplePool struct {
	Size int `yaml:"size"`
}

// exampleExtra is optional.
type exampleExtra struct {
	On bool `yaml:"on"`
}

type exampleInline struct {
	// Flat sits at the top, though declared in an inlined struct.
	Flat string `yaml:"flat"`
}

func exampleDefaults() *exampleConfig {
	return &exampleConfig{
		Name:   "thing",
		Limits: exampleLimits{Wait: span(3 * time.Second), Tags: []string{"a", "b"}, Labels: map[string]string{"z": "1", "a": "2"}},
	}
}

func examplePage(t *testing.T) *Page {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return &Page{
		Name: "example.yaml", Section: "5", Title: "an example", Source: "example 1.0", Manual: "example manual",
		Date:        time.Unix(1700000000, 0),
		Synopsis:    "/etc/example.yaml",
		Description: []string{"First paragraph.", "Second, with --flags."},
		Files:       [][2]string{{"/etc/example.yaml", "The file."}},
		SeeAlso:     []string{"example(8)", "other(1)"},
		Root:        exampleDefaults(),
		Dir:         func(string) (string, error) { return dir, nil },
	}
}

// The key tree follows the types: yaml names (tag, else the lowercased
// field name), inline fields at their parent's level, skipped and
// unexported fields absent; defaults from the root value, collection entries
// with none; comments from the source with Go names read as keys, a
// field without one falling back to its type's.
func TestKeys(t *testing.T) {
	keys, err := examplePage(t).Keys()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*Key{}
	var order []string
	var walk func([]*Key)
	walk = func(ks []*Key) {
		for _, k := range ks {
			got[k.Path] = k
			order = append(order, k.Path)
			walk(k.Children)
		}
	}
	walk(keys)
	want := []string{
		"name", "limits", "limits.wait", "limits.tries", "limits.strict", "limits.tags", "limits.labels", "limits.routes",
		"peers", "peers[].addr", "pools", "pools.NAME.size", "extra", "extra.on", "flat", "untagged",
	}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Fatalf("keys\n got %v\nwant %v", order, want)
	}
	cases := []struct{ path, typ, def, doc string }{
		{"name", "string", "thing", "name of the thing; see limits for bounds."},
		{"limits", "mapping", "", "limits bound how much the thing may do."},
		{"limits.wait", "span", "3s", "wait is how long to wait; tries gives up earlier.\n\nA second paragraph, with a list:\n\nand code:"},
		{"limits.tries", "integer", "", "tries before giving up."},
		{"limits.strict", "boolean", "false", `strict refuses ".dot" lines and back\slashes — and Unicode.`},
		{"limits.tags", "list of strings", "[a, b]", ""},
		{"limits.labels", "mapping of strings to strings", "{a: 2, z: 1}", ""},
		{"limits.routes", "mapping of strings to lists of spans", "", "routes by name, each a list of waits."},
		{"peers", "list of mappings", "", "Each entry is one peer of the thing."},
		{"peers[].addr", "string", "", "addr is host:port."},
		{"pools", "mapping of names to mappings", "", "pools by name."},
		{"pools.NAME.size", "integer", "", ""},
		{"extra", "mapping", "", "extra is optional."},
		{"extra.on", "boolean", "false", ""},
		{"flat", "string", "", "flat sits at the top, though declared in an inlined struct."},
		{"untagged", "integer", "", ""},
	}
	for _, c := range cases {
		k := got[c.path]
		if k.Type != c.typ || k.Default != c.def || k.Doc != c.doc {
			t.Errorf("%s: type %q default %q doc %q\nwant type %q default %q doc %q", c.path, k.Type, k.Default, k.Doc, c.typ, c.def, c.doc)
		}
	}
	undoc := Undocumented(keys)
	if strings.Join(undoc, " ") != "limits.tags limits.labels pools.NAME.size extra.on untagged" {
		t.Errorf("undocumented: %v", undoc)
	}
}

// The rendered page is stable (golden file, two runs alike) and valid roff:
// man reports no warnings for it.
func TestGenerateGolden(t *testing.T) {
	p := examplePage(t)
	a, err := p.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two runs differ")
	}
	golden := filepath.Join("testdata", "example.5")
	if *update {
		if err := os.WriteFile(golden, a, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, want) {
		t.Errorf("page differs from %s (go test -update to accept):\n%s", golden, a)
	}
	for _, s := range []string{
		".SS \"limits\"\n(\\fImapping\\fR) \\fBlimits\\fR bound how much",
		`\fBlimits.wait\fR (\fIspan\fR, default \fB3s\fR)`,
		`\fBpools.\fINAME\fB.size\fR (\fIinteger\fR)`,
		`back\eslashes \[u2014] and Unicode`,
		`with \-\-flags.`,
		".nf\nwait: 3s\n.fi\n",
		".IP \\(bu 4\none\n",
		`\fBexample\fR(8),`,
	} {
		if !bytes.Contains(a, []byte(s)) {
			t.Errorf("page lacks %q", s)
		}
	}
	for _, line := range strings.Split(string(a), "\n") {
		if strings.HasPrefix(line, ".") {
			macro, _, _ := strings.Cut(line, " ")
			switch macro {
			case ".TH", ".nh", ".ad", ".SH", ".SS", ".PP", ".TP", ".IP", ".RS", ".RE", ".nf", ".fi":
			default:
				t.Errorf("unexpected request line %q", line)
			}
		}
		if strings.ContainsFunc(line, func(r rune) bool { return r > 0x7e }) {
			t.Errorf("non-ASCII byte left in %q", line)
		}
	}
	if _, err := exec.LookPath("man"); err == nil {
		f := filepath.Join(t.TempDir(), "example.yaml.5")
		os.WriteFile(f, a, 0o644)
		cmd := exec.Command("man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", f)
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=80")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man --warnings: %v\n%s", err, stderr.String())
		}
	}
}

// A field the binary has but the source lacks means the source is not the
// one the value was built from: refuse rather than print an undocumented
// page.
func TestSourceMismatch(t *testing.T) {
	dir := t.TempDir()
	src := "package configdoc\n\n// exampleConfig is old.\ntype exampleConfig struct {\n\tName string\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "old.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	p := examplePage(t)
	p.Dir = func(string) (string, error) { return dir, nil }
	if _, err := p.Generate(); err == nil || !strings.Contains(err.Error(), "exampleConfig.Limits: not in the source") {
		t.Errorf("stale source: %v", err)
	}
	p.Dir = func(string) (string, error) { return t.TempDir(), nil }
	if _, err := p.Generate(); err == nil || !strings.Contains(err.Error(), "no Go source") {
		t.Errorf("empty source dir: %v", err)
	}
	p = examplePage(t)
	p.Root = 3
	if _, err := p.Generate(); err == nil || !strings.Contains(err.Error(), "want a struct") {
		t.Errorf("root not a struct: %v", err)
	}
	p = examplePage(t)
	p.SeeAlso = []string{"nosection"}
	if _, err := p.Generate(); err == nil || !strings.Contains(err.Error(), "NAME(SECTION)") {
		t.Errorf("bad see-also: %v", err)
	}
}
