package config

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenced/fenced/agents"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

type nopAgent struct{}

func (nopAgent) Off(context.Context) error                    { return nil }
func (nopAgent) On(context.Context) error                     { return nil }
func (nopAgent) Reboot(context.Context) error                 { return nil }
func (nopAgent) Status(context.Context) (agents.State, error) { return agents.StateOn, nil }

func testRegistry() *agents.Registry {
	reg := agents.NewRegistry()
	reg.Register(agents.Kind{
		Name: "fake",
		Params: []agents.Param{
			{Name: "ip", Required: true},
			{Name: "password", Secret: true},
		},
		New: func(agents.Params, *slog.Logger) (agents.Agent, error) { return nopAgent{}, nil },
	})
	return reg
}

// TestFiles loads every file in testdata/ and compares the problems found
// with the golden file beside it (NAME.golden; regenerate with -update).
func TestFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			var got string
			cfg, err := Load(f)
			var ps Problems
			if err != nil && !errors.As(err, &ps) {
				t.Fatalf("Load: %v", err)
			}
			if cfg != nil {
				ps = append(ps, cfg.Validate(testRegistry())...)
			}
			if len(ps) == 0 {
				got = "ok\n"
			} else {
				got = ps.Error() + "\n"
			}
			good := strings.HasPrefix(filepath.Base(f), "good-")
			if good != (got == "ok\n") {
				t.Errorf("%s: good=%v but got:\n%s", f, good, got)
			}
			for _, p := range ps {
				if !strings.HasPrefix(p.String(), f+":") {
					t.Errorf("problem does not name the file: %q", p)
				}
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("golden: %v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("problems differ from %s:\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

// TestSample loads the annotated sample shipped in etc/.
func TestSample(t *testing.T) {
	cfg, err := Load("../../etc/fenced.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg := agents.NewRegistry()
	for _, name := range []string{"ipmi", "redfish", "pdu"} {
		reg.Register(agents.Kind{Name: name, New: func(agents.Params, *slog.Logger) (agents.Agent, error) { return nopAgent{}, nil }})
	}
	if ps := cfg.Validate(reg); ps != nil {
		t.Fatalf("sample config invalid:\n%v", ps)
	}
	if cfg.Majority() != 2 || len(cfg.Nodes) != 3 {
		t.Errorf("majority %d of %d", cfg.Majority(), len(cfg.Nodes))
	}
	if _, err := cfg.SelectNode("node2", ""); err != nil {
		t.Error(err)
	}
}

func TestTimingRelations(t *testing.T) {
	base := func() *Config {
		c, err := Load("testdata/good-minimal.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ms := func(n int) Duration { return Duration(int64(n) * 1e6) }
	cases := []struct {
		name string
		mod  func(*Timing)
		want string // substring of the problem, "" = valid
	}{
		{"defaults", func(*Timing) {}, ""},
		{"heartbeat equals lease", func(t *Timing) { t.Heartbeat = t.Lease }, "timing.heartbeat"},
		{"grace equals lease", func(t *Timing) { t.Grace = t.Lease }, "timing.grace"},
		{"margin below drift bound", func(t *Timing) { t.Lease, t.Margin = ms(2000), ms(99) }, "too small for clock drift"},
		{"margin at drift bound", func(t *Timing) { t.Lease, t.Margin, t.Heartbeat, t.Grace = ms(2000), ms(100), ms(200), ms(1000) }, ""},
		{"margin half the lease", func(t *Timing) { t.Margin = t.Lease / 2 }, "less than half"},
		{"two heartbeats do not fit", func(t *Timing) { t.Lease, t.Margin, t.Heartbeat, t.Grace = ms(1000), ms(100), ms(500), ms(500) }, "two heartbeats"},
		{"zero fence timeout", func(t *Timing) { t.FenceTimeout = 0 }, "timing.fence_timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mod(&c.Timing)
			ps := c.Validate(nil)
			if tc.want == "" {
				if ps != nil {
					t.Fatalf("unexpected problems: %v", ps)
				}
				return
			}
			if !strings.Contains(ps.Error(), tc.want) {
				t.Fatalf("want a problem containing %q, got %v", tc.want, ps)
			}
		})
	}
}

func TestSelectNode(t *testing.T) {
	c, err := Load("testdata/good-minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.SelectNode("", "b"); err != nil || n.Name != "b" {
		t.Fatalf("hostname fallback: %v %v", n, err)
	}
	_, err = c.SelectNode("zz", "")
	if err == nil || !strings.Contains(err.Error(), `unknown node name "zz" (from --node; configured: a, b, c)`) {
		t.Fatalf("got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if c != nil {
			_ = c.Validate(testRegistry())
		}
		_ = err
	})
}
