package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/harness/devcluster"
	"github.com/fenced/fenced/quorum"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// fencedBinary builds this command once per test run: run and validate are
// compared as an admin runs them, as processes.
func fencedBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fenced-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "fenced")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// threeNodes is a cluster of two data nodes and a witness on free loopback
// ports, with one device per data node whose password file is passwords
// (nothing is there unless the test writes it), a hooks resource and an
// alert; extra is appended.
func threeNodes(t *testing.T, dir, extra string) string {
	t.Helper()
	taken := map[int]bool{}
	port := func() int {
		// A port freed at once can be handed out again: six distinct.
		for {
			p, err := devcluster.FreePort("127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			if !taken[p] {
				taken[p] = true
				return p
			}
		}
	}
	y := fmt.Sprintf(`version: 1
cluster: {name: c1}
gossip: {plaintext: true}
nodes:
  - name: a
    gossip: 127.0.0.1:%d
    raft: 127.0.0.1:%d
    fence: [{devices: [{device: bmc-a}]}]
  - name: b
    gossip: 127.0.0.1:%d
    raft: 127.0.0.1:%d
    fence: [{devices: [{device: bmc-b}]}]
  - {name: w, role: witness, gossip: "127.0.0.1:%d", raft: "127.0.0.1:%d"}
data_dir: %[7]s/data
api: {socket: %[7]s/fenced.sock}
devices:
  bmc-a:
    agent: ipmi
    params: {ip: 127.0.0.1, ipport: "1", username: admin, password_file: %[7]s/secrets/bmc-a}
  bmc-b:
    agent: ipmi
    params: {ip: 127.0.0.1, ipport: "2", username: admin, password_file: %[7]s/secrets/bmc-b}
resources:
  - name: app
    hooks: {start: %[7]s/hooks/start, stop: %[7]s/hooks/stop}
%s`, port(), port(), port(), port(), port(), port(), dir, extra)
	return writeConfig(t, dir, y)
}

// startProcess runs fenced with args until it logs want (then it is sent
// SIGTERM) or exits; it returns the exit status (-1: it was still running
// when want appeared) and what it wrote.
func startProcess(t *testing.T, want string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, fencedBinary(t), args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	seen := false
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if want != "" && !seen && strings.Contains(sc.Text(), want) {
			seen = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	err = cmd.Wait()
	if seen {
		return -1, log.String()
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String() + log.String()
	}
	if err != nil {
		t.Fatalf("fenced %v: %v", args, err)
	}
	return 0, out.String() + log.String()
}

// TestValidateAsRun: fenced validate accepts what fenced run accepts and
// refuses what it refuses, with the same problem at the same line, for
// the node either is run as — both real processes.
func TestValidateAsRun(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"secrets", "hooks"} {
		os.Mkdir(filepath.Join(dir, d), 0o700)
	}
	cases := []struct {
		name  string
		extra string
		node  string
		ok    bool   // both accept (run starts)
		want  string // else: the problem both report
	}{
		// A witness fences nobody and runs nothing: the data nodes'
		// password files and the resources' programs are not on its disk.
		{name: "witness without secrets or programs", node: "w", ok: true},
		// A data node needs both.
		{name: "data node without its secrets", node: "a", want: ": devices.bmc-b.params.password_file: open " + dir + "/secrets/bmc-b: no such file or directory"},
		// Alerts run on every node, a witness too.
		{name: "witness without its alert program", node: "w", extra: "alerts:\n  - name: log\n    path: " + dir + "/alert\n",
			want: ":%d: alerts[0].path: stat " + dir + "/alert: no such file or directory"},
		// The file's node: names this node.
		{name: "node: not a configured node", extra: "node: zz\n", want: `:%d: node: unknown node name "zz" (from node; configured: a, b, w)`},
		{name: "data_dir a file", node: "w", extra: "data_dir: /etc/hostname\n", want: ":%d: data_dir: /etc/hostname is not a directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := threeNodes(t, t.TempDir(), tc.extra)
			// The fixture's own paths live under dir: rewrite them there.
			b, _ := os.ReadFile(cfg)
			fixture := filepath.Dir(cfg)
			body := strings.ReplaceAll(string(b), fixture+"/secrets", dir+"/secrets")
			body = strings.ReplaceAll(body, fixture+"/hooks", dir+"/hooks")
			if strings.Contains(tc.extra, "data_dir:") {
				body = strings.Replace(body, "data_dir: "+fixture+"/data\n", "", 1)
			}
			os.WriteFile(cfg, []byte(body), 0o600)
			want := tc.want
			if strings.Contains(want, "%d") {
				// The problem is at the line of the extra's last key.
				lines := strings.Split(strings.TrimSpace(tc.extra), "\n")
				last := lines[len(lines)-1]
				want = fmt.Sprintf(want, strings.Count(body[:strings.Index(body, last)], "\n")+1)
			}
			args := []string{"--config", cfg}
			if tc.node != "" {
				args = append(args, "--node", tc.node)
			}
			vcode, vout := startProcess(t, "", append([]string{"validate"}, args...)...)
			rcode, rout := startProcess(t, "fenced started", append([]string{"run"}, args...)...)
			if tc.ok {
				if vcode != 0 {
					t.Errorf("validate: exit %d, want 0:\n%s", vcode, vout)
				}
				if rcode != -1 {
					t.Errorf("run: exit %d, want it to start:\n%s", rcode, rout)
				}
				return
			}
			if vcode != exitConfig || !strings.Contains(vout, want) {
				t.Errorf("validate: exit %d, want %d with %q:\n%s", vcode, exitConfig, want, vout)
			}
			if rcode != exitConfig || !strings.Contains(rout, want) {
				t.Errorf("run: exit %d, want %d with %q:\n%s", rcode, exitConfig, want, rout)
			}
		})
	}
}

