// Package pdutest runs snmpsimd (the snmpsim SNMP agent simulator) on a free
// loopback port with given .snmprec data, for tests of PDU fencing.
//
// snmpsim keeps SET values of variables tagged `writecache` and reads them
// back, which is enough to stand in for a switched PDU's outlet table. The
// data file name (without .snmprec) is the v1/v2c community and the v3
// context name.
package pdutest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosnmp/gosnmp"
)

// V3User is an SNMPv3 USM user snmpsimd accepts (authPriv with SHA and AES
// when both keys are set).
type V3User struct {
	Name    string
	AuthKey string // at least 8 characters
	PrivKey string // at least 8 characters
}

// Options of a simulator.
type Options struct {
	// DataDir holds *.snmprec files; they are copied, so tests may share it.
	DataDir string
	// V3 adds an SNMPv3 user when Name is set.
	V3 V3User
}

// Sim is one running snmpsimd.
type Sim struct {
	Addr string // 127.0.0.1:PORT
	Host string
	Port int

	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// Start runs snmpsimd with opts and waits until it answers; it registers
// Stop with t.Cleanup. A missing snmpsimd fails the test (install the
// Debian package snmpsim), except in -short mode where the test is skipped.
func Start(t testing.TB, opts Options) *Sim {
	t.Helper()
	bin, err := exec.LookPath("snmpsimd")
	if err != nil {
		if testing.Short() {
			t.Skip("snmpsimd not installed (-short)")
		}
		t.Fatalf("snmpsimd not found: install the Debian package snmpsim (make test-deps): %v", err)
	}
	s, err := start(bin, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func start(bin string, opts Options) (*Sim, error) {
	dir, err := os.MkdirTemp("", "pdutest-")
	if err != nil {
		return nil, err
	}
	s := &Sim{dir: dir, done: make(chan struct{})}
	data, cache := filepath.Join(dir, "data"), filepath.Join(dir, "cache")
	if err := copyDir(opts.DataDir, data); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("pdutest: copy data: %w", err)
	}
	// snmpsimd drops to nobody (it refuses to run as root); its index cache
	// and the directory path must be usable by that user.
	if err := os.MkdirAll(cache, 0o755); err != nil {
		s.cleanup()
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		s.cleanup()
		return nil, err
	}
	if u, err := user.Lookup("nobody"); err == nil && os.Geteuid() == 0 {
		uid, _ := strconv.Atoi(u.Uid)
		_ = os.Chown(cache, uid, -1)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freeUDPPort()
		if err != nil {
			s.cleanup()
			return nil, err
		}
		args := []string{
			"--data-dir=" + data, "--cache-dir=" + cache,
			"--agent-udpv4-endpoint=127.0.0.1:" + strconv.Itoa(port),
			"--logging-method=file:" + filepath.Join(dir, "snmpsimd.log"),
		}
		if os.Geteuid() == 0 {
			args = append(args, "--process-user=nobody", "--process-group=nogroup")
		}
		if opts.V3.Name != "" {
			args = append(args, "--v3-user="+opts.V3.Name)
			if opts.V3.AuthKey != "" {
				args = append(args, "--v3-auth-key="+opts.V3.AuthKey, "--v3-auth-proto=SHA")
			}
			if opts.V3.PrivKey != "" {
				args = append(args, "--v3-priv-key="+opts.V3.PrivKey, "--v3-priv-proto=AES")
			}
		}
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			s.cleanup()
			return nil, fmt.Errorf("pdutest: start snmpsimd: %w", err)
		}
		s.cmd, s.Host, s.Port = cmd, "127.0.0.1", port
		s.Addr = net.JoinHostPort(s.Host, strconv.Itoa(port))
		s.done = make(chan struct{})
		go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
		if lastErr = s.waitReady(community(opts.DataDir), 15*time.Second); lastErr == nil {
			return s, nil
		}
		s.kill()
		log, _ := os.ReadFile(filepath.Join(dir, "snmpsimd.log"))
		lastErr = fmt.Errorf("%w\nsnmpsimd output:\n%s\nlog tail:\n%s", lastErr, out.String(), tail(string(log), 2000))
	}
	s.cleanup()
	return nil, fmt.Errorf("pdutest: snmpsimd did not come up: %w", lastErr)
}

// community returns the first data file's community, used to probe readiness.
func community(dataDir string) string {
	m, _ := filepath.Glob(filepath.Join(dataDir, "*.snmprec"))
	if len(m) == 0 {
		return "public"
	}
	return strings.TrimSuffix(filepath.Base(m[0]), ".snmprec")
}

func (s *Sim) waitReady(comm string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("snmpsimd exited")
		default:
		}
		g := &gosnmp.GoSNMP{Target: s.Host, Port: uint16(s.Port), Community: comm, Version: gosnmp.Version2c, Timeout: 200 * time.Millisecond, Retries: 0, Context: context.Background()}
		if err := g.Connect(); err == nil {
			_, err = g.Get([]string{"1.3.6.1.2.1.1.2.0"})
			g.Conn.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer on %s within %s", s.Addr, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the simulator (its state is lost) and removes its files. It is
// safe to call more than once, so a test may stop a PDU to make it "down".
func (s *Sim) Stop() {
	s.kill()
	s.cleanup()
}

func (s *Sim) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

func (s *Sim) cleanup() {
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
		s.dir = ""
	}
}

func freeUDPPort() (int, error) {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pdutest: free port: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
