package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenced/fenced/stonith/fencing"
)

// runAsChild, when set, makes the test binary run fencectl with the JSON
// argument list it holds (a test runs it as another user).
const runAsChild = "FENCECTL_TEST_ARGS"

func init() {
	if v := os.Getenv(runAsChild); v != "" {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			panic(err)
		}
		os.Exit(Run(context.Background(), args, strings.NewReader(""), os.Stdout, os.Stderr))
	}
}

// stuckDaemon accepts connections on a socket and never answers.
func stuckDaemon(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "stuck.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return sock
}

// A daemon that accepts but never answers must not hang fencectl: it gives
// up at --timeout, says the request may still be running, and exits 6.
func TestClientTimeout(t *testing.T) {
	sock := stuckDaemon(t)
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"status"}, []string{"no answer from fenced", "300ms"}},
		{[]string{"fence", "node2", "--yes"}, []string{"no answer from fenced", "may still be running", "fencectl history"}},
	}
	for _, tc := range cases {
		start := time.Now()
		code, _, stderr := ctl(append([]string{"--socket", sock, "--timeout", "300ms"}, tc.args...)...)
		took := time.Since(start)
		if code != 6 {
			t.Errorf("%v: exit %d, want 6 (no answer); stderr %q", tc.args, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, stderr, w)
			}
		}
		if took > 5*time.Second {
			t.Errorf("%v: took %v with --timeout 300ms", tc.args, took)
		}
	}
}

// A socket the user may not open is not a daemon that is down: fencectl
// names the socket, says who may use it, and exits 5.
func TestPermissionDenied(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "fenced.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(sock, 0o660); err != nil {
		t.Fatal(err)
	}
	args := []string{"--socket", sock, "status"}
	var code int
	var stderr string
	if os.Geteuid() == 0 {
		// Root may open any socket: ask as nobody, through this binary.
		if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		// The test binary's own directory is private: run a copy.
		self, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "fencectl.test")
		if err := os.WriteFile(bin, self, 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(args)
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), runAsChild+"="+string(b))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err = cmd.Run()
		stderr = errb.String()
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
	} else {
		if err := os.Chmod(sock, 0); err != nil {
			t.Fatal(err)
		}
		code, _, stderr = ctl(args...)
	}
	if code != 5 {
		t.Errorf("exit %d, want 5 (permission denied); stderr %q", code, stderr)
	}
	for _, w := range []string{"permission denied", sock, "root", "api.group"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q lacks %q", stderr, w)
		}
	}
	if strings.Contains(stderr, "not running") {
		t.Errorf("stderr %q says the daemon is not running", stderr)
	}
}

// Records may hold anything a group member or an older daemon stored:
// the table shows control characters escaped, one row per record.
func TestTableEscapesControlCharacters(t *testing.T) {
	var out bytes.Buffer
	a := &app{out: &out, errw: &out}
	recs := []fencing.Record{{ID: 7, Kind: fencing.KindFence, Target: "node2\x1b[31m", Action: fencing.ActionOff, Outcome: fencing.OutcomeSuccess,
		Reason: "disk\x1b[2J\x1b]0;owned\x07 full\r\n42\t2025-01-01\tfence\tnode9\u202e", RequestedBy: "root@node1", Started: time.Now(), Finished: time.Now()}}
	printRecords(a, recs, false)
	s := out.String()
	for _, bad := range []string{"\x1b", "\r", "\x07", "\u202e"} {
		if strings.Contains(s, bad) {
			t.Errorf("table holds %q:\n%s", bad, s)
		}
	}
	if lines := strings.Count(s, "\n"); lines != 2 {
		t.Errorf("table has %d lines, want a header and one row:\n%s", lines, s)
	}
	if !strings.Contains(s, `\x1b[2J`) {
		t.Errorf("table does not show the escape as text:\n%s", s)
	}
}
