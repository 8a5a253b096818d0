package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fenced/fenced/daemon/api"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
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

func setParam(dev, name, value string) func(c *config.Config) {
	return func(c *config.Config) {
		d := c.Devices[dev]
		d.Params[name] = value
		c.Devices[dev] = d
	}
}

func statusJSON(t *testing.T, n *devcluster.Node) api.Status {
	t.Helper()
	code, out, stderr := ctl("--socket", n.Socket, "-o", "json", "status")
	var st api.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status of %s: %d %s", n.Name, code, stderr)
	}
	return st
}

func until(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
	}
}

// TestConfigMismatch (issue 15): a node started with another lease and
// another device parameter than the others is shown as CONFIG MISMATCH with
// the keys that differ (never a value) on every node, is not eligible for
// primacy and does not take it even when handed leadership. A change made
// live on every node, reloaded one node at a time, leaves each node on the
// new file not eligible until the last one runs it; then the cluster commits
// it by itself. With a node down the change is never on every node: no
// running node is eligible, status says what to do, and `config accept`
// commits it.
func TestConfigMismatch(t *testing.T) {
	ms := func(n int) config.Duration { return config.Duration(time.Duration(n) * time.Millisecond) }
	c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: t.TempDir(), Bin: fencedBin, BMC: true,
		Timing: config.Timing{Heartbeat: ms(150), Lease: ms(1500), Margin: ms(150), Grace: ms(1000), FenceTimeout: ms(5000)},
		NodeConfig: func(i int, cfg *config.Config) {
			if i == 2 {
				cfg.Timing.Lease = ms(2000)
				d := cfg.Devices["node1-bmc"]
				params := map[string]string{}
				for k, v := range d.Params {
					params[k] = v
				}
				params["power_timeout"] = "6"
				d.Params = params
				cfg.Devices["node1-bmc"] = d
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		c.Close()
		if t.Failed() {
			for _, n := range c.Nodes {
				b, _ := os.ReadFile(n.Log)
				t.Logf("---- %s ----\n%s", n.Name, b[max(0, len(b)-3000):])
			}
		}
	}()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	odd := c.Nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p, _, err := c.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p == odd {
		t.Fatalf("%s, whose configuration differs, became primary", odd.Name)
	}
	mismatch := regexp.MustCompile(`(?m)^ +CONFIG MISMATCH node3: runs [0-9a-f]{16}; differing: devices\.node1-bmc\.params\.power_timeout, timing\.lease$`)
	var out string
	until(t, "node1's status to name node3's differing keys", 15*time.Second, func() bool {
		_, out, _ = ctl("--socket", c.Nodes[0].Socket, "status")
		return mismatch.MatchString(out)
	})
	if !regexp.MustCompile(`(?m)^node3 .* MISMATCH +`).MatchString(out) || !regexp.MustCompile(`(?m)^node2 .* ok +`).MatchString(out) {
		t.Errorf("CONFIG column:\n%s", out)
	}
	if strings.Contains(out, "2s") && strings.Contains(out, "lease: ") {
		t.Errorf("a value in the status:\n%s", out)
	}
	// node3 learns the committed fingerprint from the leader's next
	// AppendEntries: a moment after node1 does.
	wants := []string{"NOT ELIGIBLE for primacy: config: CONFIG MISMATCH: this node's configuration",
		"Config:   CONFIG MISMATCH: this node runs ", "differing: devices.node1-bmc.params.power_timeout, timing.lease"}
	until(t, "node3's status to say its own mismatch", 15*time.Second, func() bool {
		_, out, _ = ctl("--socket", odd.Socket, "status")
		return strings.Contains(out, wants[0])
	})
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("node3's status lacks %q:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(odd.Log); !strings.Contains(string(b), "configuration differs from the cluster's: not eligible for primacy") {
		t.Error("node3 did not log its mismatch")
	}

	// Handed leadership, it hands it on and never acts.
	if code, _, stderr := ctl("--socket", p.Socket, "transfer", odd.Name); code != 0 {
		t.Fatalf("transfer: %s", stderr)
	}
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if st, err := odd.Status(ctx); err == nil && (st.Self.Acting || st.Self.Epoch > 0) {
			t.Fatalf("%s took primacy: %+v", odd.Name, st.Self)
		}
	}
	if p, _, err = c.Primary(ctx); err != nil || p == odd {
		t.Fatalf("after the transfer: %v %v", p, err)
	}

	// node3 restarted with the cluster's configuration matches.
	odd.Kill()
	editConfig(t, odd, func(cfg *config.Config) {
		cfg.Timing.Lease = ms(1500)
		setParam("node1-bmc", "power_timeout", "5")(cfg)
	})
	if err := odd.Start(); err != nil {
		t.Fatal(err)
	}
	allMatch := func() bool {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			st, err := n.Status(ctx)
			if err != nil || st.Config == nil || !st.Config.Match || st.Config.Committed == "" {
				return false
			}
			for _, ns := range st.Nodes {
				if ns.ConfigMismatch {
					return false
				}
			}
		}
		return true
	}
	until(t, "every node to match", 20*time.Second, allMatch)
	before := statusJSON(t, c.Nodes[0]).Config.Committed

	// A live change, reloaded one node at a time.
	for i, n := range c.Nodes {
		editConfig(t, n, setParam("node2-bmc", "power_timeout", "7"))
		code, out, stderr := ctl("--socket", n.Socket, "reload")
		if code != 0 || !strings.Contains(out, n.Name+" reloaded "+n.Config+": applied: devices.node2-bmc") {
			t.Fatalf("reload %s: %d\n%s%s", n.Name, code, out, stderr)
		}
		if i == len(c.Nodes)-1 {
			break
		}
		if !strings.Contains(out, "differs from the cluster's "+before) {
			t.Errorf("reload of %s does not say it differs:\n%s", n.Name, out)
		}
		until(t, n.Name+" not eligible", 5*time.Second, func() bool {
			st := statusJSON(t, n)
			return strings.Contains(st.Self.Ineligible, "CONFIG MISMATCH") && len(st.Config.Differing) == 1 && st.Config.Differing[0] == "devices.node2-bmc.params.power_timeout"
		})
	}
	until(t, "the change committed once every node runs it", 15*time.Second, func() bool {
		return allMatch() && statusJSON(t, c.Nodes[0]).Config.Committed != before
	})
	if st := statusJSON(t, c.Nodes[1]); !strings.Contains(st.Config.CommittedBy, "every configured node runs it") {
		t.Errorf("committed by %q", st.Config.CommittedBy)
	}

	// With a node down: nobody eligible, and status says what to do.
	p, _, _ = c.Primary(ctx)
	var down, asked *devcluster.Node
	for _, n := range c.Nodes {
		if n != p && down == nil {
			down = n
		} else if n != p {
			asked = n
		}
	}
	down.Kill()
	before = statusJSON(t, asked).Config.Committed
	for _, n := range []*devcluster.Node{p, asked} {
		editConfig(t, n, setParam("node2-bmc", "power_timeout", "8"))
		if code, _, stderr := ctl("--socket", n.Socket, "reload"); code != 0 {
			t.Fatalf("reload %s: %s", n.Name, stderr)
		}
	}
	until(t, "the no-eligible-node warning", 10*time.Second, func() bool {
		_, out, _ = ctl("--socket", asked.Socket, "status")
		return strings.Contains(out, "NO NODE ELIGIBLE for primacy") && strings.Contains(out, "fencectl config accept")
	})
	// The accept runs on the leader, which names a node "not seen" once
	// its own gossip stopped seeing it alive or suspect: wait for that
	// (each node's failure detector decides on its own).
	until(t, "the leader to see "+down.Name+" gone", 20*time.Second, func() bool {
		for _, ns := range statusJSON(t, p).Nodes {
			if ns.Name == down.Name {
				return ns.Gossip != "alive" && ns.Gossip != "suspect"
			}
		}
		return true // not listed: not seen either
	})
	code, out, stderr := ctl("--socket", asked.Socket, "config", "accept")
	if code != 0 || !strings.Contains(out, "the cluster's configuration is now ") || !strings.Contains(out, down.Name+": not seen") {
		t.Fatalf("config accept: %d\n%s%s", code, out, stderr)
	}
	until(t, "both running nodes to match", 10*time.Second, allMatch)
	if st := statusJSON(t, asked); st.Config.Committed == before || st.Config.Warning != "" {
		t.Errorf("after accept: %+v", st.Config)
	}
	// The node that was down comes back with the old file: it differs.
	if err := down.Start(); err != nil {
		t.Fatal(err)
	}
	until(t, down.Name+" shown as differing", 20*time.Second, func() bool {
		_, out, _ = ctl("--socket", asked.Socket, "status")
		return regexp.MustCompile(`CONFIG MISMATCH ` + down.Name + `: runs [0-9a-f]{16}; differing: devices\.node2-bmc\.params\.power_timeout`).MatchString(out)
	})
}
