package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentSANAgainstSimSAN runs `fenced-lab sim san` and drives it with
// `fenced agent san` (a real process) through the FenceAgentAPI: status exit
// codes are 0 for on and 2 for off.
func TestAgentSANAgainstSimSAN(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	fenced := filepath.Join(dir, "fenced")
	if out, err := exec.Command("go", "build", "-o", fenced, "../fenced").CombinedOutput(); err != nil {
		t.Fatalf("build fenced: %v\n%s", err, out)
	}
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("sim-Secret-9\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	simCtx, stopSim := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	simDone := make(chan int, 1)
	go func() {
		simDone <- Run(simCtx, []string{"sim", "san", "--listen", "127.0.0.1:0", "--password-file", pwFile}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	defer func() {
		stopSim()
		if code := <-simDone; code != 0 {
			t.Errorf("fenced sim san exited %d", code)
		}
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the simulator's address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	f := strings.Fields(line)
	u, err := url.Parse(f[len(f)-3])
	if err != nil || u.Host == "" {
		t.Fatalf("simulator printed %q", line)
	}

	agent := func(action, password string) (int, string) {
		in := strings.Join([]string{
			"action=" + action, "ip=" + u.Hostname(), "ipport=" + u.Port(), "ssl=0",
			"username=admin", "password=" + password,
			"plug=10:00:00:00:c9:aa:00:01,10:00:00:00:c9:aa:00:02",
		}, "\n") + "\n"
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, fenced, "agent", "san")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(in), &out, &errOut
		code := 0
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatal(err)
			}
			code = ee.ExitCode()
		}
		if strings.Contains(out.String()+errOut.String(), password) {
			t.Errorf("%s: output shows the password", action)
		}
		return code, out.String() + errOut.String()
	}
	for _, step := range []struct {
		action string
		want   int
	}{
		{"status", 0}, {"off", 0}, {"status", 2}, {"off", 0}, {"on", 0}, {"status", 0}, {"monitor", 0},
	} {
		if code, out := agent(step.action, "sim-Secret-9"); code != step.want {
			t.Fatalf("fenced agent san -o %s exited %d, want %d: %s", step.action, code, step.want, out)
		}
	}
	if code, out := agent("status", "wrong-Secret-1"); code != 1 || !strings.Contains(out, "credentials rejected") {
		t.Fatalf("status with a wrong password exited %d: %s", code, out)
	}
}
