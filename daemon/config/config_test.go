package config

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		// Bounds: sums of these must not overflow, and absurd values are
		// refused rather than "valid".
		{"overflowing heartbeat×2 and lease+margin", func(t *Timing) {
			t.Heartbeat, t.Lease, t.Margin = Duration(1500000*time.Hour), Duration(2562047*time.Hour), Duration(500000*time.Hour)
		}, "timing.lease: 2562047h0m0s is above the maximum 10m0s"},
		{"lease at the maximum", func(t *Timing) {
			t.Lease, t.Margin, t.Heartbeat = Duration(10*time.Minute), Duration(time.Minute), Duration(time.Minute)
		}, ""},
		{"lease above the maximum", func(t *Timing) { t.Lease, t.Margin = Duration(10*time.Minute+1), Duration(time.Minute) }, "timing.lease"},
		{"lease at the minimum", func(t *Timing) { t.Lease, t.Margin, t.Heartbeat, t.Grace = ms(500), ms(25), ms(200), ms(400) }, ""},
		{"lease below the minimum", func(t *Timing) { t.Lease, t.Heartbeat, t.Margin = 3, 1, 1 }, "timing.lease: 3ns is below the minimum 500ms"},
		{"heartbeat below the minimum", func(t *Timing) { t.Heartbeat = ms(49) }, "timing.heartbeat: 49ms is below the minimum 50ms"},
		{"heartbeat at the minimum", func(t *Timing) { t.Heartbeat = ms(50) }, ""},
		{"grace below the minimum", func(t *Timing) { t.Grace = ms(99) }, "timing.grace"},
		{"fence timeout of a nanosecond", func(t *Timing) { t.FenceTimeout = 1 }, "timing.fence_timeout: 1ns is below the minimum 1s"},
		{"fence timeout at the minimum", func(t *Timing) { t.FenceTimeout = ms(1000) }, ""},
		{"fence timeout above the maximum", func(t *Timing) { t.FenceTimeout = Duration(11 * time.Minute) }, "timing.fence_timeout"},
		{"negative margin", func(t *Timing) { t.Margin = -1 }, "timing.margin: must be > 0"},
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

// validationCase is a change to the minimal configuration and the problem
// it must produce ("" = none).
type validationCase struct {
	name string
	mod  func(*Config)
	want string
}

