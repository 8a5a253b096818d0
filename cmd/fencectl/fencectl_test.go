package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

var fencedBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencectl-test-")
	if err != nil {
		panic(err)
	}
	fencedBin = filepath.Join(dir, "fenced")
	if out, err := exec.Command("go", "build", "-o", fencedBin, "../fenced").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build fenced: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func ctl(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrors(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--socket", sock, "status"}, exitNoDaemon, "fenced is not running"},
		{[]string{"--socket", sock, "fence", "node1"}, exitNotConfirmed, "add --yes"},
		{[]string{"--socket", sock, "confirm", "node1"}, exitNotConfirmed, "add --yes"},
		{[]string{"--socket", sock, "-o", "yaml", "status"}, exitUsage, `--output "yaml"`},
		{[]string{"fence"}, exitUsage, "accepts 1 arg"},
		{[]string{"bogus"}, exitUsage, "unknown command"},
	}
	for _, tc := range cases {
		code, _, stderr := ctl(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, stderr, tc.want)
		}
	}
}

// TestAgainstCluster drives fencectl against a real 3-node cluster with
// simulated BMCs: status (table and JSON), device list and status, fence,
// history.
func TestAgainstCluster(t *testing.T) {
	ms := func(n int) config.Duration { return config.Duration(time.Duration(n) * time.Millisecond) }
	c, err := devcluster.New(devcluster.Options{Nodes: 3, Dir: t.TempDir(), Bin: fencedBin, BMC: true,
		Timing: config.Timing{Heartbeat: ms(150), Lease: ms(1500), Margin: ms(150), Grace: ms(1000), FenceTimeout: ms(5000)},
		Configure: func(cfg *config.Config) {
			for name, d := range cfg.Devices {
				d.MonitorInterval = config.Duration(time.Second)
				cfg.Devices[name] = d
			}
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
	p, epoch, err := c.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var other = c.Nodes[(p.Index+1)%3]
	victim := c.Nodes[(p.Index+2)%3]

	// A follower learns the committed state a moment after the leader
	// acts: wait until the node we ask knows the primary.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st, err := other.Status(ctx); err == nil && st.Primary.Node == p.Name {
			break
		}
	}
	code, out, stderr := ctl("--socket", other.Socket, "status")
	if code != 0 {
		t.Fatalf("status: %d %s", code, stderr)
	}
	for _, want := range []string{"Quorum:   yes — ", " of 3 votes reachable, 2 needed, leader ", fmt.Sprintf("Primary:  %s, epoch %d", p.Name, epoch), "NODE", "LAST CONTACT",
		"Config:   fingerprint "} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = ctl("--socket", other.Socket, "-o", "json", "status")
	var st struct {
		SchemaVersion int `json:"schemaVersion"`
		Primary       struct {
			Node  string `json:"node"`
			Epoch uint64 `json:"epoch"`
		} `json:"primary"`
		Nodes []struct {
			Name   string `json:"name"`
			Gossip string `json:"gossip"`
		} `json:"nodes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.SchemaVersion != 1 || st.Primary.Node != p.Name || len(st.Nodes) != 3 {
		t.Fatalf("json status: %d %+v\n%s", code, st, out)
	}
	// Every node checks the devices that fence the others: soon each
	// reads ok, with when and how long; its own BMC it leaves to them.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, out, _ = ctl("--socket", other.Socket, "device", "list")
		if code == 0 && regexp.MustCompile(victim.Name+`-bmc +ipmi +`+victim.Name+` \(level 1\) +ok +\d+s ago +\d+ms +-`).MatchString(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("device list never showed %s-bmc healthy: %d\n%s", victim.Name, code, out)
		}
	}
	if !regexp.MustCompile(`(?m)^DEVICE +AGENT +FENCES +HEALTH +LAST CHECK +LATENCY +ERROR$`).MatchString(out) ||
		!regexp.MustCompile(other.Name+`-bmc +ipmi +`+other.Name+` \(level 1\) +not checked here +- +- +-`).MatchString(out) {
		t.Errorf("device list:\n%s", out)
	}
	code, out, _ = ctl("--socket", other.Socket, "status")
	if code != 0 || !regexp.MustCompile(`(?m)^`+victim.Name+` .* working +`).MatchString(out) || strings.Contains(out, "Fencing:") {
		t.Errorf("status with healthy devices:\n%s", out)
	}
	code, out, _ = ctl("--socket", other.Socket, "device", "status", victim.Name+"-bmc")
	if code != 0 || !strings.Contains(out, "monitor ok") || !strings.Contains(out, "on") {
		t.Errorf("device status: %d\n%s", code, out)
	}
	code, out, stderr = ctl("--socket", other.Socket, "fence", victim.Name, "--yes", "--reason", "ctl-test")
	if code != 0 || !strings.Contains(out, "SUCCESS") {
		t.Fatalf("fence: %d\n%s%s", code, out, stderr)
	}
	code, out, _ = ctl("--socket", other.Socket, "history", victim.Name, "-v")
	if code != 0 || !strings.Contains(out, "ctl-test") || !strings.Contains(out, "read back off") {
		t.Errorf("history: %d\n%s", code, out)
	}
	// The history names the user who asked, from the socket's peer
	// credentials, and the node asked.
	me, _ := user.Current()
	if !strings.Contains(out, me.Username+"@"+other.Name) {
		t.Errorf("history does not name %s@%s:\n%s", me.Username, other.Name, out)
	}
	code, _, stderr = ctl("--socket", other.Socket, "fence", "nosuchnode", "--yes")
	if code != exitFailure || !strings.Contains(stderr, `unknown node "nosuchnode"`) {
		t.Errorf("fence of an unknown node: %d %s", code, stderr)
	}

	// Every -o json output, errors included, matches its published schema.
	jsonOut := func(schema string, wantCode int, args ...string) string {
		t.Helper()
		code, out, stderr := ctl(append([]string{"--socket", other.Socket, "-o", "json"}, args...)...)
		if code != wantCode {
			t.Errorf("%v: exit %d, want %d\n%s%s", args, code, wantCode, out, stderr)
		}
		if wantCode != 0 {
			checkSchema(t, "error.json", stderr)
		}
		if schema != "" {
			checkSchema(t, schema, out)
		}
		return out
	}
	jsonOut("status.json", 0, "status")
	jsonOut("history.json", 0, "history")
	jsonOut("history.json", 0, "history", victim.Name)
	jsonOut("history.json", 0, "history", "--since", "1h", "--kind", "fence,election,primacy")
	jsonOut("timeline.json", 0, "history", "--timeline")
	jsonOut("devices.json", 0, "device", "list")
	jsonOut("device-status.json", 0, "device", "status", p.Name+"-bmc")
	jsonOut("version.json", 0, "version")
	jsonOut("standby.json", 0, "standby", other.Name)
	jsonOut("standby.json", 0, "standby", other.Name, "--off")
	jsonOut("reload.json", 0, "reload")
	jsonOut("config-accept.json", 0, "config", "accept")
	jsonOut("", exitFailure, "fence", "nosuchnode", "--yes")
	jsonOut("", exitNotConfirmed, "fence", victim.Name)
	jsonOut("", exitUsage, "history", "a", "b")
	if out := jsonOut("", exitFailure, "unfence", "nosuchnode"); out != "" {
		t.Errorf("a refused unfence printed a document on stdout: %s", out)
	}
	if !strings.Contains(jsonOut("record.json", 0, "unfence", victim.Name), `"kind": "unfence"`) {
		t.Error("unfence -o json is not an unfence record")
	}

	code, out, _ = ctl("--socket", other.Socket, "version")
	if code != 0 || !strings.Contains(out, "fencectl ") || !strings.Contains(out, "fenced ") || !strings.Contains(out, "on "+other.Name) {
		t.Errorf("version: %d\n%s", code, out)
	}

	// status --watch, as lines and as JSON documents, until cancelled.
	for _, mode := range []string{"table", "json"} {
		wctx, stop := context.WithCancel(ctx)
		var outb, errb bytes.Buffer
		done := make(chan int)
		go func() {
			done <- Run(wctx, []string{"--socket", other.Socket, "-o", mode, "status", "--watch", "--interval", "100ms"}, strings.NewReader(""), &outb, &errb)
		}()
		time.Sleep(700 * time.Millisecond)
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("watch -o %s: exit %d after cancel: %s", mode, code, errb.String())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("watch -o %s did not end on cancel", mode)
		}
		if mode == "json" {
			if n := checkSchemaLines(t, "status.json", outb.String()); n < 1 {
				t.Errorf("watch -o json printed no document")
			}
		} else if !strings.Contains(outb.String(), "quorum: yes — ") || !strings.Contains(outb.String(), " of 3 votes reachable, 2 needed, leader ") || !strings.Contains(outb.String(), "node "+p.Name+" (data): alive") {
			t.Errorf("watch lines:\n%s", outb.String())
		}
	}

	// A BMC whose password was changed: the node asked warns that the
	// node behind it has no working fence path, until it is changed back.
	bmc := c.BMCs[p.Index]
	if err := bmc.SetPassword("changed-by-someone"); err != nil {
		t.Fatal(err)
	}
	warning := regexp.MustCompile(`(?m)^Fencing:  ` + p.Name + `: no working fence path: ` + p.Name + `-bmc auth failed \d+s ago$`)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, out, _ = ctl("--socket", other.Socket, "status")
		if warning.MatchString(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fence path warning for %s:\n%s", p.Name, out)
		}
	}
	if !regexp.MustCompile(`(?m)^` + p.Name + ` .* NONE WORKING +`).MatchString(out) {
		t.Errorf("status table does not flag %s:\n%s", p.Name, out)
	}
	jsonOut("status.json", 0, "status")
	jsonOut("devices.json", 0, "device", "list")
	_, out, _ = ctl("--socket", other.Socket, "device", "list")
	if !regexp.MustCompile(p.Name + `-bmc .* FAILING \(auth\) for \d+s\b.*authentication`).MatchString(out) {
		t.Errorf("device list with a changed password:\n%s", out)
	}
	if strings.Contains(out, devcluster.BMCPassword) {
		t.Errorf("device list shows the password:\n%s", out)
	}
	// Each line names the device once: the row, the header and the error
	// do not say it again ("device node2-bmc: device node2-bmc: ...").
	dev := p.Name + "-bmc"
	if strings.Contains(out, "device "+dev+":") {
		t.Errorf("device list repeats the device's name in its error:\n%s", out)
	}
	code, out, stderr = ctl("--socket", other.Socket, "device", "status", dev)
	if code != exitFailure || !strings.Contains(out, "Device "+dev+" (ipmi): monitor FAILED: ipmi ") ||
		!strings.Contains(stderr, "fencectl: device "+dev+": monitor failed: ipmi ") || strings.Count(out+stderr, "device "+dev+":") != 1 {
		t.Errorf("device status with a changed password: exit %d\n%s%s", code, out, stderr)
	}
	if err := bmc.SetPassword(devcluster.BMCPassword); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, out, _ = ctl("--socket", other.Socket, "status")
		if !strings.Contains(out, "Fencing:") && regexp.MustCompile(`(?m)^`+p.Name+` .* working +`).MatchString(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fence path of %s not working again:\n%s", p.Name, out)
		}
	}

	// transfer last: it moves leadership.
	jsonOut("transfer.json", 0, "transfer")
}
