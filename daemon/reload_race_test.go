package daemon_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fenced/fenced/agents"
	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
)

// writeAndLoad writes c to path and loads it back as fenced run would.
func writeAndLoad(t *testing.T, path string, c *config.Config) *config.Config {
	t.Helper()
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	lc, err := daemon.LoadConfig(path, c.Node, "", agents.Default)
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

// TestReloadRace: reloads on every node, each changing a device's
// parameters and topology, while the status, the device list, the metrics'
// state and a fence read the configuration from other goroutines (run
// with -race: make race does).
func TestReloadRace(t *testing.T) {
	ip := newInprocWith(t, 3, inprocOptions{bmc: true, files: true})
	ip.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, d := range ip.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				st := d.StatusNow()
				_ = st.FencePaths
				time.Sleep(time.Millisecond)
			}
		}()
	}
	for round := range 10 {
		for i, d := range ip.nodes {
			path := d.ConfigFile()
			c, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			for name, dev := range c.Devices {
				dev.Params["power_timeout"] = strconv.Itoa(5 + round%2)
				dev.MonitorInterval = config.Duration(time.Duration(1+round%2) * time.Second)
				c.Devices[name] = dev
			}
			n := &c.Nodes[(i+1)%3]
			n.Fence = append(n.Fence[:1], config.Level{Devices: []config.DeviceRef{{Device: n.Name + "-bmc"}}})[:1+round%2]
			b, _ := yaml.Marshal(c)
			os.WriteFile(path, b, 0o600)
			if _, err := d.Reload(ctx); err != nil {
				t.Fatalf("reload %s round %d: %v", d.Name(), round, err)
			}
		}
	}
	close(stop)
	wg.Wait()
}
