package redfish

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fencedBin and labBin are the fenced and fenced-lab binaries built once by TestMain; buildErr says why
// it is missing (the CLI tests then fail, the others still run).
var fencedBin, labBin, buildErr = "", "", error(nil)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redfish-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fencedBin = filepath.Join(dir, "fenced")
	out, err := exec.Command("go", "build", "-o", fencedBin, "github.com/fenced/fenced/cmd/fenced").CombinedOutput()
	if err != nil {
		buildErr = fmt.Errorf("go build fenced: %v: %s", err, out)
	}
	labBin = filepath.Join(dir, "fenced-lab")
	if out, err := exec.Command("go", "build", "-o", labBin, "github.com/fenced/fenced/cmd/fenced-lab").CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("go build fenced-lab: %v: %s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startSimProcess runs `fenced-lab sim redfish` as a real process and returns
// its host:port and CA file.
func startSimProcess(t *testing.T, args ...string) (addr, caFile string) {
	t.Helper()
	dir := t.TempDir()
	caFile = filepath.Join(dir, "ca.pem")
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(labBin, append([]string{"sim", "redfish", "--listen", "127.0.0.1:0", "--tls",
		"--ca-out", caFile, "--user", "root", "--password-file", pw, "--power-delay", "50ms"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		m := regexp.MustCompile(`https://(127\.0\.0\.1:\d+)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("sim printed %q", line)
		}
		return m[1], caFile
	case <-time.After(10 * time.Second):
		t.Fatal("fenced-lab sim redfish did not start")
	}
	return "", ""
}

// runAgent runs `fenced agent redfish` with name=value lines on stdin.
func runAgent(t *testing.T, addr, caFile, action string) (int, string) {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	stdin := fmt.Sprintf("action=%s\nip=%s\nipport=%s\nusername=root\npassword=%s\nca_file=%s\npower_timeout=5\nnodename=node1\n",
		action, host, port, secret, caFile)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, fencedBin, "agent", "redfish")
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), secret) {
		t.Fatalf("secret in agent output: %q", out)
	}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("fenced agent: %v", err)
	}
	return 0, string(out)
}

// `fenced agent redfish` against `fenced-lab sim redfish`, both real processes:
// status exits 0 for on and 2 for off, and power-off kills the node's
// process (--host-cmd).
func TestFencedAgentCommand(t *testing.T) {
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	pidFile := filepath.Join(t.TempDir(), "node.pid")
	addr, ca := startSimProcess(t, "--profile", "idrac", "--host-cmd", "echo $$ > "+pidFile+"; exec sleep 600")

	if code, out := runAgent(t, addr, ca, "status"); code != 0 || !strings.Contains(out, "Status: ON") {
		t.Fatalf("status of an on node: exit %d: %s", code, out)
	}
	var pid int
	for i := 0; i < 100 && pid == 0; i++ {
		b, _ := os.ReadFile(pidFile)
		fmt.Sscan(string(b), &pid)
		time.Sleep(20 * time.Millisecond)
	}
	if pid == 0 || syscall.Kill(pid, 0) != nil {
		t.Fatalf("node process %d not running", pid)
	}
	if code, out := runAgent(t, addr, ca, "off"); code != 0 {
		t.Fatalf("off: exit %d: %s", code, out)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("node process %d still alive after a confirmed off", pid)
	}
	if code, out := runAgent(t, addr, ca, "status"); code != 2 || !strings.Contains(out, "Status: OFF") {
		t.Fatalf("status of an off node: exit %d: %s", code, out)
	}
	if code, out := runAgent(t, addr, ca, "monitor"); code != 0 {
		t.Fatalf("monitor: exit %d: %s", code, out)
	}
}
