package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// TestResourceList: `status` and `resource list` show the primary's group
// of real Dummy agents, in table and JSON form.
func TestResourceList(t *testing.T) {
	if _, err := os.Stat("/usr/lib/ocf/resource.d/heartbeat/Dummy"); err != nil {
		t.Fatalf("resource-agents not installed (make test installs it): %v", err)
	}
	ms := func(n int) config.Duration { return config.Duration(time.Duration(n) * time.Millisecond) }
	dir := t.TempDir()
	c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: dir, Bin: fencedBin,
		Timing: config.Timing{Heartbeat: ms(150), Lease: ms(1500), Margin: ms(150), Grace: ms(1000), FenceTimeout: ms(5000)},
		Configure: func(cfg *config.Config) {
			for _, r := range []string{"fs", "ip", "app"} {
				cfg.Resources = append(cfg.Resources, config.Resource{Name: r, OCF: "heartbeat:Dummy", MonitorInterval: ms(200)})
			}
		},
		NodeConfig: func(_ int, cfg *config.Config) {
			rs := slices.Clone(cfg.Resources)
			for k := range rs {
				rs[k].NodeParams = map[string]string{"state": filepath.Join(dir, cfg.Node+"-"+rs[k].Name)}
			}
			cfg.Resources = rs
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, _, err := c.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	for ctx.Err() == nil {
		var code int
		code, out, _ = ctl("--socket", p.Socket, "resource", "list")
		if code == 0 && strings.Count(out, " running ") == 3 && !strings.Contains(out, "never") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{"Resources on " + p.Name + " (primary):", "RESOURCE", "LAST MONITOR", "fs        ocf:heartbeat:Dummy  running  every 0.2s", " ok "} {
		if !strings.Contains(out, want) {
			t.Errorf("resource list lacks %q:\n%s", want, out)
		}
	}
	code, out, _ := ctl("--socket", p.Socket, "status")
	if code != 0 || !strings.Contains(out, "Resources on "+p.Name) || !strings.Contains(out, "app       ocf:heartbeat:Dummy  running") {
		t.Errorf("status: %d\n%s", code, out)
	}
	var l struct {
		SchemaVersion int `json:"schemaVersion"`
		Resources     []struct {
			Name, Kind, State string
			Failures          int
		} `json:"resources"`
	}
	code, out, _ = ctl("--socket", p.Socket, "-o", "json", "resource", "list")
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.SchemaVersion != 1 || len(l.Resources) != 3 || l.Resources[2].Name != "app" || l.Resources[2].State != "running" {
		t.Errorf("json resource list: %d %+v\n%s", code, l, out)
	}
	checkSchema(t, "resources.json", out)
	other := c.Other(p)
	code, out, _ = ctl("--socket", other.Socket, "resource", "list")
	if code != 0 || strings.Count(out, " stopped ") != 3 {
		t.Errorf("resource list on a secondary: %d\n%s", code, out)
	}
	_, out, _ = ctl("--socket", other.Socket, "-o", "json", "resource", "list")
	checkSchema(t, "resources.json", out)
}
