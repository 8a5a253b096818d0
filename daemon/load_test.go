package daemon_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenced/fenced/agents"
	_ "github.com/fenced/fenced/agents/pdu"
	"github.com/fenced/fenced/daemon"
	"github.com/fenced/fenced/daemon/config"
	"github.com/fenced/fenced/harness/devcluster"
)

// oneNodeConfig writes a valid one-node configuration whose api.socket is
// sock (plus extra YAML) and returns its path.
func oneNodeConfig(t *testing.T, dir, sock, extra string) string {
	t.Helper()
	g, err := devcluster.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	r, err := devcluster.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	y := fmt.Sprintf(`version: 1
cluster: {name: t}
nodes:
  - {name: a, gossip: "127.0.0.1:%d", raft: "127.0.0.1:%d"}
gossip: {plaintext: true}
data_dir: %s
api:
  socket: %s
%s`, g, r, filepath.Join(dir, "data"), sock, extra)
	path := filepath.Join(dir, "fenced.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// An api.socket path naming anything but a socket (a file someone cares
// about, a directory) is refused by validation and at start, and the file
// is left alone. A stale socket is still replaced.
func TestSocketPathMustBeASocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "precious")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "adir")
	os.Mkdir(sub, 0o755)
	for _, target := range []string{file, sub} {
		path := oneNodeConfig(t, t.TempDir(), target, "")
		_, err := daemon.CheckConfig(path, "", "", agents.Default)
		var ps config.Problems
		if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Path != "api.socket" || ps[0].Line != 8 || !strings.Contains(ps[0].Msg, "not a socket") {
			t.Errorf("validate with api.socket %s: %v, want one problem at line 8 saying it is not a socket", target, err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Node = "a"
		d, err := daemon.New(cfg, daemon.Options{})
		if err == nil {
			d.Close()
			t.Errorf("start with api.socket %s: no error", target)
		} else if !strings.Contains(err.Error(), "not a socket") {
			t.Errorf("start with api.socket %s: %v", target, err)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the file at api.socket was changed: %q %v", b, err)
	}

	// A socket left by a crashed daemon (nothing answers) is replaced.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	path := oneNodeConfig(t, t.TempDir(), stale, "")
	if _, err := daemon.CheckConfig(path, "", "", agents.Default); err != nil {
		t.Errorf("validate with a stale socket: %v", err)
	}
	cfg, _ := config.Load(path)
	cfg.Node = "a"
	d, err := daemon.New(cfg, daemon.Options{})
	if err != nil {
		t.Fatalf("start over a stale socket: %v", err)
	}
	d.Close()
}

// Problems an agent's constructor finds carry the line of the parameter
// at fault, so FILE:LINE points at what to fix.
func TestAgentProblemsHaveLines(t *testing.T) {
	dir := t.TempDir()
	path := oneNodeConfig(t, dir, filepath.Join(dir, "s.sock"), `devices:
  pdu:
    agent: pdu
    params:
      ip: 127.0.0.1
      community_file: /nonexistent/community
`)
	// Give node a its fence level on the PDU.
	b, _ := os.ReadFile(path)
	y := strings.Replace(string(b), `raft: "127.0.0.1:`, `fence: [{devices: [{device: pdu, plug: "3"}]}], raft: "127.0.0.1:`, 1)
	os.WriteFile(path, []byte(y), 0o600)
	_, err := daemon.CheckConfig(path, "", "", agents.Default)
	var ps config.Problems
	if !errors.As(err, &ps) || len(ps) != 1 {
		t.Fatalf("want one problem, got %v", err)
	}
	if ps[0].Line != 14 || !strings.Contains(ps[0].String(), "community_file") {
		t.Errorf("problem %q: want line 14 (community_file)", ps[0])
	}
}
