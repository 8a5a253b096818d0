package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func runFenced(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "fenced.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func freeAddr(t *testing.T) (string, net.Listener) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Addr().String(), l
}

const goodNodes = `gossip: {plaintext: true}
nodes:
  - {name: a, gossip: "%s", raft: "%s"}
  - {name: b, gossip: 127.0.0.1:1, raft: 127.0.0.1:2}
  - {name: c, gossip: 127.0.0.1:3, raft: 127.0.0.1:4}
`

// TestBadInput: every bad input yields a clear error naming the field or
// path, with the documented exit status, and no panic.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	g, gl := freeAddr(t)
	gl.Close()
	busy, busyL := freeAddr(t) // held open: "port in use"
	defer busyL.Close()
	file := filepath.Join(dir, "a-file")
	os.WriteFile(file, nil, 0o600)
	sock := filepath.Join(dir, "s.sock")

	cases := []struct {
		name string
		cfg  string
		args []string
		code int
		want string
	}{
		{"unknown field", "version: 1\ncluster: {name: x}\nbogus: 1\n" + fmt.Sprintf(goodNodes, g, busy), []string{"validate"}, exitConfig, `:3: unknown field "bogus"`},
		{"wrong type", "version: 1\ncluster: {name: x}\ntiming: {lease: soon}\n" + fmt.Sprintf(goodNodes, g, busy), []string{"validate"}, exitConfig, `:3: timing.lease: "soon" is not a duration`},
		{"even node count", "version: 1\ncluster: {name: x}\ngossip: {plaintext: true}\nnodes:\n  - {name: a, gossip: 127.0.0.1:1, raft: 127.0.0.1:2}\n  - {name: b, gossip: 127.0.0.1:3, raft: 127.0.0.1:4}\n", []string{"validate"}, exitConfig, "nodes: 2 voting nodes"},
		{"unknown node name", "version: 1\ncluster: {name: x}\n" + fmt.Sprintf(goodNodes, g, busy), []string{"run", "--node", "zz"}, exitConfig, `node: unknown node name "zz" (from --node; configured: a, b, c)`},
		{"port in use", "version: 1\ncluster: {name: x}\n" + fmt.Sprintf(goodNodes, g, busy) + "data_dir: " + dir + "/data\napi: {socket: " + sock + "}\n", []string{"run", "--node", "a"}, exitStartup, "raft address " + busy},
		{"data dir under a file", "version: 1\ncluster: {name: x}\n" + fmt.Sprintf(goodNodes, g, "127.0.0.1:9") + "data_dir: " + file + "/sub\napi: {socket: " + sock + "}\n", []string{"run", "--node", "a"}, exitConfig, ":8: data_dir: " + file + "/sub cannot be a directory"},
		{"data dir is a file", "version: 1\ncluster: {name: x}\n" + fmt.Sprintf(goodNodes, g, "127.0.0.1:9") + "data_dir: " + file + "\napi: {socket: " + sock + "}\n", []string{"validate", "--node", "a"}, exitConfig, ":8: data_dir: " + file + " is not a directory"},
		{"unknown node name in the file", "version: 1\ncluster: {name: x}\nnode: zz\n" + fmt.Sprintf(goodNodes, g, busy), []string{"validate"}, exitConfig, `:3: node: unknown node name "zz" (from node; configured: a, b, c)`},
		{"unknown node name to validate", "version: 1\ncluster: {name: x}\n" + fmt.Sprintf(goodNodes, g, busy), []string{"validate", "--node", "zz"}, exitConfig, `node: unknown node name "zz" (from --node; configured: a, b, c)`},
		{"not this machine's address", "version: 1\ncluster: {name: x}\n" + fmt.Sprintf(goodNodes, "192.0.2.1:7946", busy), []string{"validate", "--node", "a"}, exitConfig, ":5: nodes[0].gossip: 192.0.2.1 is not an address of this machine (cannot assign requested address): is this machine a?"},
		{"unknown api group", "version: 1\ncluster: {name: x}\n" + fmt.Sprintf(goodNodes, g, busy) + "api: {socket: " + sock + ", group: no-such-group-here}\n", []string{"validate", "--node", "a"}, exitConfig, `api.group: "no-such-group-here" is not a group on this machine`},
		{"missing file", "", []string{"validate", "--config", filepath.Join(dir, "nope.yaml")}, exitConfig, "nope.yaml: no such file"},
		{"bad flag", "", []string{"run", "--frobnicate"}, exitUsage, "unknown flag: --frobnicate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.cfg != "" {
				args = append(args, "--config", writeConfig(t, t.TempDir(), tc.cfg))
			}
			code, _, stderr := runFenced(t, args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr does not contain %q:\n%s", tc.want, stderr)
			}
			if lines := strings.Count(strings.TrimSpace(stderr), "\n") + 1; lines != 1 {
				t.Errorf("want a one-line error, got %d lines:\n%s", lines, stderr)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("panic: %s", stderr)
			}
		})
	}
}

