package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// localAddress is an IPv4 address of this machine that is not loopback,
// or "" when it has none.
func localAddress() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// TestSimIPMI runs `fenced-lab sim ipmi` on loopback and on an address of
// this machine that is not loopback, with a host command that starts a
// process of its own in the background, and drives it with `fenced agent
// ipmi` (a real process): status reads on, off powers the node off — every
// process of the command, the one in the background too — and status then
// reads off.
func TestSimIPMI(t *testing.T) {
	t.Run("loopback", func(t *testing.T) { testSimIPMI(t, "127.0.0.1") })
	t.Run("another address", func(t *testing.T) {
		host := localAddress()
		if host == "" {
			t.Skip("this machine has no address but loopback")
		}
		testSimIPMI(t, host)
	})
}

func testSimIPMI(t *testing.T, host string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	fenced := filepath.Join(dir, "fenced")
	if out, err := exec.Command("go", "build", "-o", fenced, "../fenced").CombinedOutput(); err != nil {
		t.Fatalf("build fenced: %v\n%s", err, out)
	}
	pwFile := filepath.Join(dir, "pw")
	os.WriteFile(pwFile, []byte("sim-Secret-9\n"), 0o600)
	pidFile := filepath.Join(dir, "background.pid")
	// The shell runs a process in the background and waits on another:
	// killing the shell alone would leave both running.
	hostCmd := "sleep 301 & echo $! > " + pidFile + "; sleep 302"

	simCtx, stopSim := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	simDone := make(chan int, 1)
	go func() {
		simDone <- Run(simCtx, []string{"sim", "ipmi", "--listen", net.JoinHostPort(host, "0"), "--password-file", pwFile, "--host-cmd", hostCmd},
			strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	defer func() {
		stopSim()
		if code := <-simDone; code != 0 {
			t.Errorf("fenced-lab sim ipmi exited %d", code)
		}
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the simulator's address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	f := strings.Fields(line) // "ipmi sim listening on HOST:PORT (user admin)"
	if len(f) < 5 {
		t.Fatalf("simulator printed %q", line)
	}
	h, port, err := net.SplitHostPort(f[4])
	if err != nil || h != host {
		t.Fatalf("simulator printed %q: want it listening on %s", line, host)
	}

	agent := func(action string) (int, string) {
		in := "action=" + action + "\nip=" + host + "\nipport=" + port + "\nusername=admin\npassword_file=" + pwFile + "\nlanplus=1\n"
		cmd := exec.CommandContext(ctx, fenced, "agent", "ipmi")
		cmd.Stdin = strings.NewReader(in)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	var background int
	for deadline := time.Now().Add(5 * time.Second); background == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		background, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if background == 0 || processState(background) == "" {
		t.Fatalf("the host command's background process is not running (pid %d)", background)
	}
	if code, out := agent("status"); code != 0 {
		t.Fatalf("status through %s: exit %d, want 0 (on): %s", host, code, out)
	}
	if code, out := agent("off"); code != 0 {
		t.Fatalf("off: exit %d: %s", code, out)
	}
	if st := processState(background); st != "" && st != "Z" {
		t.Errorf("the host command's background process %d survived the power-off (state %s)", background, st)
		syscall.Kill(background, syscall.SIGKILL)
	}
	if code, out := agent("status"); code != 2 {
		t.Errorf("status after off: exit %d, want 2 (off): %s", code, out)
	}
}

// processState is the state letter of process pid ("R", "S", "Z", ...),
// "" when there is none.
func processState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
		if f := strings.Fields(string(b[i+1:])); len(f) > 0 {
			return f[0]
		}
	}
	return ""
}