// checkValidation applies each case to a fresh minimal configuration and
// checks the problems Validate reports.
func checkValidation(t *testing.T, cases []validationCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load("testdata/good-minimal.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if c.Devices == nil {
				c.Devices = map[string]Device{}
			}
			tc.mod(c)
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

// TestCountAndIntervalBounds: counts and intervals outside the lease rules
// have bounds too (a 2^63−1 retry count or a 1ns monitor were "valid").
func TestCountAndIntervalBounds(t *testing.T) {
	checkValidation(t, []validationCase{
		{"retries 2^63-1", func(c *Config) { c.Devices["bmc"] = Device{Agent: "ipmi", Retries: math.MaxInt64} }, "devices.bmc.retries: 9223372036854775807: want 0 to 10"},
		{"retries at the maximum", func(c *Config) { c.Devices["bmc"] = Device{Agent: "ipmi", Retries: MaxRetries} }, ""},
		{"negative retries", func(c *Config) { c.Devices["bmc"] = Device{Agent: "ipmi", Retries: -1} }, "devices.bmc.retries"},
		{"device timeout of a nanosecond", func(c *Config) { c.Devices["bmc"] = Device{Agent: "ipmi", Timeout: 1} }, "devices.bmc.timeout: 1ns: want 0 (timing.fence_timeout) or 1s to 10m0s"},
		{"device timeout default", func(c *Config) { c.Devices["bmc"] = Device{Agent: "ipmi"} }, ""},
		{"monitor every nanosecond", func(c *Config) { c.Storage.MonitorInterval = 1 }, "storage.monitor_interval: 1ns: want 100ms to 1h0m0s"},
		{"monitor at the minimum", func(c *Config) { c.Storage.MonitorInterval = Duration(MinMonitorInterval) }, ""},
		{"history too long", func(c *Config) { c.History.Limit = MaxHistory + 1 }, "history.limit"},
		{"history at the maximum", func(c *Config) { c.History.Limit = MaxHistory }, ""},
	})
}

func TestRolesAndWatchdogLevel(t *testing.T) {
	checkValidation(t, []validationCase{
		{"witness", func(c *Config) { c.Nodes[2].Role = RoleWitness }, ""},
		{"unknown role", func(c *Config) { c.Nodes[2].Role = "arbiter" }, `nodes[2].role: "arbiter": want data (the default) or witness`},
		{"witness with a fence topology", func(c *Config) {
			c.Nodes[2].Role = RoleWitness
			c.Nodes[2].Fence = []Level{{Watchdog: true}}
		}, "nodes[2].fence: a witness holds nothing and is never fenced"},
		{"only witnesses", func(c *Config) {
			for i := range c.Nodes {
				c.Nodes[i].Role = RoleWitness
			}
		}, "at least one data node"},
		{"watchdog level alone", func(c *Config) { c.Nodes[0].Fence = []Level{{Watchdog: true}} }, ""},
		{"watchdog level not last", func(c *Config) { c.Nodes[0].Fence = []Level{{Watchdog: true}, {Watchdog: true}} }, "nodes[0].fence[0].watchdog: the watchdog level must be the last"},
		{"watchdog timeout without device", func(c *Config) { c.Watchdog.Timeout = Duration(10 * time.Second) }, "watchdog.timeout: set without watchdog.device"},
		{"watchdog timeout within grace", func(c *Config) { c.Watchdog = Watchdog{Device: "/dev/watchdog", Timeout: c.Timing.Grace} }, "want more than timing.grace"},
		{"watchdog timeout", func(c *Config) { c.Watchdog = Watchdog{Device: "/dev/watchdog", Timeout: Duration(10 * time.Second)} }, ""},
	})
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

func TestWarnNoFencePathWithoutTokens(t *testing.T) {
	c, err := Load("testdata/good-minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Storage.Hooks = Hooks{Start: "/bin/true", Stop: "/bin/true"}
	c.Watchdog.Device = "/dev/watchdog"
	ws := c.Warnings()
	if len(ws) == 0 || !strings.Contains(ws.Error(), "no fence topology") || !strings.Contains(ws.Error(), "storage.checks_tokens is false") {
		t.Fatalf("no warning for storage without fence paths: %v", ws)
	}
	c.Storage.ChecksTokens = true
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("warned with checks_tokens: %v", ws)
	}
	// A resource that checks no tokens: lease expiry confirms nothing.
	c.Storage.Hooks = Hooks{}
	c.Resources = []Resource{{Name: "data", Mount: &Mount{Device: "/dev/sdb1", Mountpoint: "/srv", FSType: "ext4"}},
		{Name: "vip", OCF: "heartbeat:IPaddr2"}}
	if ws := c.Warnings(); len(ws) == 0 || !strings.Contains(ws.Error(), "resources vip check no tokens") {
		t.Fatalf("no warning for a resource that checks no tokens: %v", ws)
	}
	c.Resources[1].ChecksTokens = true
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("warned with every resource checking tokens: %v", ws)
	}
	c.Storage.ChecksTokens, c.Resources = false, nil
	c.Storage.Hooks = Hooks{Start: "/bin/true", Stop: "/bin/true"}
	for i := range c.Nodes {
		c.Nodes[i].Fence = []Level{{Watchdog: true}}
	}
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("warned with fence topologies: %v", ws)
	}
	// No watchdog device: the self-fence is sysrq alone.
	c.Watchdog.Device = ""
	if ws := c.Warnings(); len(ws) != 1 || !strings.Contains(ws.Error(), "sysrq alone") {
		t.Fatalf("no warning without a watchdog device: %v", ws)
	}
	// The file as a witness reads it: it holds nothing and never
	// self-fences, so it needs no watchdog.
	c.Nodes[2].Role, c.Nodes[2].Fence = RoleWitness, nil
	c.Node = c.Nodes[2].Name
	if ws := c.Warnings(); len(ws) != 0 {
		t.Fatalf("a witness warned of its watchdog: %v", ws)
	}
	c.Node = c.Nodes[0].Name
	if ws := c.Warnings(); len(ws) != 1 || !strings.Contains(ws.Error(), "sysrq alone") {
		t.Fatalf("a data node beside a witness: no warning without a watchdog device: %v", ws)
	}
}