// TestValidateSample runs `fenced validate` on the shipped sample: its only
// problems on a machine without the sample's secret files are those files
// (the schema itself is checked in daemon/config).
func TestValidateSample(t *testing.T) {
	code, _, stderr := runFenced(t, "validate", "--config", "../../etc/fenced.yaml")
	if code != exitConfig {
		t.Fatalf("exit %d, want %d (secret files missing): %s", code, exitConfig, stderr)
	}
	_, noGroup := user.LookupGroup("fenced") // the package creates it
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		switch {
		case strings.Contains(line, "no such file or directory") && strings.Contains(line, "/etc/fenced/"):
		case noGroup != nil && strings.Contains(line, `api.group: "fenced" is not a group on this machine`):
		default:
			t.Errorf("unexpected problem: %s", line)
		}
	}
}

func TestHelpDocumentsExitCodes(t *testing.T) {
	code, out, _ := runFenced(t, "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"3  configuration invalid", "4  could not start", "run", "validate", "version"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestValidateOffline: the shipped sample passes `fenced validate
// --offline` (syntax and rules only) on a machine that has none of its
// files or agents, and prints its fingerprint.
func TestValidateOffline(t *testing.T) {
	code, out, stderr := runFenced(t, "validate", "--offline", "--config", "../../etc/fenced.yaml")
	if code != 0 || !strings.Contains(out, "ok (3 nodes, majority 2; cluster configuration fingerprint ") {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	// Offline still finds what breaks the rules, each at its line.
	dir := t.TempDir()
	p := writeConfig(t, dir, `version: 1
cluster: {name: c1}
nodes:
  - {name: a, gossip: 127.0.0.1:7001, raft: 127.0.0.1:7101}
  - {name: b, gossip: 127.0.0.1:7002, raft: 127.0.0.1:7102}
  - {name: c, gossip: 127.0.0.1:7003, raft: 127.0.0.1:7103, fence: [{devices: [{device: x}]}]}
gossip: {plaintext: true}
metrics: {listen: 127.0.0.1:7001}
devices:
  x: {agent: exec, params: {ip: 10.0.0.1}}
`)
	code, _, stderr = runFenced(t, "validate", "--offline", "--config", p)
	if code != exitConfig {
		t.Fatalf("exit %d, want %d: %s", code, exitConfig, stderr)
	}
	for _, want := range []string{p + ":10: devices.x.params: parameter agent: required", p + ":8: metrics.listen: 127.0.0.1:7001 is nodes[0].gossip"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// TestValidateMissingFiles: every missing file is reported the same way,
// FILE:LINE: PATH: the error — the cluster key and an ipmi password_file
// too, which `fenced run` would otherwise only find at start.
func TestValidateMissingFiles(t *testing.T) {
	dir := t.TempDir()
	p := writeConfig(t, dir, `version: 1
cluster: {name: c1}
nodes:
  - {name: a, gossip: 127.0.0.1:7001, raft: 127.0.0.1:7101}
  - {name: b, gossip: 127.0.0.1:7002, raft: 127.0.0.1:7102}
  - {name: c, gossip: 127.0.0.1:7003, raft: 127.0.0.1:7103, fence: [{devices: [{device: bmc}]}]}
gossip: {key_file: `+dir+`/missing.key}
devices:
  bmc:
    agent: ipmi
    params: {ip: 10.0.0.1, username: admin, password_file: `+dir+`/missing.pw}
alerts:
  - {name: f, path: `+dir+`/missing-agent}
`)
	code, out, stderr := runFenced(t, "validate", "--config", p)
	if code != exitConfig {
		t.Fatalf("exit %d, want %d: %s%s", code, exitConfig, out, stderr)
	}
	for _, want := range []string{
		p + ":7: gossip.key_file: open " + dir + "/missing.key: no such file or directory",
		p + ":11: devices.bmc.params.password_file: open " + dir + "/missing.pw: no such file or directory",
		p + ":13: alerts[0].path: stat " + dir + "/missing-agent: no such file or directory",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if n := strings.Count(stderr, "missing.pw"); n != 1 {
		t.Errorf("the password file reported %d times:\n%s", n, stderr)
	}
	// fenced run reports the same, as a configuration problem (3).
	code, _, stderr = runFenced(t, "run", "--config", p, "--node", "a")
	if code != exitConfig || !strings.Contains(stderr, "gossip.key_file: open") {
		t.Errorf("run: exit %d: %s", code, stderr)
	}
}

// The daemon runs on one processor unless GOMAXPROCS is set.
func TestOneProcessor(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(4)
	t.Setenv("GOMAXPROCS", "4")
	oneProcessor()
	if n := runtime.GOMAXPROCS(0); n != 4 {
		t.Errorf("GOMAXPROCS=4 in the environment: %d processors, want 4", n)
	}
	t.Setenv("GOMAXPROCS", "")
	oneProcessor()
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("no GOMAXPROCS in the environment: %d processors, want 1", n)
	}
}