// TestKeygen: fenced keygen writes a key the daemon reads, readable by its
// owner alone, and never replaces one unless told to.
func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "gossip.key")
	code, out, stderr := runFenced(t, "keygen", "--out", key)
	if code != 0 || !strings.Contains(out, "wrote a 32-byte cluster key to "+key) {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	fi, err := os.Stat(key)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o400 {
		t.Errorf("mode %04o, want 0400", m)
	}
	first, _ := os.ReadFile(key)
	if k, err := quorum.ReadKey(key); err != nil || len(k) != 32 {
		t.Fatalf("the daemon cannot read the key: %v (%d bytes)", err, len(k))
	}
	code, _, stderr = runFenced(t, "keygen", "--out", key)
	if code != exitFailure || !strings.Contains(stderr, "exists: not replaced") {
		t.Errorf("second keygen: exit %d: %s", code, stderr)
	}
	if again, _ := os.ReadFile(key); !bytes.Equal(again, first) {
		t.Error("an existing key was replaced")
	}
	if code, _, stderr = runFenced(t, "keygen", "--out", key, "--force", "--bytes", "16"); code != 0 {
		t.Fatalf("keygen --force: exit %d: %s", code, stderr)
	}
	if k, err := quorum.ReadKey(key); err != nil || len(k) != 16 {
		t.Errorf("after --force --bytes 16: %v (%d bytes)", err, len(k))
	}
	if code, _, stderr = runFenced(t, "keygen", "--out", key, "--bytes", "20"); code != exitUsage {
		t.Errorf("--bytes 20: exit %d, want %d: %s", code, exitUsage, stderr)
	}
}

// TestKeyAndSecretModes: a missing key names the command that creates it;
// a key or a device's secret file that others can read is warned of by
// validate and by run (both real processes), and not on a witness for the
// secrets it never reads.
func TestKeyAndSecretModes(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"secrets", "hooks"} {
		os.Mkdir(filepath.Join(dir, d), 0o700)
	}
	key := filepath.Join(dir, "gossip.key")
	cfg := threeNodes(t, dir, "")
	b, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(b), "gossip: {plaintext: true}", "gossip: {key_file: "+key+"}", 1)), 0o600)

	code, out := startProcess(t, "", "validate", "--config", cfg, "--node", "w")
	if want := "gossip.key_file: open " + key + ": no such file or directory: create the cluster's key on one node with `fenced keygen --out " + key + "`"; code != exitConfig || !strings.Contains(out, want) {
		t.Errorf("missing key: exit %d, want %d with %q:\n%s", code, exitConfig, want, out)
	}
	if code, _, stderr := runFenced(t, "keygen", "--out", key); code != 0 {
		t.Fatal(stderr)
	}
	for _, f := range []string{"secrets/bmc-a", "secrets/bmc-b"} {
		os.WriteFile(filepath.Join(dir, f), []byte("pw\n"), 0o644)
	}
	for _, f := range []string{"hooks/start", "hooks/stop"} {
		os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), 0o755)
	}
	if code, out := startProcess(t, "", "validate", "--config", cfg, "--node", "a"); code != 0 || strings.Contains(out, "warning: "+key) {
		t.Errorf("a key of mode 0400: exit %d:\n%s", code, out)
	}
	os.Chmod(key, 0o644)
	keyWarning := "gossip.key_file: warning: " + key + " can be read by every user (mode 0644): chmod 0400 " + key
	secretWarning := "devices.bmc-a.params.password_file: warning: " + dir + "/secrets/bmc-a can be read by every user (mode 0644)"
	code, out = startProcess(t, "", "validate", "--config", cfg, "--node", "a")
	if code != 0 || !strings.Contains(out, keyWarning) || !strings.Contains(out, secretWarning) {
		t.Errorf("validate as a data node: exit %d, want 0 with %q and %q:\n%s", code, keyWarning, secretWarning, out)
	}
	code, out = startProcess(t, "", "validate", "--config", cfg, "--node", "w")
	if code != 0 || !strings.Contains(out, keyWarning) || strings.Contains(out, "secrets/bmc-a can be read") {
		t.Errorf("validate as the witness: exit %d, want 0 with the key's warning alone:\n%s", code, out)
	}
	code, out = startProcess(t, "fenced started", "run", "--config", cfg, "--node", "w")
	if code != -1 || !strings.Contains(out, "can be read by every user (mode 0644): chmod 0400 "+key) {
		t.Errorf("run as the witness: exit %d, want it to start and warn of the key:\n%s", code, out)
	}
}

// TestSecondDaemonOnDataDir: a second fenced on the data directory of one
// that runs is refused at once, naming the first one's PID.
func TestSecondDaemonOnDataDir(t *testing.T) {
	dir := t.TempDir()
	cfg := threeNodes(t, dir, "")
	first := exec.Command(fencedBinary(t), "run", "--config", cfg, "--node", "w")
	stderr, _ := first.StderrPipe()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { first.Process.Kill(); first.Wait() }()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), "fenced started") {
	}
	go func() {
		for sc.Scan() {
		}
	}()
	code, out := startProcess(t, "fenced started", "run", "--config", cfg, "--node", "w")
	want := fmt.Sprintf("data_dir %s/data is locked by PID %d (fenced): another fenced runs on it", dir, first.Process.Pid)
	if code != exitStartup || !strings.Contains(out, want) {
		t.Errorf("second daemon: exit %d, want %d with %q:\n%s", code, exitStartup, want, out)
	}
}
