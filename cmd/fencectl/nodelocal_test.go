package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

var fastTiming = config.Timing{Heartbeat: config.Duration(150 * time.Millisecond), Lease: config.Duration(1500 * time.Millisecond),
	Margin: config.Duration(150 * time.Millisecond), Grace: config.Duration(1000 * time.Millisecond), FenceTimeout: config.Duration(5 * time.Second)}

// program writes an executable shell script that exits 0.
func program(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func logTails(t *testing.T, c *devcluster.Cluster) {
	if !t.Failed() {
		return
	}
	for _, n := range c.Nodes {
		b, _ := os.ReadFile(n.Log)
		t.Logf("---- %s ----\n%s", n.Name, b[max(0, len(b)-3000):])
	}
}

// maxTerm is the highest raft term the running nodes report.
func maxTerm(t *testing.T, c *devcluster.Cluster) uint64 {
	var term uint64
	for _, n := range c.Nodes {
		if n.Running() {
			term = max(term, statusJSON(t, n).Self.Term)
		}
	}
	return term
}

// TestNodeLocalStorage (issue 24): three nodes whose storage programs are
// installed in a directory of each node's own. Undeclared, the nodes' files
// differ in the group, no majority runs one configuration and no primary is
// ever elected: each node says which keys differ from which node's and how
// to declare them, fenced validate says the same of its file, and raft
// leadership stays where it is instead of being handed around (before: a
// new term about three times a second). Declared node-local
// (storage.node_local), the same values elect a primary.
func TestNodeLocalStorage(t *testing.T) {
	dir := t.TempDir()
	c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: dir, Bin: fencedBin, BMC: true, Timing: fastTiming,
		NodeConfig: func(i int, cfg *config.Config) {
			own := filepath.Join(dir, "node"+string(rune('1'+i)), "bin")
			cfg.Storage.Hooks = config.Hooks{Start: program(t, filepath.Join(own, "start")), Stop: program(t, filepath.Join(own, "stop"))}
			cfg.Storage.ChecksTokens = true
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer logTails(t, c)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	hint := "declare them so, the same way on every node: storage.node_local: [hooks.start, hooks.stop]"
	differs := regexp.MustCompile(`waiting for a majority of the configured nodes to run one configuration \(.*\); this node's differs from node\d's in storage\.hooks\.start, storage\.hooks\.stop, from node\d's in storage\.hooks\.start, storage\.hooks\.stop; if these values are each node's own`)
	for _, n := range c.Nodes {
		until(t, n.Name+" to say which keys differ", 20*time.Second, func() bool {
			st, err := n.Status(context.Background())
			return err == nil && differs.MatchString(st.Self.Ineligible) && strings.Contains(st.Self.Ineligible, hint)
		})
	}
	_, out, _ := ctl("--socket", c.Nodes[0].Socket, "status")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^ +CONFIG MISMATCH node2: runs [0-9a-f]{16}; differing: storage\.hooks\.start, storage\.hooks\.stop$`),
		regexp.MustCompile(`(?m)^ +if these values are each node's own .*storage\.node_local: \[hooks\.start, hooks\.stop\]`),
		regexp.MustCompile(`(?m)^node3 .* MISMATCH +`),
		// (Marked last known while raft has no leader yet: no quorum.)
		regexp.MustCompile(`(?m)^Primary:  (LAST KNOWN, UNCONFIRMED \(this node has no quorum\): )?none yet$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("node1's status does not match %s:\n%s", want, out)
		}
	}
	// Leadership stays put: no node may hold primacy, so none is handed
	// it (and none takes it).
	before := maxTerm(t, c)
	time.Sleep(3 * time.Second)
	if after := maxTerm(t, c); after > before+1 {
		t.Errorf("raft term %d → %d in 3s: leadership is handed around although no node may hold primacy", before, after)
	}
	for _, n := range c.Nodes {
		if st := statusJSON(t, n); st.Self.Epoch > 0 || st.Primary.Node != "" {
			t.Fatalf("%s: a primary although no majority runs one configuration: %+v", n.Name, st.Primary)
		}
	}
	// fenced validate compares the file with what the cluster runs.
	cmd := exec.Command(fencedBin, "validate", "--config", c.Nodes[0].Config)
	vout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, vout)
	}
	for _, want := range []string{"cluster: this file differs from the configuration node2 runs (", ") in storage.hooks.start, storage.hooks.stop",
		"cluster: if these values are each node's own", "storage.node_local: [hooks.start, hooks.stop]"} {
		if !strings.Contains(string(vout), want) {
			t.Errorf("validate lacks %q:\n%s", want, vout)
		}
	}

	// Declared node-local on every node: a primary.
	for _, n := range c.Nodes {
		n.Kill()
		editConfig(t, n, func(cfg *config.Config) { cfg.Storage.NodeLocal = []string{"hooks.start", "hooks.stop"} })
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := c.Primary(ctx); err != nil {
		for _, n := range c.Nodes {
			_, out, _ := ctl("--socket", n.Socket, "status")
			t.Logf("%s:\n%s", n.Name, out)
		}
		t.Fatalf("no primary with the values declared node-local: %v", err)
	}
	until(t, "every node to run the committed configuration", 15*time.Second, func() bool {
		for _, n := range c.Nodes {
			st, err := n.Status(ctx)
			if err != nil || !st.Config.Match || st.Config.Committed == "" || st.Self.Ineligible != "" {
				return false
			}
		}
		return true
	})
}

// TestWitnessWithoutGroup (issue 24): a witness whose file has no storage
// and whose devices' password files are not on its disk starts, runs the
// cluster's configuration (no CONFIG MISMATCH anywhere), and a change made
// on every node is committed by the cluster once every node runs it, the
// witness included.
func TestWitnessWithoutGroup(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: dir, Bin: fencedBin, BMC: true, Timing: fastTiming,
		Configure: func(cfg *config.Config) {
			cfg.Nodes[2].Role, cfg.Nodes[2].Fence = config.RoleWitness, nil
			delete(cfg.Devices, "node3-bmc")
			cfg.Storage.Hooks = config.Hooks{Start: program(t, filepath.Join(bin, "start")), Stop: program(t, filepath.Join(bin, "stop"))}
			cfg.Storage.ChecksTokens = true
		},
		NodeConfig: func(i int, cfg *config.Config) {
			if i != 2 {
				return
			}
			cfg.Storage = config.Storage{MonitorInterval: config.Default().Storage.MonitorInterval}
			devs := map[string]config.Device{}
			for name, d := range cfg.Devices {
				p := map[string]string{}
				for k, v := range d.Params {
					p[k] = v
				}
				p["password_file"] = filepath.Join(dir, "not-on-the-witness")
				d.Params = p
				devs[name] = d
			}
			cfg.Devices = devs
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer logTails(t, c)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := c.Primary(ctx); err != nil {
		t.Fatal(err)
	}
	allMatch := func() bool {
		for _, n := range c.Nodes {
			st, err := n.Status(ctx)
			if err != nil || !st.Config.Match || st.Config.Committed == "" {
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
	until(t, "no CONFIG MISMATCH on any node", 15*time.Second, allMatch)
	before := statusJSON(t, c.Nodes[0]).Config.Committed
	for _, n := range c.Nodes {
		editConfig(t, n, setParam("node1-bmc", "power_timeout", "7"))
		if code, out, stderr := ctl("--socket", n.Socket, "reload"); code != 0 {
			t.Fatalf("reload %s: %d\n%s%s", n.Name, code, out, stderr)
		}
	}
	until(t, "the change committed once every node, the witness too, runs it", 15*time.Second, func() bool {
		return allMatch() && statusJSON(t, c.Nodes[0]).Config.Committed != before
	})
}
