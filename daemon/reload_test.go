package daemon_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/apiclient"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/stonith/fencing"
)

// editConfig rewrites node n's configuration file through f.
func editConfig(t *testing.T, n *devcluster.Node, f func(c *config.Config)) {
	t.Helper()
	c, err := config.Load(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	f(c)
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.Config, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func reload(t *testing.T, n *devcluster.Node) (api.ReloadReply, error) {
	t.Helper()
	cl := n.Client()
	defer cl.Close()
	var r api.ReloadReply
	err := cl.Do(ctxT(t, 30*time.Second), "POST", "/v1/reload", nil, struct{}{}, &r)
	return r, err
}

func fence(t *testing.T, via *devcluster.Node, target string) fencing.Record {
	t.Helper()
	cl := via.Client()
	defer cl.Close()
	var rec fencing.Record
	if err := cl.Do(ctxT(t, 60*time.Second), "POST", "/v1/fence", nil, daemon.AdminRequest{Node: target, Reason: "reload test"}, &rec); err != nil {
		var ae *apiclient.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("fence %s: %v", target, err)
		}
	}
	return rec
}

// TestLiveReload (issue 15): a reload applies a rotated BMC password (a new
// password_file) and a changed fence topology without a restart — the
// device check and the next fence use them; a file with a problem is
// refused, named at its line, and the running configuration stays; a
// change of the node list is refused as needing a restart.
func TestLiveReload(t *testing.T) {
	agent, dir := testAgent(t), t.TempDir()
	metrics := metricAddrs(t, 3)
	c := startCluster(t, devcluster.Options{Nodes: 3, BMC: true,
		NodeConfig: func(i int, cfg *config.Config) { cfg.Metrics.Listen = metrics[i] },
		Configure: func(cfg *config.Config) {
			for name, d := range cfg.Devices {
				d.MonitorInterval = config.Duration(monitorEvery)
				d.Timeout = config.Duration(3 * time.Second)
				cfg.Devices[name] = d
			}
		}})
	p, _, err := c.Primary(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Other(p), c.Other(p, c.Other(p))
	aBMC := a.Name + "-bmc"

	// a's BMC password is rotated; until the file is reloaded the checks
	// fail with an authentication error.
	newPW := filepath.Join(dir, "rotated-password")
	writeFile(t, newPW, "rotated-secret")
	if err := c.BMCs[a.Index].SetPassword("rotated-secret"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, aBMC+" failing with the old password", 15*time.Second, func() bool {
		return devicesOf(t, p)[aBMC].Health.ErrorKind == "auth"
	})

	// The admin edits every node's file: the new password file for a's
	// BMC, and b fenced through a plugin instead of its BMC.
	plugState := filepath.Join(dir, "b-plug-state")
	plugPW := filepath.Join(dir, "b-plug-password")
	writeFile(t, plugPW, "letmein")
	change := func(cfg *config.Config) {
		d := cfg.Devices[aBMC]
		d.Params["password_file"] = newPW
		cfg.Devices[aBMC] = d
		cfg.Devices["b-plug"] = config.Device{Agent: "exec", MonitorInterval: config.Duration(monitorEvery),
			Params: map[string]string{"agent": agent, "ip": "127.0.0.1", "password_file": plugPW, "state_file": plugState}}
		nb, _ := cfg.NodeByName(b.Name)
		nb.Fence = []config.Level{{Devices: []config.DeviceRef{{Device: "b-plug", Plug: "2"}}}}
	}
	for _, n := range c.Nodes {
		editConfig(t, n, change)
		r, err := reload(t, n)
		if err != nil {
			t.Fatalf("reload %s: %v", n.Name, err)
		}
		if got := strings.Join(r.Changed, " "); got != "devices.b-plug (added) devices."+aBMC+" nodes."+b.Name+".fence" &&
			got != "devices."+aBMC+" devices.b-plug (added) nodes."+b.Name+".fence" {
			t.Errorf("%s reload changed %q", n.Name, r.Changed)
		}
	}
	waitUntil(t, aBMC+" healthy with the new password", 15*time.Second, func() bool {
		return devicesOf(t, p)[aBMC].Health.State == api.HealthOK
	})
	waitUntil(t, "the new plugin device checked", 15*time.Second, func() bool {
		return devicesOf(t, p)["b-plug"].Health.State == api.HealthOK
	})
	waitUntil(t, "every node on the new configuration", 15*time.Second, func() bool {
		st, err := b.Status(context.Background())
		return err == nil && st.Config != nil && st.Config.Match && st.Config.Committed == st.Config.Fingerprint
	})

	// A fence after the reload uses the new topology...
	rec := fence(t, a, b.Name)
	if rec.Outcome != fencing.OutcomeSuccess || len(rec.Attempts) == 0 || rec.Attempts[0].Device != "b-plug" {
		t.Fatalf("fence of %s after the reload: %+v", b.Name, rec)
	}
	if s, _ := os.ReadFile(plugState); strings.TrimSpace(string(s)) != "off" {
		t.Errorf("the plugin was not switched off: %q", s)
	}
	// ... and the rotated password.
	rec = fence(t, b, a.Name)
	if rec.Outcome != fencing.OutcomeSuccess || rec.Attempts[0].Device != aBMC {
		t.Fatalf("fence of %s with the rotated password: %+v", a.Name, rec)
	}
	waitUntil(t, a.Name+" powered off", 10*time.Second, func() bool { return !a.Running() })

	// Every node's metrics (issue 15): build, raft, storage, the last
	// fence of each node from the replicated history, device health, the
	// configuration. A follower applies the fence's record within a round
	// trip of its commit: its metrics are read until they show it (or 5s).
	for _, n := range []*devcluster.Node{p, b} {
		var missing []string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			missing = missingMetrics(metricsBody(t, metrics[n.Index]), p, a, b)
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
		}
		for _, re := range missing {
			t.Errorf("%s's metrics lack %s", n.Name, re)
		}
	}

	// A file with a problem is refused at its line; the running
	// configuration stays.
	good, _ := os.ReadFile(p.Config)
	editConfig(t, p, func(cfg *config.Config) {
		nb, _ := cfg.NodeByName(b.Name)
		nb.Fence = []config.Level{{Devices: []config.DeviceRef{{Device: "no-such-device"}}}}
	})
	_, err = reload(t, p)
	if err == nil || !strings.Contains(err.Error(), p.Config+":") || !strings.Contains(err.Error(), `unknown device "no-such-device"`) ||
		!strings.Contains(err.Error(), "the running configuration stays in force") {
		t.Fatalf("reload of a bad file: %v", err)
	}
	if _, ok := devicesOf(t, p)["b-plug"]; !ok {
		t.Error("the refused reload changed the running configuration")
	}
	if st, _ := p.Status(context.Background()); st.Config == nil || st.Config.LastReload == nil || st.Config.LastReload.OK {
		t.Errorf("status does not show the refused reload: %+v", st.Config)
	}
	if b, _ := os.ReadFile(p.Log); !strings.Contains(string(b), "reload refused: the running configuration stays in force") {
		t.Error("the refused reload was not logged")
	}

	// A node added needs a restart.
	os.WriteFile(p.Config, good, 0o600)
	editConfig(t, p, func(cfg *config.Config) {
		cfg.Nodes = append(cfg.Nodes, config.Node{Name: "node4", Gossip: "127.0.0.1:1", Raft: "127.0.0.1:2"},
			config.Node{Name: "node5", Gossip: "127.0.0.1:3", Raft: "127.0.0.1:4"})
	})
	_, err = reload(t, p)
	if err == nil || !strings.Contains(err.Error(), "the node list changed from 3 to 5 nodes: cannot change while fenced runs; restart it") {
		t.Fatalf("reload with two nodes added: %v", err)
	}
	os.WriteFile(p.Config, good, 0o600)
	if r, err := reload(t, p); err != nil || len(r.Changed) != 0 || !r.Match {
		t.Errorf("reload of the unchanged file: %+v %v", r, err)
	}
}

func metricsBody(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// missingMetrics lists the patterns of TestLiveReload's metrics check that
// body does not match (p the primary, a and b the nodes it fenced).
func missingMetrics(body string, p, a, b *devcluster.Node) []string {
	var missing []string
	for _, re := range []string{`(?m)^fenced_build_info\{goversion="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`,
		`(?m)^fenced_raft_term [1-9]`, `(?m)^fenced_raft_leader\{leader="node\d"\} 1$`, `(?m)^fenced_raft_state\{state="(leader|follower)"\} 1$`,
		`(?m)^fenced_storage_state\{state="(stopped|running)"\} 1$`,
		`(?m)^fenced_last_fence_timestamp_seconds\{outcome="success",target="` + a.Name + `"\} 1\.[0-9e+.]+$`,
		`(?m)^fenced_last_fence_timestamp_seconds\{outcome="success",target="` + b.Name + `"\} `,
		`(?m)^fenced_device_healthy\{device="(b-plug|` + p.Name + `-bmc)"\} `, `(?m)^fenced_config_match 1$`, `(?m)^fenced_device_monitor_devices [1-9]`} {
		if !regexp.MustCompile(re).MatchString(body) {
			missing = append(missing, re)
		}
	}
	return missing
}
